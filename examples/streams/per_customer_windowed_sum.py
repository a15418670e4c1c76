"""Per-customer windowed sum with ``key_by`` and event time.

All orders of a region share one partition; ``key_by`` keys the windows by customer, and
``event_time`` reads each order's own timestamp, so the windows are exact whatever the
arrival time: 10-second tumbling windows of order totals per customer. An order far in the
future moves the watermark past every window, closing them in the main cycle.

Blocking port of the official SDK's ``examples/02_per_customer_windowed_sum.py``. Run with
``QUEEN_URL=... python examples/streams/per_customer_windowed_sum.py``.
"""

from __future__ import annotations

import sys

from _common import T0, Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream

ORDERS = [  # (customer, seconds after T0, total)
    ("alice", 1, 10), ("bob", 2, 5), ("alice", 9, 7), ("alice", 10, 100), ("bob", 12, 1), ("carol", 15, 3),
    ("bob", 19.999, 2), ("alice", 25, 50),
]


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, sink = "orders-%s" % suffix, "customer-sums-%s" % suffix
    items = [{"data": {"customer": c, "ts": T0 + int(s * 1000), "total": t}} for c, s, t in ORDERS]
    items.append({"data": {"customer": "closer", "ts": T0 + 3600000, "total": 0}})
    q.queue(src).partition("eu").push(items)
    runner = (Stream.from_(q.queue(src))
              .key_by(lambda m: m["data"]["customer"])
              .window_tumbling(seconds=10, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
              .aggregate({"count": lambda v: 1, "sum": lambda v: v["total"]})
              .map(lambda agg, ctx: {"customer": ctx["key"], "windowStart": ctx["windowStart"], **agg})
              .to(q.queue(sink))
              .run("customer-sums-%s" % suffix, max_wait_millis=200))
    with runner:
        wait_until(lambda: runner.metrics()["pushItemsTotal"] >= 6)
    out = drain(q, sink)
    got = sorted((m["data"]["customer"], (m["data"]["windowStart"] - T0) // 1000, m["data"]["count"], m["data"]["sum"])
                 for m in out)
    want = [("alice", 0, 2, 17), ("alice", 10, 1, 100), ("alice", 20, 1, 50), ("bob", 0, 1, 5), ("bob", 10, 2, 3),
            ("carol", 10, 1, 3)]
    checks.check(got == want, "six customer windows with exact counts and sums", got)
    checks.check({m["partition"] for m in out} == {"eu"}, "results pushed on the source partition")
    m = runner.metrics()
    checks.check(m["lateEventsTotal"] == 0 and m["messagesTotal"] == 9, "9 orders, none late", m)
    checks.check(m["stateOpsTotal"] >= 2, "open windows and the watermark kept in the broker", m["stateOpsTotal"])
    checks.check(m["errorsTotal"] == 0, "no errors", m["lastError"])


if __name__ == "__main__":
    sys.exit(run_example(run))
