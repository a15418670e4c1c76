"""In-window dedup: one output per distinct event id within each 5-second window.

Webhooks arrive with retries (the same ``eventId`` more than once). ``filter`` drops
heartbeats, ``map`` keeps the id, a tumbling window ``reduce`` collects the distinct ids
(each window starts from a fresh copy of ``[]``) and ``flat_map`` emits one sink message per
id. Each emitted message carries a deterministic ``transactionId``, so even a resent cycle
cannot duplicate it.

Blocking port of the official SDK's ``examples/04_in_window_dedup.py``. Run with
``QUEEN_URL=... python examples/streams/in_window_dedup.py``.
"""

from __future__ import annotations

import sys

from _common import T0, Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream

HOOKS = [  # (seconds after T0, eventId or None for a heartbeat)
    (0.1, "e1"), (0.5, "e2"), (1.0, "e1"), (1.2, None), (3.0, "e3"), (4.9, "e2"),
    (5.0, "e1"), (6.0, "e4"), (6.5, "e4"), (20.0, None), (21.0, "e9"),
]


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, sink = "hooks-%s" % suffix, "hooks-unique-%s" % suffix
    q.queue(src).partition("stripe").push([
        {"data": {"ts": T0 + int(s * 1000), "type": "heartbeat" if e is None else "hook", "eventId": e}}
        for s, e in HOOKS])
    runner = (Stream.from_(q.queue(src))
              .filter(lambda m: m["data"]["type"] != "heartbeat")
              .map(lambda m: m["data"]["eventId"])
              .window_tumbling(seconds=5, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
              .reduce(lambda acc, eid: acc if eid in acc else acc + [eid], [])
              .flat_map(lambda ids, ctx: [{"eventId": i, "window": (ctx["windowStart"] - T0) // 5000} for i in ids])
              .to(q.queue(sink))
              .run("dedup-%s" % suffix, max_wait_millis=200))
    with runner:
        wait_until(lambda: runner.metrics()["pushItemsTotal"] >= 5)
    out = [(m["data"]["window"], m["data"]["eventId"]) for m in drain(q, sink)]
    checks.check(out == [(0, "e1"), (0, "e2"), (0, "e3"), (1, "e1"), (1, "e4")],
                 "distinct ids per window, in first-seen order", out)
    checks.check(len(out) == len(set(out)), "no id twice inside a window")
    checks.check(("0", "e1") not in [(str(w), e) for w, e in out[1:3]], "a retried hook in the same window is dropped")
    checks.check(runner.metrics()["messagesTotal"] == 11, "11 hooks consumed", runner.metrics())
    checks.check(runner.metrics()["errorsTotal"] == 0, "no errors")


if __name__ == "__main__":
    sys.exit(run_example(run))
