"""queen_sync.contrib.django: the app and its ``QUEEN`` settings, the shared client, the
example project's view (``django.test.Client``) and the ``queen_consume`` management command
(``call_command`` with ``--limit``; SIGTERM graceful stop in a subprocess)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.management import CommandError, call_command  # noqa: E402
from django.test import Client, override_settings  # noqa: E402

from queen_sync import InvalidInputError, Queen  # noqa: E402

from _helpers import django_example_project  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "examples" / "django_app"


@pytest.fixture(scope="module", autouse=True)
def django_project(broker_url: str) -> Iterator[None]:
    """Django configured in-process like the example project (no database)."""
    yield from django_example_project(broker_url)


def pop_all(client: Queen, queue: str, group: Optional[str] = None) -> List[Dict[str, Any]]:
    """Pop (and ack) every message ``group`` (or queue mode) can still get; an empty long
    poll ends it."""
    out: List[Dict[str, Any]] = []
    while True:
        b = client.queue(queue).batch(100).wait(True).timeout_millis(300)
        if group:
            b = b.group(group)
        msgs = b.pop()
        if not msgs:
            return out
        client.ack(msgs, True, {"group": group} if group else None)
        out.extend(msgs)


def write_module(tmp_path: Path, name: str, source: str) -> str:
    (tmp_path / ("%s.py" % name)).write_text(textwrap.dedent(source))
    return name


# ------------------------------------------------------------------ settings / shared client


def test_get_client_is_shared_and_follows_settings(broker_url: str) -> None:
    from queen_sync.contrib.django import get_client

    c = get_client()
    assert c is get_client() and c.urls == [broker_url] and c.timeout_millis == 10000
    with override_settings(QUEEN={"URLS": "http://127.0.0.1:1,http://127.0.0.1:2", "TIMEOUT_MILLIS": 5}):
        assert c.closed  # the setting changed: the old client is closed
        other = get_client()
        assert other.urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"] and other.timeout_millis == 5
    assert other.closed
    again = get_client()
    assert again.urls == [broker_url] and not again.closed


def test_shared_client_across_threads() -> None:
    from queen_sync.contrib.django import get_client

    got: List[int] = []
    threads = [threading.Thread(target=lambda: got.append(id(get_client()))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 8 and len(set(got)) == 1


@pytest.mark.parametrize(
    "value",
    [
        ["http://x:1"],  # not a dict
        {"URLL": "http://x:1"},  # typo
        {"TIMEOUT_MILLIS": "soon"},
        {"URL": "http://a:1", "URLS": ["http://b:1"]},
        {"BEARER_TOKEN": 42},
    ],
)
def test_bad_settings_raise_improperly_configured(value: Any) -> None:
    from queen_sync.contrib.django import QueenConfigurationError

    with pytest.raises(QueenConfigurationError) as info:
        with override_settings(QUEEN=value):
            pass
    assert isinstance(info.value, ImproperlyConfigured) and isinstance(info.value, InvalidInputError)


def test_bad_settings_fail_when_the_app_loads(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import django
        from django.conf import settings
        settings.configure(INSTALLED_APPS=["queen_sync.contrib.django"], QUEEN={"URL": "http://x:1", "TIMEOUT": 5})
        django.setup()
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "QueenConfigurationError" in proc.stderr and "'TIMEOUT'" in proc.stderr


def test_bearer_token_not_in_error_messages() -> None:
    from queen_sync.contrib.django import QueenConfigurationError

    with pytest.raises(QueenConfigurationError) as info:
        with override_settings(QUEEN={"BEARER_TOKEN": 123456789}):
            pass
    assert "123456789" not in str(info.value)


# ------------------------------------------------------------------ example view


def test_example_view_pushes_from_the_request(client: Queen, qname: str) -> None:
    client.queue(qname).create()
    with override_settings(ORDERS_QUEUE=qname):
        web = Client()
        r = web.post("/orders/", data=json.dumps({"id": "o-7", "customer": "acme"}), content_type="application/json")
        assert r.status_code == 201, r.content
        body = r.json()
        assert body["orderId"] == "o-7" and body["status"] == "queued" and body["transactionId"]
        assert web.post("/orders/", data="{nope", content_type="application/json").status_code == 400
        assert web.get("/orders/").status_code == 405
    stored = pop_all(client, qname)
    assert [(m["data"]["orderId"], m["partition"], m["transactionId"]) for m in stored] == [
        ("o-7", "acme", body["transactionId"])
    ]


@pytest.mark.parametrize(
    "body, error",
    [
        ({"customer": "Acme Corp"}, "partition name 'Acme Corp'"),  # not a routable name
        ({"customer": ".."}, "not valid names"),
        ([{"customer": "acme"}], "JSON object"),  # an array body
        (None, "JSON object"),  # JSON null
        ({"customer": ["acme"]}, "customer must be"),
    ],
)
def test_example_view_answers_400_for_bad_input(client: Queen, qname: str, body: Any, error: str) -> None:
    with override_settings(ORDERS_QUEUE=qname):
        r = Client().post("/orders/", data=json.dumps(body), content_type="application/json")
        assert r.status_code == 400, r.content
        assert error in r.json()["error"], r.json()
        r = Client().post("/orders/", data=b"", content_type="application/json")  # no body
        assert r.status_code == 400 and "JSON object" in r.json()["error"]
    assert pop_all(client, qname) == []


def test_example_view_answers_503_when_the_broker_is_unreachable() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused
    with override_settings(QUEEN={"URL": "http://127.0.0.1:%d" % port, "RETRY_ATTEMPTS": 1,
                                  "RETRY_DELAY_MILLIS": 10, "TIMEOUT_MILLIS": 2000}):
        r = Client().post("/orders/", data=json.dumps({"customer": "acme"}), content_type="application/json")
    assert r.status_code == 503, r.content
    assert r.json()["error"].startswith("queue unavailable: ")


def test_example_view_keeps_the_queue_config(client: Queen, qname: str) -> None:
    client.queue(qname).config({"leaseTime": 77}).create()
    with override_settings(ORDERS_QUEUE=qname):
        r = Client().post("/orders/", data=json.dumps({"customer": "acme"}), content_type="application/json")
    assert r.status_code == 201, r.content
    assert client.admin.get_queue_detail(qname)["queue"]["config"]["leaseTime"] == 77
    assert len(pop_all(client, qname)) == 1


# ------------------------------------------------------------------ queen_consume


RECORDER = """
import threading
SEEN = []
_lock = threading.Lock()

