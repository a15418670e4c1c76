"""A small user program of the public API, checked with mypy --strict."""
from __future__ import annotations

from typing import Any, Dict, List

from queen_sync import Queen, Message
from queen_sync.errors import QueenError

URL = "http://127.0.0.1:6632"


def handle(msg: Message) -> None:
    print(msg["data"], msg.get("transactionId"))


def handle_batch(msgs: List[Dict[str, Any]]) -> None:
    for m in msgs:
        print(m["data"])


def main() -> int:
    with Queen(URL, timeout_millis=5000, retry_attempts=2) as q:
        created: Dict[str, Any] = q.queue("orders").config({"lease_time": 60}).create()
        print(created["queue"])
        results: List[Dict[str, Any]] = q.queue("orders").partition("acme").push({"data": {"n": 1}})
        q.queue("orders").push([{"data": 1}, {"payload": 2}])
        msgs: List[Dict[str, Any]] = (
            q.queue("orders").group("billing").batch(10).wait(True).timeout_millis(2000).auto_ack(False).pop()
        )
        if msgs:
            print(q.renew(msgs[0])["expiresAt"])
            print(q.renew(msgs[0]["leaseId"])["success"])
            print([r["leaseId"] for r in q.renew([m["leaseId"] for m in msgs])])
            tx = (
                q.transaction()
                .queue("inv").partition("p").push([{"data": {"sku": "x"}}])
                .ack(msgs[0], "completed", {"consumer_group": "billing"})
            )
            print(tx.commit())
        for m in msgs[1:2]:
            one: Dict[str, Any] = q.ack(m, True, {"group": "billing"})
            ok: bool = one["success"] is True
            print(ok)
        many: List[Dict[str, Any]] = q.ack(msgs[2:], "failed", {"consumer_group": "billing", "error": "boom"})
        print(len(many))
        res = q.queue("orders").group("g").limit(5).idle_millis(1000).concurrency(2).consume(handle)
        print(res.handled, res.reason)
        bg = q.queue("orders").group("g2").each().consume(handle, background=True)
        print(bg.stop(5.0).acked, bg.is_running)
        q.queue("orders").group("g").batch(5).limit(5).idle_millis(1000).consume(handle_batch)
        q.queue("orders").group("g").each().limit(1).idle_millis(1000).consume(lambda m: None)
        q.queue("orders").delete()
        return len(results)


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except QueenError as exc:
        raise SystemExit(str(exc))
