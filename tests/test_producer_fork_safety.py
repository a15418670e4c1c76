"""Fork paths without Python's at-fork hooks (uWSGI): the pid check re-creates the push
buffers' and transport's locks before first use, a uWSGI master before its fork gets no
sender thread (buffered pushes are sent synchronously there), and the "threads will not run"
warning appears only when uWSGI really runs Python without threads."""

from __future__ import annotations

import logging
import threading
import types
import warnings
from typing import Any, Iterator

import pytest

import queen_sync._fork as fork
from queen_sync import Queen


def hold(lock: Any) -> threading.Event:
    """Acquire ``lock`` in a thread that never releases it (as a parent thread at a fork)."""
    got = threading.Event()

    def run() -> None:
        lock.acquire()
        got.set()

    threading.Thread(target=run, daemon=True).start()
    assert got.wait(5)
    return got


def in_thread(fn: Any, timeout: float = 10.0) -> Any:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "deadlocked on a lock held at the (simulated) fork"
    return out[0]


def test_pid_check_recreates_held_locks(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, close_timeout_millis=3000) as q:
        qb = q.queue("forkq").partition("p").buffer(10, 10)
        qb.push({"data": 0})
        assert qb.flush(5000) == 0
        manager = q._producer
        (buf,) = manager._buffers.values()
        transport = q._transport
        # a fork without hooks, while parent threads held every lock
        hold(manager._lock)
        hold(buf._lock)
        hold(transport._lock)
        manager._pid = transport._pid = -1
        receipts = in_thread(lambda: qb.push({"data": 1}))
        assert receipts[0]["status"] == "pending"
        assert in_thread(lambda: qb.flush(5000)) == 0
        assert in_thread(lambda: q.get_transport_stats())["errors"] == 0
    assert [m["data"] for m in embedded_broker.messages("forkq")] == [0, 1]


class FakeUwsgi(types.ModuleType):
    def __init__(self, worker: int = 0, has_threads: int = 1, **opt: Any) -> None:
        super().__init__("uwsgi")
        self._worker = worker
        self.has_threads = has_threads
        self.opt = {k.replace("_", "-"): v for k, v in opt.items()}
        self.version = b"2.0.20"

    def worker_id(self) -> int:
        return self._worker

    def mule_id(self) -> int:
        return 0


@pytest.fixture
def fake_uwsgi(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(**kw: Any) -> FakeUwsgi:
        mod = FakeUwsgi(**kw)
        monkeypatch.setitem(__import__("sys").modules, "uwsgi", mod)
        monkeypatch.setattr(fork, "_prefork_pid", -1)
        monkeypatch.setattr(fork, "_warned", False)
        return mod

    yield install
    fork._prefork_pid = -1


def test_prefork_detection(fake_uwsgi: Any) -> None:
    fake_uwsgi(worker=0)
    assert fork.uwsgi_prefork() is True
    fake_uwsgi(worker=1)
    assert fork.uwsgi_prefork() is False
    fake_uwsgi(worker=0, py_call_uwsgi_fork_hooks=True)
    assert fork.uwsgi_prefork() is False


def test_buffered_push_in_uwsgi_master_is_sent_synchronously(embedded_broker: Any, fake_uwsgi: Any) -> None:
    fake_uwsgi(worker=0)
    with Queen(embedded_broker.url) as q:
        got = q.queue("master").partition("p").buffer(100, 60000).push([{"data": 1}, {"data": 2}])
        assert [r["status"] for r in got] == ["queued", "queued"]  # sent, not held
        assert q._producer._buffers == {}  # no buffer, so no sender thread
        assert not [t for t in threading.enumerate() if t.name.startswith("queen-buffer-master")]
    assert [m["data"] for m in embedded_broker.messages("master")] == [1, 2]


def test_thread_warning_only_when_threads_are_off(
    embedded_broker: Any, fake_uwsgi: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="queen_sync")
    fake_uwsgi(worker=1, has_threads=1)  # uWSGI >= 2.0.27: always on, no --enable-threads in opt
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fork.warn_uwsgi_threads_off("x") is False
    fake_uwsgi(worker=1, has_threads=0)
    with Queen(embedded_broker.url) as q:
        with pytest.warns(RuntimeWarning, match="without thread support"):
            q.queue("w").partition("p").buffer(10, 10).push({"data": 1})
        assert q.flush_all_buffers(5000) == 0
    records = [r for r in caplog.records if "without thread support" in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.WARNING and records[0].name == "queen_sync"