def handle(message):
    with _lock:
        SEEN.append(message["data"])
"""


def test_queen_consume_with_limit(client: Queen, qname: str, unique_name: Any, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = write_module(tmp_path, "recorder_%s" % unique_name("h").replace("-", "_"), RECORDER)
    group = unique_name("g")
    client.queue(qname).create()
    for p in ("a", "b"):
        client.queue(qname).partition(p).push([{"data": "%s-%d" % (p, i)} for i in range(4)])

    out = io.StringIO()
    call_command(
        "queen_consume", "%s.handle" % mod, "--queue", qname, "--group", group, "--limit", "5",
        "--concurrency", "2", "--batch", "2", "--each", "--idle-millis", "20000", stdout=out,
    )
    seen = list(sys.modules[mod].SEEN)
    assert len(seen) == 5 and len(set(seen)) == 5
    line = out.getvalue().strip()
    assert "handled=5 acked=5 failed=0" in line and line.endswith("reason=limit"), line
    # the 5 were acked for the group: it gets exactly the other 3 now
    rest = [m["data"] for m in pop_all(client, qname, group)]
    assert sorted(rest + seen) == sorted("%s-%d" % (p, i) for p in "ab" for i in range(4))

    # another run with --idle-millis ends on idle once nothing is left (module:attr form)
    out = io.StringIO()
    call_command("queen_consume", "%s:handle" % mod, "--queue", qname, "--group", group, "--idle-millis", "300",
                 stdout=out)
    assert "handled=0" in out.getvalue() and out.getvalue().strip().endswith("reason=idle")


def test_queen_consume_bad_arguments(qname: str) -> None:
    with pytest.raises(CommandError, match="cannot import"):
        call_command("queen_consume", "no_such_module.handle", "--queue", qname, "--limit", "1")
    with pytest.raises(CommandError, match="not callable"):
        call_command("queen_consume", "queen_sync.contrib.django.SETTING_NAME", "--queue", qname, "--limit", "1")
    with pytest.raises(CommandError):
        call_command("queen_consume", "orders.handlers.handle_order")  # --queue is required
    with pytest.raises(CommandError):
        call_command("queen_consume", "orders.handlers.handle_order", "--queue", qname, "--concurrency", "0")
    with pytest.raises(CommandError, match="InvalidInputError"):
        call_command("queen_consume", "orders.handlers.handle_order", "--queue", "bad name!", "--limit", "1")


@pytest.mark.parametrize("option", ["--group", "--partition", "--subscription-from"])
def test_queen_consume_empty_option_is_refused_not_ignored(client: Queen, qname: str, option: str) -> None:
    # an empty --group consumed (and nacked) the queue in queue mode; an empty --partition
    # consumed every partition; an empty --subscription-from read the whole history
    client.queue(qname).push({"data": "kept"})
    with pytest.raises(CommandError, match="InvalidInputError"):
        call_command("queen_consume", "orders.handlers.handle_order", "--queue", qname, option, "",
                     "--idle-millis", "300")
    assert [m["data"] for m in client.queue(qname).batch(5).pop()] == ["kept"]


GATED = """
import os, time

