"""Demo: per-customer tumbling aggregates, the last window closed by the idle flush.

Three customers (one partition each) send orders; a 2-second tumbling window (processing
time: the broker's ``createdAt``) aggregates count / sum / min / max / avg per customer, a
post-reducer ``map`` adds the customer and the window bounds, and ``.to()`` pushes one
result per window into a sink queue. No later order arrives to close the last window: the
idle flush (``idle_flush_ms=300``) closes it by the wall clock.

Blocking port of the official SDK's ``examples/00_demo.py``. Run with
``QUEEN_URL=http://host:6632 python examples/streams/demo_tumbling_idle_flush.py``; without
``QUEEN_URL`` it starts the embedded test broker. Prints ``ok:`` lines and ``PASS: N checks``.
"""

from __future__ import annotations

import sys

from _common import Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream
from queen_sync.streams.state import to_iso_ms

CUSTOMERS = ["cust-A", "cust-B", "cust-C"]


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, sink = "demo-orders-%s" % suffix, "demo-totals-%s" % suffix
    amounts = {c: [10 + i * 5 + k for k in range(4)] for i, c in enumerate(CUSTOMERS)}
    for c in CUSTOMERS:
        q.queue(src).partition(c).push([{"data": {"customerId": c, "amount": a}} for a in amounts[c]])

    def with_bounds(agg, ctx):
        return {"customer": ctx["partition"], "windowStart": to_iso_ms(ctx["windowStart"]),
                "windowEnd": to_iso_ms(ctx["windowEnd"]), **agg}

    runner = (Stream.from_(q.queue(src))
              .window_tumbling(seconds=2, idle_flush_ms=300)
              .aggregate({"count": lambda v: 1, "sum": lambda v: v["amount"], "min": lambda v: v["amount"],
                          "max": lambda v: v["amount"], "avg": lambda v: v["amount"]})
              .map(with_bounds)
              .to(q.queue(sink))
              .run("demo-%s" % suffix, max_wait_millis=200))
    results = []
    with runner:
        wait_until(lambda: results.extend(m["data"] for m in drain(q, sink)) or
                   sum(r["count"] for r in results) >= 12)
    m = runner.metrics()
    print("metrics: %s" % {k: m[k] for k in ("cyclesTotal", "flushCyclesTotal", "messagesTotal", "pushItemsTotal")})
    checks.check(sum(r["count"] for r in results) == 12, "all 12 orders counted, none twice",
                 [(r["customer"], r["count"]) for r in results])
    for c in CUSTOMERS:
        mine = [r for r in results if r["customer"] == c]
        checks.check(sum(r["sum"] for r in mine) == sum(amounts[c]), "%s: sum %d" % (c, sum(amounts[c])), mine)
        checks.check(len({r["windowStart"] for r in mine}) == len(mine), "%s: each window emitted once" % c, mine)
        if len(mine) == 1:
            r = mine[0]
            checks.check((r["min"], r["max"], r["avg"]) == (min(amounts[c]), max(amounts[c]), sum(amounts[c]) / 4),
                         "%s: min / max / avg of the window" % c, r)
    checks.check(all(set(r) == {"customer", "windowStart", "windowEnd", "count", "sum", "min", "max", "avg"}
                     for r in results), "each result has exactly the aggregate names (+ the mapped fields)")
    checks.check(m["flushCyclesTotal"] >= 1, "the idle flush closed the last windows", m["flushCyclesTotal"])
    checks.check(m["messagesTotal"] == 12 and m["errorsTotal"] == 0, "12 messages consumed, no errors", m)


if __name__ == "__main__":
    sys.exit(run_example(run))
