"""Transactional ack + push (blocking queen_sync client).

Three orders go to an ``orders`` queue. A consumer of group ``invoicing`` (with
``auto_ack(False)``) commits, per order, one transaction that pushes an invoice to an
``invoices`` queue **and** acks the order for its group: both happen, or neither. The
transaction's ack carries the message's lease, so a consumer that lost its lease cannot
commit. Afterwards the invoices queue holds exactly 3 invoices, and the orders queue has
nothing left for the group.

Run it against a broker with ``QUEEN_URL=http://host:6632 python examples/transaction_ack_push.py``;
without ``QUEEN_URL`` it starts the embedded test broker. It prints one ``ok:`` line per
verified fact and ``PASS: N checks``, and exits non-zero on any failure.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from _harness import Checks, Queen, run_example  # examples/_harness.py: broker, ok:/PASS output

ORDERS = [
    {"orderId": "A-1", "customer": "acme", "total": 120.5},
    {"orderId": "B-1", "customer": "globex", "total": 88.75},
    {"orderId": "C-1", "customer": "initech", "total": 310.0},
]


def run(q: Queen, checks: Checks, suffix: str) -> None:
    orders_q = "example-tx-orders-%s" % suffix
    invoices_q = "example-tx-invoices-%s" % suffix
    group = "invoicing-%s" % suffix
    try:
        pushed = [q.queue(orders_q).partition(o["customer"]).push({"data": o})[0] for o in ORDERS]
        checks.check(all(r["status"] == "queued" for r in pushed), "pushed 3 orders", pushed)

        print("invoicing")
        invoiced: List[str] = []
        commits: List[Dict[str, Any]] = []

        def invoice(msg: Dict[str, Any]) -> None:
            order = msg["data"]
            inv = {"invoiceId": "INV-" + order["orderId"], "orderId": order["orderId"], "amount": order["total"]}
            result = (
                q.transaction()
                .queue(invoices_q).partition(order["customer"]).push({"data": inv})
                .ack(msg, "completed", {"consumer_group": group})
                .commit()
            )
            commits.append(result)
            invoiced.append(order["orderId"])
            print("  %s -> %s" % (order["orderId"], inv["invoiceId"]))

        summary = (
            q.queue(orders_q).group(group).subscription_mode("all").auto_ack(False)
            .each().limit(3).idle_millis(5000).consume(invoice)
        )
        checks.check(
            sorted(invoiced) == sorted(o["orderId"] for o in ORDERS) and summary.handled == 3,
            "every order was invoiced once",
            (invoiced, summary),
        )
        checks.check(
            len(commits) == 3 and all(c["success"] is True for c in commits),
            "every transaction committed (push + ack together)",
            commits,
        )

        print("checking the output queue")
        invoices: List[Dict[str, Any]] = []
        for _ in range(3):  # one long poll normally returns all 3 partitions
            got = q.queue(invoices_q).batch(10).partitions(10).wait(True).timeout_millis(2000).pop()
            invoices.extend(got)
            if not got or len(invoices) >= 3:
                break
        checks.check(len(invoices) == 3, "3 invoices exist", invoices)
        ids = [m["data"]["orderId"] for m in invoices]
        checks.check(
            sorted(ids) == sorted(o["orderId"] for o in ORDERS) and len(set(ids)) == 3,
            "each invoice matches an order, none duplicated",
            ids,
        )
        q.ack(invoices, True)
        more = q.queue(invoices_q).batch(10).partitions(10).pop()
        checks.check(more == [], "no further invoice is waiting", more)
        left = q.queue(orders_q).group(group).batch(10).pop()
        checks.check(left == [], "the source queue is committed for this group", left)
    finally:
        deleted = [q.queue(name).delete() for name in (orders_q, invoices_q)]
    checks.check(all(d.get("deleted") for d in deleted), "both queues deleted", deleted)


if __name__ == "__main__":
    sys.exit(run_example(run))