STARTED = os.environ["TEST_STARTED_FILE"]
DONE = os.environ["TEST_DONE_FILE"]
GATE = os.environ["TEST_GATE_FILE"]

def handle(message):
    with open(STARTED, "a") as f:
        f.write(message["data"] + "\\n")
    deadline = time.monotonic() + 30
    while not os.path.exists(GATE):          # held until the test opens the gate
        if time.monotonic() > deadline:
            raise RuntimeError("gate never opened")
        time.sleep(0.01)
    with open(DONE, "a") as f:
        f.write(message["data"] + "\\n")
"""


def _lines(path: Path) -> List[str]:
    return path.read_text().split() if path.exists() else []


def test_queen_consume_sigterm_finishes_in_flight_and_exits_0(
    broker_url: str, client: Queen, qname: str, unique_name: Any, tmp_path: Path
) -> None:
    mod = write_module(tmp_path, "gated_handler", GATED)
    group = unique_name("g")
    total = ["m-%s-%02d" % (p, i) for p in "abc" for i in range(20)]
    client.queue(qname).create()
    for p in "abc":
        client.queue(qname).partition(p).push([{"data": d} for d in total if d.startswith("m-%s-" % p)])

    started, done, gate = tmp_path / "started", tmp_path / "done", tmp_path / "gate"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(PROJECT), str(ROOT)]),
        DJANGO_SETTINGS_MODULE="exampleproject.settings",
        QUEEN_URL=broker_url,
        TEST_STARTED_FILE=str(started),
        TEST_DONE_FILE=str(done),
        TEST_GATE_FILE=str(gate),
    )
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "queen_consume", "%s.handle" % mod, "--queue", qname, "--group", group,
         "--concurrency", "3", "--batch", "4", "--each"],
        cwd=str(PROJECT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    stderr_lines: List[str] = []
    stopping = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_lines.append(line)
            if "stopping gracefully" in line:
                stopping.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while len(_lines(started)) < 3:  # three handlers (one per partition) are in flight
            assert proc.poll() is None, "".join(stderr_lines)
            assert time.monotonic() < deadline, "handlers never started: %s" % "".join(stderr_lines)
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert stopping.wait(30), "no graceful stop logged: %s" % "".join(stderr_lines)
        gate.write_text("open")  # let the in-flight handlers finish now that the stop is on
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert proc.returncode == 0, "".join(stderr_lines)
    assert "reason=signal" in out, out
    handled = _lines(done)
    assert sorted(_lines(started)) == sorted(handled)  # every handler that started finished
    assert len(set(handled)) == len(handled) and 3 <= len(handled) < len(total)
    assert "acked=%d " % len(handled) in out and "ack_failures=0" in out, out
    # nothing lost, nothing handled twice: the group gets exactly what was not handled
    rest = [m["data"] for m in pop_all(client, qname, group)]
    assert sorted(rest + handled) == sorted(total)
