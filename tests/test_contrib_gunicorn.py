"""The Flask example under real gunicorn (``--preload``, 2 gthread workers x 4 threads) on
loopback: 200 requests from 8 client threads each push one message with a unique id through
the buffered producer; after gunicorn is stopped with SIGTERM every message is on the broker
exactly once (workers made their own client after the fork and flushed it on exit: the
buffers have no size/time trigger here, so half the partitions reach the broker only then)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("flask")
pytest.importorskip("gunicorn")
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="gunicorn needs POSIX")

import urllib3  # noqa: E402

from queen_sync import Queen  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP_DIR = ROOT / "examples" / "flask_app"
REQUESTS = 200
CLIENT_THREADS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: "subprocess.Popen[Any]", log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail("gunicorn exited with %s:\n%s" % (proc.returncode, log.read_text()))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail("gunicorn not listening after %.0f s:\n%s" % (timeout, log.read_text()))
            time.sleep(0.05)


def pop_all(client: Queen, queue: str) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    while True:
        msgs = client.queue(queue).batch(200).wait(True).timeout_millis(300).pop()
        if not msgs:
            return out
        client.ack(msgs, True)
        out.extend(msgs)


def test_flask_example_under_gunicorn_delivers_each_message_once(
    broker_url: str, client: Queen, qname: str, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "gunicorn.log"
    env = dict(os.environ)
    env.update(
        QUEEN_URL=broker_url,
        ORDERS_QUEUE=qname,
        # No size/time flush: partitions c0/c2 are sent by the ?confirm=1 requests' flushes,
        # c1/c3 only when each worker closes its client on exit.
        ORDERS_BATCH="1000",
        ORDERS_FLUSH_MILLIS="600000",
        PYTHONPATH=str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
    )
    cmd = [
        sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
        "--preload", "--workers", "2", "--threads", "4", "--worker-class", "gthread",
        "--bind", "127.0.0.1:%d" % port, "--graceful-timeout", "20", "--log-level", "info",
        "app:app",
    ]
    from gunicorn.config import KNOWN_SETTINGS

    if any(s.name == "control_socket_disable" for s in KNOWN_SETTINGS):  # gunicorn >= 25
        cmd.insert(-1, "--no-control-socket")  # no shared socket under $HOME (parallel runs)
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=str(APP_DIR), env=env, stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_listening(port, proc, log)
        pool = urllib3.PoolManager(maxsize=CLIENT_THREADS, retries=False, timeout=urllib3.Timeout(10.0))
        statuses: Counter = Counter()
        answered: Dict[str, str] = {}
        errors: List[str] = []
        lock = threading.Lock()

        def worker(n: int) -> None:
            for i in range(n, REQUESTS, CLIENT_THREADS):
                oid = "order-%03d" % i
                confirm = "?confirm=1" if i % 10 == 0 else ""
                try:
                    r = pool.request(
                        "POST", "http://127.0.0.1:%d/orders%s" % (port, confirm),
                        json={"id": oid, "customer": "c%d" % (i % 4)},
                    )
                except Exception as exc:
                    with lock:
                        errors.append("%s: %r" % (oid, exc))
                    continue
                with lock:
                    statuses[r.status] += 1
                    if r.status in (201, 202):
                        answered[oid] = r.json()["transactionId"]
                    else:
                        errors.append("%s: HTTP %d %s" % (oid, r.status, r.data[:200]))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(CLIENT_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        pool.clear()
        assert not errors, errors[:5]
        assert statuses == {201: REQUESTS // 10, 202: REQUESTS - REQUESTS // 10}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("gunicorn did not stop on SIGTERM:\n%s" % log.read_text())
    text = log.read_text()
    assert proc.returncode == 0, text
    assert text.count("Booting worker") == 2, text

    stored = pop_all(client, qname)
    ids = Counter(m["data"]["orderId"] for m in stored)
    expected = {"order-%03d" % i for i in range(REQUESTS)}
    assert set(ids) == expected, sorted(expected - set(ids))[:10]
    assert all(n == 1 for n in ids.values()), [k for k, n in ids.items() if n > 1][:10]
    # the stored message is the one the view answered for
    assert {m["data"]["orderId"]: m["transactionId"] for m in stored} == answered
    assert "undelivered" not in text
