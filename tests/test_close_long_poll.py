"""Queen.close() while a pop waits at the broker (a long poll): the pop ends at once with
ClientClosedError, and the broker drops the parked pop, so a message arriving afterwards is
not leased to the closed client (it would stay locked for the group until its lease
expired)."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict

from queen_sync import ClientClosedError, Queen

from _helpers import wait_until

POP_PATH = "/api/v1/pop/queue/"


def _pop_in_thread(q: Queen, queue: str, out: Dict[str, Any]) -> threading.Thread:
    def run() -> None:
        t0 = time.monotonic()
        try:
            out["got"] = q.queue(queue).group("g").wait(True).timeout_millis(20000).pop()
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out["exc"] = exc
        out["took"] = time.monotonic() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def test_close_ends_a_parked_pop_and_leases_nothing(embedded_broker: Any) -> None:
    q = Queen(embedded_broker.url)
    q.queue("lp").create()
    before = embedded_broker.request_count("GET", POP_PATH)
    out: Dict[str, Any] = {}
    th = _pop_in_thread(q, "lp", out)
    assert wait_until(lambda: embedded_broker.request_count("GET", POP_PATH) > before)  # parked at the broker
    q.close()
    th.join(10)
    assert not th.is_alive() and "got" not in out, out
    assert isinstance(out["exc"], ClientClosedError), out
    assert out["took"] < 10  # not the 20 s of the long poll
    with Queen(embedded_broker.url) as q2:
        q2.queue("lp").push({"data": "after close"})
        got = q2.queue("lp").group("g").wait(True).timeout_millis(5000).pop()
        assert [m["data"] for m in got] == ["after close"]  # not leased by the closed client's pop
