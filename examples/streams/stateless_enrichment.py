"""Stateless enrichment: drop heartbeats, enrich every other event, push it to a sink.

``filter`` and ``map`` get the source message (``data``, ``createdAt``, ``partition``...);
the sink payload is the mapped value, on the source partition's name. No state is read or
written; each cycle pushes the results and acks the batch in one transaction.

Blocking port of the official SDK's ``examples/01_stateless_enrichment.py``. Run with
``QUEEN_URL=... python examples/streams/stateless_enrichment.py`` (embedded broker without).
"""

from __future__ import annotations

import sys

from _common import Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, sink = "enrich-src-%s" % suffix, "enrich-out-%s" % suffix
    events = [{"n": i, "type": ["click", "heartbeat", "view"][i % 3]} for i in range(12)]
    q.queue(src).partition("web").push([{"data": e} for e in events[:6]])
    q.queue(src).partition("app").push([{"data": e} for e in events[6:]])
    runner = (Stream.from_(q.queue(src))
              .filter(lambda m: m["data"]["type"] != "heartbeat")
              .map(lambda m: {**m["data"], "upperType": m["data"]["type"].upper(), "receivedAt": m["createdAt"],
                              "source": m["partition"]})
              .to(q.queue(sink))
              .run("enrich-%s" % suffix, max_wait_millis=200))
    with runner:
        wait_until(lambda: runner.metrics()["messagesTotal"] == 12)
    out = drain(q, sink)
    want = [e["n"] for e in events if e["type"] != "heartbeat"]
    checks.check(sorted(m["data"]["n"] for m in out) == want, "8 events enriched, 4 heartbeats dropped",
                 [m["data"] for m in out])
    checks.check(all(m["data"]["upperType"] == m["data"]["type"].upper() for m in out), "types upper-cased")
    checks.check(all(m["partition"] == m["data"]["source"] for m in out), "each result on its source partition")
    checks.check(all(m["data"]["receivedAt"].endswith("Z") for m in out), "createdAt copied from the message")
    for part in ("web", "app"):
        ns = [m["data"]["n"] for m in out if m["partition"] == part]
        checks.check(ns == sorted(ns), "%s: results in source order" % part, ns)
    checks.check(runner.metrics()["pushItemsTotal"] == 8, "8 sink pushes in total", runner.metrics())


if __name__ == "__main__":
    sys.exit(run_example(run))
