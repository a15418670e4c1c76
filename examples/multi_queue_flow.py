"""Multi-queue flow with consumer groups (blocking queen_sync client).

Five orders go to an ``orders`` queue, partitioned by customer. Two consumer groups read
the same orders independently:

- ``billing`` charges each order and forwards it to a ``shipping`` queue (same partition);
- ``analytics`` sums every order total.

Then ``warehouse`` reads the ``acme`` partition of the shipping queue and must see that
customer's shipments in the order they were pushed.

Run it against a broker with ``QUEEN_URL=http://host:6632 python examples/multi_queue_flow.py``;
without ``QUEEN_URL`` it starts the embedded test broker. It prints one ``ok:`` line per
verified fact and ``PASS: N checks``, and exits non-zero on any failure.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from _harness import Checks, Queen, run_example  # examples/_harness.py: broker, ok:/PASS output

ORDERS = [
    {"orderId": "A-1", "customer": "acme", "total": 120.5},
    {"orderId": "A-2", "customer": "acme", "total": 12.0},
    {"orderId": "B-1", "customer": "globex", "total": 88.75},
    {"orderId": "C-1", "customer": "initech", "total": 310.0},
    {"orderId": "A-3", "customer": "acme", "total": 9.99},
]


def run(q: Queen, checks: Checks, suffix: str) -> None:
    orders_q = "example-orders-%s" % suffix
    shipping_q = "example-shipping-%s" % suffix
    billing, analytics, warehouse = ("%s-%s" % (g, suffix) for g in ("billing", "analytics", "warehouse"))
    try:
        q.queue(orders_q).create()
        q.queue(shipping_q).create()

        print("pushing")
        pushed: List[Dict[str, Any]] = []
        for order in ORDERS:
            res = q.queue(orders_q).partition(order["customer"]).push({"data": order})
            pushed.extend(res)
            print("  %s -> partition %s (%s)" % (order["orderId"], order["customer"], res[0]["status"]))
        checks.check(
            len(pushed) == 5 and all(r["status"] == "queued" for r in pushed),
            "5 orders queued, partitioned by customer",
            pushed,
        )

        print("billing")
        charged: List[str] = []
        forwarded: List[Dict[str, Any]] = []

        def bill(msg: Dict[str, Any]) -> None:
            order = msg["data"]
            charged.append(order["orderId"])
            print("  charged %s (%s)" % (order["orderId"], order["total"]))
            forwarded.extend(
                q.queue(shipping_q)
                .partition(order["customer"])
                .push({"data": {"orderId": order["orderId"], "customer": order["customer"]}})
            )

        summary = (
            q.queue(orders_q).group(billing).subscription_mode("all")
            .each().limit(5).idle_millis(5000).consume(bill)
        )
        checks.check(
            sorted(charged) == sorted(o["orderId"] for o in ORDERS) and summary.handled == 5,
            "billing saw all 5 orders",
            (charged, summary),
        )
        checks.check(
            summary.acked == 5 and summary.ack_failures == 0,
            "billing acked every order and the broker accepted every ack",
            summary,
        )
        checks.check(
            len(forwarded) == 5 and all(r["status"] == "queued" for r in forwarded),
            "billing forwarded every order to the shipping queue",
            forwarded,
        )

        print("analytics")
        totals: List[float] = []
        summary = (
            q.queue(orders_q).group(analytics).subscription_mode("all")
            .each().limit(5).idle_millis(5000).consume(lambda m: totals.append(m["data"]["total"]))
        )
        expected = round(sum(o["total"] for o in ORDERS), 2)
        checks.check(
            len(totals) == 5 and round(sum(totals), 2) == expected,
            "analytics summed every order (%.2f), independently of billing" % expected,
            totals,
        )

        print("warehouse")
        shipped: List[str] = []

        def ship(msg: Dict[str, Any]) -> None:
            shipped.append(msg["data"]["orderId"])
            print("  shipping %s" % msg["data"]["orderId"])

        (
            q.queue(shipping_q).partition("acme").group(warehouse).subscription_mode("all")
            .each().limit(3).idle_millis(5000).consume(ship)
        )
        checks.check(
            shipped == ["A-1", "A-2", "A-3"],
            "one customer's shipments arrived in the order they were pushed",
            shipped,
        )
    finally:
        deleted = [q.queue(name).delete() for name in (orders_q, shipping_q)]
    checks.check(all(d.get("deleted") for d in deleted), "both queues deleted", deleted)


if __name__ == "__main__":
    sys.exit(run_example(run))
