"""Buffered pushes the broker refuses for good, and messages left unsent at close / exit.

- a 4xx other than 408 / 429 is a permanent refusal: the batch is counted as ``failed``,
  logged once at ERROR (no payloads), dropped; the rest of the buffer goes on and
  ``flush()`` (even without a timeout) returns, reporting those messages;
- 408 / 429 stay transient (resent);
- messages left unsent by ``close()`` or the ``atexit`` flush raise a visible RuntimeWarning.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator, List

import pytest

from queen_sync import Queen
from queen_sync.transport import ExponentialBackoff

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def q(embedded_broker: Any) -> Iterator[Queen]:
    c = Queen(embedded_broker.url, retry_attempts=2, backoff=ExponentialBackoff(2, 20), close_timeout_millis=5000)
    try:
        yield c
    finally:
        c.close(timeout_millis=500)


def flush_in_thread(fn: Any, *args: Any) -> List[int]:
    """Run a flush without timeout in a daemon thread; fail (instead of hanging) when it
    does not return within 15 s."""
    out: List[int] = []
    t = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    t.start()
    t.join(15)
    assert not t.is_alive(), "flush() without a timeout never returned"
    return out


def test_permanent_refusal_ends_flush_and_counts_failed(
    embedded_broker: Any, q: Queen, caplog: pytest.LogCaptureFixture
) -> None:
    fault = embedded_broker.faults.add(
        "POST", "/api/v1/push", "status", status=413, times=None, body={"error": "request entity too large"}
    )
    b = q.queue("x").buffer(10, 10)
    with caplog.at_level(logging.ERROR, logger="queen_sync.producer"):
        b.push({"data": {"secret": "payload-text-1"}})
        assert flush_in_thread(b.flush) == [1]  # the caller sees the lost message
    assert fault.hits == 1  # sent once, never retried
    st = q.get_buffer_stats()
    assert st["failed"] == 1 and st["delivered"] == 0 and st["totalBufferedMessages"] == 0
    assert "413" in st["buffers"]["x/Default"]["last_error"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "'x'" in errors[0] and "'Default'" in errors[0] and "1 message" in errors[0]
    assert "413" in errors[0] and "request entity too large" in errors[0]
    assert "payload-text-1" not in errors[0]
    assert b.flush(1000) == 0  # reported once
    assert embedded_broker.messages("x") == []


def test_refused_batch_dropped_rest_of_buffer_continues(embedded_broker: Any, q: Queen) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=400, times=1, body={"error": "bad batch"})
    b = q.queue("rest").partition("p").buffer(5, 600000)
    b.push([{"data": i} for i in range(5)])  # a full batch: sent at once, refused
    b.push([{"data": i} for i in range(5, 8)])
    assert flush_in_thread(q.flush_all_buffers) == [5]
    assert [m["data"] for m in embedded_broker.messages("rest")] == [5, 6, 7]
    st = q.get_buffer_stats()["buffers"]["rest/p"]
    assert st["failed"] == 5 and st["delivered"] == 3 and st["unsent"] == 0
    assert embedded_broker.request_count("POST", "/api/v1/push") == 2
    assert q.close() == 0  # already reported by the flush


def test_close_reports_refused_messages(embedded_broker: Any) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=403, times=None)
    c = Queen(embedded_broker.url, retry_attempts=1, close_timeout_millis=5000)
    c.queue("cr").buffer(100, 600000).push([{"data": 1}, {"data": 2}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is unsent: no RuntimeWarning
        assert c.close() == 2
    assert c.unsent_on_close == 2
    assert c.get_buffer_stats()["failed"] == 2


@pytest.mark.parametrize("status", [408, 429])
def test_408_and_429_are_resent(embedded_broker: Any, q: Queen, status: int) -> None:
    fault = embedded_broker.faults.add("POST", "/api/v1/push", "status", status=status, times=3)
    b = q.queue("tr%d" % status).buffer(10, 10)
    b.push([{"data": 1}, {"data": 2}])
    assert b.flush(10000) == 0
    assert fault.hits == 3
    assert [m["data"] for m in embedded_broker.messages("tr%d" % status)] == [1, 2]
    st = q.get_buffer_stats()
    assert st["failed"] == 0 and st["delivered"] == 2 and st["retries"] >= 1


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens: connections are refused
    return "http://127.0.0.1:%d" % port


def test_close_with_unsent_messages_warns() -> None:
    url = _dead_url()
    c = Queen(url, retry_attempts=1, backoff=ExponentialBackoff(2, 10))
    c.queue("down").buffer(10, 10).push([{"data": 1}, {"data": 2}])
    with pytest.warns(RuntimeWarning) as rec:
        assert c.close(timeout_millis=50) == 2
    msgs = [str(w.message) for w in rec]
    assert msgs == ["queen_sync: 2 buffered message(s) could not be sent to %s before close()" % url]
    assert rec[0].filename == __file__  # points at the caller of close()


def _exit_with_unsent(url: str, *, log_warnings: bool, backoff: str, close_timeout_millis: int) -> Any:
    """Run a script that buffers 3 messages for queue ``down`` / partition ``p`` on ``url`` and
    exits without close() (``log_warnings``: logging.basicConfig at WARNING first); returns
    the finished process (exit status 0 and ``pushed`` on stdout checked)."""
    script = (
        ("import logging\nlogging.basicConfig(level=logging.WARNING)\n" if log_warnings else "")
        + "from queen_sync import Queen\n"
        "from queen_sync.transport import ExponentialBackoff\n"
        "q = Queen(%r, retry_attempts=1, backoff=ExponentialBackoff(%s), close_timeout_millis=%d)\n"
        "q.queue('down').partition('p').buffer(10, 10).push([{'data': i} for i in range(3)])\n"
        "print('pushed', flush=True)\n" % (url, backoff, close_timeout_millis)
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=str(ROOT), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "pushed"
    return proc


def test_atexit_flush_with_unsent_messages_warns_on_stderr() -> None:
    """No close(), broker down, logging not configured: the loss is still visible on stderr."""
    url = _dead_url()
    proc = _exit_with_unsent(url, log_warnings=False, backoff="2, 10", close_timeout_millis=100)
    assert "RuntimeWarning" in proc.stderr, proc.stderr
    assert "queen_sync: 3 buffered message(s) could not be sent to %s before exit" % url in proc.stderr


def test_exit_with_the_broker_down_logs_one_warning_per_batch_not_one_per_resend() -> None:
    """No close(), broker down, WARNING logging to stderr: the exit hook resends for the
    close timeout, and stderr gets one line for the failing batch and one summary, not a
    line per resend."""
    url = _dead_url()
    proc = _exit_with_unsent(url, log_warnings=True, backoff="1, 2", close_timeout_millis=500)
    lines = proc.stderr.splitlines()
    assert len([ln for ln in lines if "to down/p failed" in ln]) == 1, proc.stderr
    [summary] = [ln for ln in lines if "could not be delivered within 500 ms" in ln]
    assert "down/p: 3 unsent" in summary and "close_timeout_millis" in summary
    assert "3 buffered message(s) could not be sent to %s before exit" % url in proc.stderr
