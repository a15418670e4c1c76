"""A real uWSGI (2 workers, master mode, **without** ``--lazy-apps``) started 6 times with an
app that does a buffered push at import (in the master, before the fork) and serves requests
that push through a buffer: every start serves every request on both workers, runs the
post-fork hook in each worker, stores every message exactly once and stops on SIGTERM /
SIGINT within a bound. Before the fix, 3 of 6 starts left a worker hung (its GIL held by the
master's sender thread at the fork)."""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, List

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="uWSGI needs POSIX")

ROOT = Path(__file__).resolve().parent.parent
STARTS = 6
REQUESTS = 10
AT_IMPORT = 20
STOP_BOUND_S = 10.0

APP = '''
import os, time
from queen_sync import Queen
try:
    from queen_sync._fork import _ran_for_pid as _unused  # noqa: F401
    import queen_sync._fork as fork
except ImportError:  # a queen_sync without it
    fork = None

Q = Queen(os.environ["QUEEN_URL"], close_timeout_millis=5000)
QUEUE = os.environ["APP_QUEUE"]
# at import, in the uWSGI master (no --lazy-apps): before the workers are forked
Q.queue(QUEUE).partition("import").buffer(50, 20).push([{"data": {"i": i}} for i in range(%d)])

def application(environ, start_response):
    n = environ["PATH_INFO"].strip("/")
    buf = Q.queue(QUEUE).partition("req").buffer(50, 20)
    buf.push({"data": {"n": n}})
    left = buf.flush(5000)
    time.sleep(0.15)  # keep this worker busy so the other one takes requests too
    body = ("%%d %%d %%d" %% (os.getpid(), left, fork is not None and fork._ran_for_pid == os.getpid())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
''' % AT_IMPORT


def uwsgi_binary() -> str:
    here = Path(sys.executable).parent / "uwsgi"
    found = str(here) if here.exists() else shutil.which("uwsgi")
    if not found:
        pytest.skip("uwsgi is not installed (pip install uwsgi)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> str:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        return r.read().decode()
    finally:
        c.close()


def test_uwsgi_without_lazy_apps_serves_every_start(embedded_broker: Any, tmp_path: Path) -> None:
    binary = uwsgi_binary()
    app = tmp_path / "app.py"
    app.write_text(APP)
    broker = embedded_broker
    for start in range(STARTS):
        queue = "uwsgi-%d" % start
        port = free_port()
        log = tmp_path / ("uwsgi-%d.log" % start)
        env = dict(os.environ, QUEEN_URL=broker.url, APP_QUEUE=queue)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [
            binary, "--master", "--processes", "2", "--http-socket", "127.0.0.1:%d" % port,
            "--wsgi-file", str(app), "--die-on-term", "--disable-logging",
        ]
        with open(log, "w") as logf:
            # own process group: a hung worker left behind by a failed start is killed with it
            proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        stop_sig = signal.SIGTERM if start % 2 == 0 else signal.SIGINT
        try:
            deadline = time.monotonic() + 20
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    assert time.monotonic() < deadline, "uWSGI not listening:\n" + log.read_text()
                    time.sleep(0.05)
            answers: List[str] = []
            errors: List[str] = []
            lock = threading.Lock()

            def client(k: int) -> None:
                for i in range(k, REQUESTS, 5):
                    try:
                        a = get(port, "/%d" % i)
                    except Exception as exc:
                        with lock:
                            errors.append("%d: %r" % (i, exc))
                        continue
                    with lock:
                        answers.append(a)

            threads = [threading.Thread(target=client, args=(k,)) for k in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert not errors, (start, errors, log.read_text())
            assert len(answers) == REQUESTS
            pids = Counter(a.split()[0] for a in answers)
            assert len(pids) == 2, (start, pids, log.read_text())  # both workers serve
            assert all(a.split()[1] == "0" for a in answers)  # every request's push confirmed
            assert all(a.split()[2] == "1" for a in answers)  # the post-fork hook ran in each worker
        finally:
            t0 = time.monotonic()
            proc.send_signal(stop_sig)
            try:
                proc.wait(timeout=STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail("uWSGI did not stop on %s within %.0f s:\n%s" % (stop_sig.name, STOP_BOUND_S, log.read_text()))
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # workers that outlived their master, if any
                except OSError:
                    pass
        assert time.monotonic() - t0 < STOP_BOUND_S
        text = log.read_text()
        assert "without thread support" not in text  # uWSGI >= 2.0.27: threads are on
        stored = broker.messages(queue)
        keys = Counter((m["partition"], str(m["data"])) for m in stored)
        assert all(n == 1 for n in keys.values()), keys
        assert len(stored) == AT_IMPORT + REQUESTS, (start, len(stored), text)
