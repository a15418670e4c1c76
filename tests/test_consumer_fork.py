"""A forked child's copy of a running background consumer has no threads: stop(), join(),
``with consumer:`` and close() return at once there, is_running is False, and the child
never acks or releases the parent's leases. The parent's consumer is unaffected."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

from queen_sync import Queen

from _helpers import wait_until

from _helpers import run_forked  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


def _run_child(body: Callable[[], bool], timeout: float = 10.0) -> int:
    return run_forked(body, timeout)


def test_forked_child_copy_of_a_consumer_is_inert(embedded_broker: Any) -> None:
    broker = embedded_broker
    q = Queen(broker.url)
    q.queue("fk").push([{"data": i} for i in range(3)])
    gate = threading.Event()
    started = threading.Event()
    handled: List[int] = []

    def handler(m: Dict[str, Any]) -> None:
        handled.append(m["data"])
        started.set()
        assert gate.wait(20)

    consumer = q.queue("fk").group("g").batch(3).each().consume(handler, background=True)
    try:
        assert started.wait(10)  # message 0 is in the handler, 1 and 2 wait in its lane (lease held)
        acks_before = broker.request_count("POST", "/api/v1/ack")

        def child() -> bool:
            checks = [not consumer.is_running]
            t0 = time.monotonic()
            res = consumer.stop()
            checks.append(res.reason == "")  # the parent's consumer has not stopped
            checks.append(consumer.join() is True and consumer.join(0) is True)
            with consumer:
                pass
            checks.append(q.close(timeout_millis=5000) == 0)
            checks.append(time.monotonic() - t0 < 5.0)
            checks.append("running" not in repr(consumer))
            return all(checks)

        assert _run_child(child) == 0
        # the child sent no ack / release of the parent's lease
        assert broker.request_count("POST", "/api/v1/ack") == acks_before
        assert consumer.is_running
        gate.set()
        assert wait_until(lambda: consumer.acked == 3)
    finally:
        gate.set()
        res = consumer.stop(drain_timeout_millis=10_000)
        q.close()
    assert handled == [0, 1, 2] and (res.acked, res.ack_failures, res.released) == (3, 0, 0)


def test_signal_in_forked_child_is_not_swallowed_by_the_parents_consumer(embedded_broker: Any) -> None:
    """With handle_signals=True the parent's handler is inherited; in the child it must act
    like the previous handler (here: KeyboardInterrupt for SIGINT), not set a flag nobody reads."""
    q = Queen(embedded_broker.url)
    q.queue("fs").create()
    consumer = q.queue("fs").group("g").consume(lambda m: None, background=True, handle_signals=True)
    try:

        def child() -> bool:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(200):  # the handler runs between bytecodes
                    time.sleep(0.01)
            except KeyboardInterrupt:
                return True
            return False

        assert _run_child(child) == 0
    finally:
        consumer.stop(drain_timeout_millis=5000)
        q.close()
    assert consumer.reason == "stopped"
