"""Small helpers shared by several test modules (import as ``from _helpers import ...``; pytest
puts this folder on ``sys.path`` like it does for ``_broker_http``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from queen_sync import codec

from queen_sync.consumer import Consumer
from queen_sync.transport import Response

#: The checkout (the folder above tests/).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(script: str, *args: str, timeout: float = 60.0) -> "subprocess.CompletedProcess[str]":
    """Run ``python -c script args...`` with this checkout first on ``PYTHONPATH``; returns
    the finished process (stdout / stderr as text)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def wait_until(cond: Callable[[], Any], timeout: float = 15.0, interval: float = 0.01) -> bool:
    """Poll ``cond`` every ``interval`` seconds; True once it is truthy, False after ``timeout``
    seconds without it (the caller asserts)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_for(pred: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll ``pred`` until true or the deadline (``timeout_s`` seconds) passes, then fail with
    ``AssertionError("timed out waiting for <what>")``."""
    if not wait_until(pred, timeout_s, 0.002):
        raise AssertionError("timed out waiting for %s" % what)


def django_example_project(broker_url: str) -> Iterator[None]:
    """Configure Django in-process like ``examples/django_app`` (no database) on
    ``broker_url``; a generator for module-scoped fixtures (``yield from``). Closes the
    shared client afterwards."""
    import sys
    from pathlib import Path

    import django
    from django.conf import settings

    project = Path(__file__).resolve().parent.parent / "examples" / "django_app"
    if str(project) not in sys.path:
        sys.path.insert(0, str(project))
    if not settings.configured:
        settings.configure(
            SECRET_KEY="test",
            ALLOWED_HOSTS=["testserver"],
            INSTALLED_APPS=["queen_sync.contrib.django", "orders"],
            MIDDLEWARE=[],
            ROOT_URLCONF="exampleproject.urls",
            DATABASES={},
            USE_TZ=True,
            QUEEN={"URL": broker_url, "TIMEOUT_MILLIS": 10000},
            ORDERS_QUEUE="orders",
        )
        django.setup()
    yield
    from queen_sync.contrib.django import close_client

    close_client()


def run_forked(body: Callable[[], Any], timeout: float = 60.0, fork: Any = None) -> int:
    """Fork (with ``fork()``, default ``os.fork``); run ``body()`` in the child (truthy = pass);
    return the child's exit code (0 pass, 2 falsy result, 3 exception — traceback on stderr).
    A child still running after ``timeout`` seconds (a hang) is killed and reported as -9.
    POSIX only."""
    import os
    import signal
    import threading
    import traceback

    pid = (fork or os.fork)()
    if pid == 0:  # child: never return into pytest
        code = 3
        try:
            code = 0 if body() else 2
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -9
        threading.Event().wait(0.01)


class FakeConsumerSession:
    """A stand-in for the client's session under a consumer, with no broker: pops are
    answered from ``pops`` (one list of message dicts per pop, then empty pops) and every ack
    request is handed to :meth:`answer_acks` (the decoded body and its ack items), which
    subclasses write. It is its own consumer registry (``consumers.create``)."""

    default_renew_interval_millis = 10000

    def __init__(self, pops: Optional[List[List[Dict[str, Any]]]] = None) -> None:
        self._pops = list(pops or [])
        self.lock = threading.Lock()
        self.closed = False
        self.timeout_millis = 30000
        self.ack_timeout_millis = 5000
        self.consumers = self

    def check_open(self) -> None:  # the session's closed check (a Session raises once closed)
        assert not self.closed

    def create(self, settings: Any, handler: Any, **options: Any) -> Consumer:
        return Consumer(self, settings, handler, **options)  # type: ignore[arg-type]

    def request(self, method: str, path: str, *, body: Optional[bytes] = None, **kw: Any) -> Response:
        if path.startswith("/api/v1/pop/"):
            with self.lock:
                msgs = self._pops.pop(0) if self._pops else []
            return Response(200, json.dumps({"success": True, "messages": msgs}).encode(), "fake")
        doc = json.loads(body or b"{}")
        items = doc["acknowledgments"] if path == "/api/v1/ack/batch" else [doc]
        return Response(200, json.dumps(self.answer_acks(doc, items)).encode(), "fake")

    def answer_acks(self, doc: Dict[str, Any], items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The per-item results of one ack request (or raise, as a broken request would)."""
        raise NotImplementedError


def capture_consumers(monkeypatch: Any) -> List[Consumer]:
    """The :class:`Consumer` objects made from now on, in order (a blocking ``consume()``
    hides its own); ``monkeypatch`` undoes the hook."""
    made: List[Consumer] = []
    real = Consumer.__init__

    def init(self: Consumer, *a: Any, **kw: Any) -> None:
        real(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(Consumer, "__init__", init)
    return made


def libc_fork_child(body: Callable[[], Any], timeout: float = 10.0) -> int:
    """Fork through libc, without Python's at-fork hooks (as uWSGI forks its workers), run
    ``body()`` in the child; exit code as :func:`run_forked` (-9: killed after a hang).
    Linux only."""
    import ctypes

    # PyDLL keeps the GIL held across the call
    return run_forked(body, timeout, fork=ctypes.PyDLL(None).fork)


def codec_twins() -> Tuple[ModuleType, Optional[ModuleType]]:
    """``(pure, compiled)`` codec backends; compiled is None when the extension is not built."""
    try:
        compiled: Optional[ModuleType] = codec.load_backend("cython")
    except ImportError:
        compiled = None
    return codec.load_backend("python"), compiled


def need_compiled(compiled: Optional[ModuleType]) -> None:
    """Skip the calling test when ``compiled`` is None; fail it instead when
    ``QUEEN_SYNC_REQUIRE_EXTENSIONS`` is set (a CI that means to test the extension)."""
    if compiled is None:
        if os.environ.get("QUEEN_SYNC_REQUIRE_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no", "off"):
            pytest.fail("QUEEN_SYNC_REQUIRE_EXTENSIONS=1 but queen_sync._ccodec is not importable")
        pytest.skip("compiled codec not built (python setup.py build_ext --inplace)")
