"""A forked child's copy of a running background consumer has no threads: stop(), join(),
``with consumer:`` and close() return at once there, is_running is False, and the child
never acks or releases the parent's leases. The parent's consumer is unaffected."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

from queen_sync import Queen

from _helpers import wait_until

from _helpers import libc_fork_child, run_forked  # noqa: E402

#: signals sent to this very process (handled in its main thread): run outside pytest-xdist
#: workers, whose main thread serves the controller (README test command, ``-m main_thread``)
pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)"), pytest.mark.main_thread]


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
            checks.append(res.reason == "forked")  # a copy: the parent's consumer has not stopped
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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _fork_warnings(records: "_Records") -> List[str]:
    return [line for line in records.lines if "started before fork" in line]


def test_consumer_inherited_through_a_fork_logs_one_warning_in_the_child(embedded_broker: Any) -> None:
    """Issue 11.9 / 11.10 (gunicorn --preload): the child is told, once, that the consumer it
    inherited does not run there; the parent logs nothing."""
    q = Queen(embedded_broker.url)
    q.queue("fw").create()
    records = _Records()
    logger = logging.getLogger("queen_sync.consumer")
    logger.addHandler(records)
    consumer = q.queue("fw").group("g").consume(lambda m: None, background=True)
    try:

        def child() -> bool:
            first = _fork_warnings(records)  # logged by the at-fork hook already
            consumer.stop()
            _ = consumer.is_running, consumer.result
            q.close(timeout_millis=2000)
            again = _fork_warnings(records)
            return len(first) == 1 and "'fw'" in first[0] and "start it in the worker" in first[0] and again == first

        assert _run_child(child) == 0
        assert _fork_warnings(records) == []  # nothing in the parent
    finally:
        logger.removeHandler(records)
        consumer.stop(drain_timeout_millis=5000)
        q.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libc fork via ctypes: Linux only")
def test_fork_without_python_hooks_does_not_inherit_a_held_registry_lock(embedded_broker: Any) -> None:
    """uWSGI without --lazy-apps: no at-fork hook runs in the child. A registry lock held by a
    parent thread at fork time must not deadlock the child: the pid check makes a new one."""
    from queen_sync.consumer import _registry

    q = Queen(embedded_broker.url)
    q.queue("fu").create()
    records = _Records()
    logger = logging.getLogger("queen_sync.consumer")
    logger.addHandler(records)
    consumer = q.queue("fu").group("g").consume(lambda m: None, background=True)
    held = _registry._registry_lock
    held.acquire()  # as if a parent thread were registering a consumer right now
    try:

        def child() -> bool:
            stopped = consumer.stop()  # entry points: no deadlock, nothing sent
            closed = q.close(timeout_millis=2000)
            return stopped.reason == "forked" and closed == 0 and len(_fork_warnings(records)) == 1

        code = libc_fork_child(child)
    finally:
        held.release()
    try:
        assert code == 0, "child exit code %d (-9: it hung on an inherited lock)" % code
    finally:
        logger.removeHandler(records)
        consumer.stop(drain_timeout_millis=5000)
        q.close()
