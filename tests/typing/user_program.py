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
        # keyword forms and messages that act on themselves (issue 13 item 4)
        popped: List[Message] = q.queue("orders").group("billing").batch(3).pop()
        for p in popped:
            done: Dict[str, Any] = q.ack(p, status="completed", group="billing")
            print(done["success"])
        every: List[Dict[str, Any]] = q.ack(popped, status="failed", group="billing", error="boom")
        print(len(every))
        renewed: Dict[str, Any] = q.renew(popped[0], seconds=30) if popped else {}
        print(renewed)
        for p in popped:
            print(p.renew(30)["expiresAt"], p.renew()["success"])
            print(p.ack()["success"], p.ack("completed", group="billing")["success"])
            print(p.nack("bad total")["dlq"], p.nack(error="bad", group="billing")["success"])

        def manual(m: Message) -> None:
            m.trace("checkout", {"step": "seen"})
            m.ack()

        q.queue("orders").group("g3").each().auto_ack(False).limit(1).idle_millis(1000).consume(manual)
        stopped = q.queue("orders").group("g4").consume(handle, background=True, drain_timeout_millis=1000)
        print(stopped.join(1.5), stopped.stop().reason)
        res = q.queue("orders").group("g").limit(5).idle_millis(1000).concurrency(2).consume(handle)
        print(res.handled, res.reason)
        bg = q.queue("orders").group("g2").each().consume(handle, background=True)
        print(bg.stop(drain_timeout_millis=5000).acked, bg.is_running)
        q.queue("orders").group("g").batch(5).limit(5).idle_millis(1000).consume(handle_batch)
        q.queue("orders").group("g").each().limit(1).idle_millis(1000).consume(lambda m: None)
        q.queue("orders").delete()
        return len(results)


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except QueenError as exc:
        raise SystemExit(str(exc))
