"""queen_sync.contrib.flask: the extension, its config keys, the ``queen`` proxy, one client
per process (fork-aware), close at exit, and the Flask example app driven by Flask's test
client."""

from __future__ import annotations

import importlib.util
import os
import textwrap
import threading
import traceback
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

flask = pytest.importorskip("flask")

from queen_sync import InvalidInputError, Queen  # noqa: E402
from queen_sync.contrib.flask import FlaskQueen, get_client, queen  # noqa: E402
from queen_sync.contrib.flask import Queen as QueenAlias  # noqa: E402
from _helpers import run_script  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "flask_app" / "app.py"


def pop_all(client: Queen, queue: str) -> List[Dict[str, Any]]:
    """Pop (and ack) every message of ``queue`` in queue mode; an empty long poll ends it."""
    out: List[Dict[str, Any]] = []
    while True:
        msgs = client.queue(queue).batch(100).wait(True).timeout_millis(300).pop()
        if not msgs:
            return out
        client.ack(msgs, True)
        out.extend(msgs)


def make_app(ext: Optional[FlaskQueen] = None, **config: Any) -> flask.Flask:
    app = flask.Flask("test-%s" % uuid.uuid4().hex[:6])
    app.config.update(config)
    (ext or FlaskQueen()).init_app(app)
    return app


def load_example(monkeypatch: pytest.MonkeyPatch, broker_url: str, queue: str) -> Any:
    """Import the example module afresh (its app pushes to ``queue``)."""
    monkeypatch.setenv("QUEEN_URL", broker_url)
    monkeypatch.setenv("ORDERS_QUEUE", queue)
    monkeypatch.setenv("ORDERS_FLUSH_MILLIS", "600000")  # only explicit flushes / close send
    name = "flask_example_%s" % uuid.uuid4().hex[:8]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch, broker_url: str, qname: str) -> Iterator[Any]:
    """The example module, loaded fresh (its app pushes to ``qname``)."""
    mod = load_example(monkeypatch, broker_url, qname)
    try:
        yield mod
    finally:
        mod.queen_ext.close_all()


# ------------------------------------------------------------------ example app + test client


def test_example_view_pushes_from_the_request(example: Any, client: Queen, qname: str) -> None:
    web = example.app.test_client()
    r = web.post("/orders?confirm=1", json={"id": "o-1", "customer": "acme", "total": 42})
    assert r.status_code == 201, r.get_data(as_text=True)
    assert r.get_json()["status"] == "stored"
    stored = pop_all(client, qname)  # confirmed: on the broker before the answer
    assert [(m["data"]["orderId"], m["partition"]) for m in stored] == [("o-1", "acme")]
    assert stored[0]["data"]["order"] == {"id": "o-1", "customer": "acme", "total": 42}
    assert stored[0]["transactionId"] == r.get_json()["transactionId"]

    # Unconfirmed pushes are buffered (the flush timer is 10 minutes here) until a flush.
    for i in range(5):
        r = web.post("/orders", json={"id": "b-%d" % i, "customer": "c%d" % (i % 2)})
        assert r.status_code == 202 and r.get_json()["status"] == "accepted"
    ext = example.app.extensions["queen"]
    assert ext is example.queen_ext
    assert ext.get_buffer_stats()["totalBufferedMessages"] == 5
    assert ext.flush_all_buffers(10000) == 0
    assert sorted(m["data"]["orderId"] for m in pop_all(client, qname)) == ["b-%d" % i for i in range(5)]


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"json": {"customer": "Acme Corp"}}, "partition name 'Acme Corp'"),  # not a routable name
        ({"json": {"customer": "."}}, "not valid names"),
        ({"json": [{"customer": "acme"}]}, "JSON object"),  # an array body
        ({"json": "acme"}, "JSON object"),
        ({"data": "not json", "content_type": "text/plain"}, "JSON object"),
        ({"data": "{nope", "content_type": "application/json"}, "JSON object"),
        ({}, "JSON object"),  # no body at all
        ({"json": {"customer": {"name": "acme"}}}, "customer must be"),
        ({"json": {"id": ["o-1"], "customer": "acme"}}, "id must be"),
    ],
)
def test_example_view_answers_400_for_bad_input(example: Any, kwargs: Dict[str, Any], error: str) -> None:
    web = example.app.test_client()
    r = web.post("/orders?confirm=1", **kwargs)
    assert r.status_code == 400, r.get_data(as_text=True)
    assert r.is_json and error in r.get_json()["error"], r.get_json()
    assert example.queen_ext.get_buffer_stats()["totalBufferedMessages"] == 0  # nothing pushed


def test_example_start_up_keeps_an_existing_queue_config(monkeypatch: pytest.MonkeyPatch, broker_url: str,
                                                         client: Queen, qname: str, unique_name: Any) -> None:
    client.queue(qname).config({"leaseTime": 77, "retryLimit": 9}).create()
    mod = load_example(monkeypatch, broker_url, qname)  # the module builds its app at import
    fresh = unique_name("fresh")
    try:
        # with ORDERS_QUEUE_OPTIONS the queue is created only when missing
        mod.create_app({"ORDERS_QUEUE": qname, "ORDERS_QUEUE_OPTIONS": {"leaseTime": 120}})
        mod.create_app({"ORDERS_QUEUE": fresh, "ORDERS_QUEUE_OPTIONS": {"leaseTime": 120}})
        r = mod.app.test_client().post("/orders?confirm=1", json={"id": "o-1", "customer": "acme"})
        assert r.status_code == 201, r.get_data(as_text=True)
        cfg = client.admin.get_queue_detail(qname)["queue"]["config"]
        assert (cfg["leaseTime"], cfg["retryLimit"]) == (77, 9)
        assert client.admin.get_queue_detail(fresh)["queue"]["config"]["leaseTime"] == 120
    finally:
        mod.queen_ext.close_all()
        client.queue(fresh).delete()


# ------------------------------------------------------------------ extension / proxy


def test_alias_and_registration(broker_url: str) -> None:
    assert QueenAlias is FlaskQueen
    app = flask.Flask("reg")
    app.config["QUEEN_URL"] = broker_url
    ext = QueenAlias(app)
    assert app.extensions["queen"] is ext
    with app.app_context():
        c = queen._get_current_object()
        assert isinstance(c, Queen)
        assert c is ext.client is get_client() is flask.current_app.extensions["queen"].client
        assert c.urls == [broker_url]
    assert ext.get_client(app) is c  # the only app: usable outside a context too
    assert ext.close() == 0
    assert c.closed
    c2 = ext.get_client(app)  # a new client after close
    assert c2 is not c and not c2.closed
    ext.close_all()


def test_proxy_needs_an_app_context() -> None:
    with pytest.raises(RuntimeError):
        queen.queue("x")


def test_one_client_shared_by_request_threads(broker_url: str) -> None:
    app = make_app(QUEEN_URL=broker_url)

    @app.get("/who")
    def who() -> Any:
        return str(id(queen._get_current_object()))

    seen: List[str] = []
    errors: List[BaseException] = []

    def hit() -> None:
        try:
            with app.test_client() as web:
                for _ in range(5):
                    seen.append(web.get("/who").get_data(as_text=True))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(seen) == 40
    assert len(set(seen)) == 1
    app.extensions["queen"].close_all()


def test_config_keys_map_to_client_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUEEN_URL", raising=False)
    app = make_app(
        QUEEN_URLS="http://127.0.0.1:1/, http://127.0.0.1:2",
        QUEEN_TIMEOUT_MILLIS="1234",  # env-style strings of digits are accepted
        QUEEN_RETRY_ATTEMPTS=1,
        QUEEN_BEARER_TOKEN="s3cret-token",
        QUEEN_HEADERS={"X-Team": "a"},
        QUEEN_CLOSE_TIMEOUT_MILLIS=None,  # None = not set
        QUEEN_ORDERS_QUEUE="unrelated keys are ignored",
    )
    c = app.extensions["queen"].get_client(app)
    assert c.urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert c.timeout_millis == 1234
    assert "s3cret" not in repr(c) and "s3cret" not in repr(app.extensions["queen"])
    app.extensions["queen"].close_all()


def test_defaults_are_overridden_by_config(broker_url: str) -> None:
    ext = FlaskQueen(url="http://127.0.0.1:9", timeout_millis=777)
    app = make_app(ext, QUEEN_URLS=[broker_url])
    c = ext.get_client(app)
    assert c.urls == [broker_url] and c.timeout_millis == 777
    ext.close_all()


@pytest.mark.parametrize(
    "config",
    [
        {"QUEEN_URL": "http://a:1", "QUEEN_URLS": ["http://b:1"]},
        {"QUEEN_TIMEOUT_MILLIS": "soon"},
        {"QUEEN_URLS": 5},
        {"QUEEN_BEARER_TOKEN": 123},
        {"QUEEN_HEADERS": "X: y"},
    ],
)
def test_bad_config_fails_in_init_app(config: Dict[str, Any]) -> None:
    app = flask.Flask("bad")
    app.config.update(config)
    with pytest.raises(InvalidInputError):
        FlaskQueen(app)


def test_no_url_anywhere_fails_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUEEN_URL", raising=False)
    app = make_app()  # init_app itself needs no URL
    with app.app_context(), pytest.raises(InvalidInputError):
        queen.queue("x")


def test_one_extension_several_apps(broker_url: str, embedded_broker: Any) -> None:
    ext = FlaskQueen()
    a = make_app(ext, QUEEN_URL=broker_url)
    b = make_app(ext, QUEEN_URL=embedded_broker.url)
    with a.app_context():
        ca = queen._get_current_object()
    with b.app_context():
        cb = queen._get_current_object()
    assert ca.urls == [broker_url] and cb.urls == [embedded_broker.url]
    with pytest.raises(RuntimeError):
        ext.client  # noqa: B018 - two apps and no context: ambiguous
    with pytest.raises(RuntimeError):
        FlaskQueen().get_client(a)  # a different extension object
    assert ext.close_all() == 0


# ------------------------------------------------------------------ process lifecycle


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_gets_its_own_client(broker_url: str, client: Queen, qname: str) -> None:
    app = make_app(QUEEN_URL=broker_url)
    ext = app.extensions["queen"]
    parent_client = ext.get_client(app)
    parent_client.queue(qname).create()
    parent_client.queue(qname).buffer(1000, 600000).push({"data": "parent"})  # waits in the parent's buffer

    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 3
        try:
            with app.app_context():
                c = queen._get_current_object()
                ok = c is not parent_client and c is ext.get_client(app) and not c.closed
                ok = ok and c.get_buffer_stats()["totalBufferedMessages"] == 0
                c.queue(qname).push({"data": "child"})
                ok = ok and ext.close(timeout_millis=5000) == 0
            code = 0 if ok else 2
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert ext.get_client(app) is parent_client and not parent_client.closed
    assert ext.close(timeout_millis=5000) == 0  # sends the parent's buffered message
    assert sorted(m["data"] for m in pop_all(client, qname)) == ["child", "parent"]


@pytest.mark.parametrize("request_first", [False, True], ids=["buffer-only", "after-a-request"])
def test_client_is_flushed_and_closed_at_exit(broker_url: str, client: Queen, qname: str, request_first: bool) -> None:
    """``after-a-request``: the app's client has made a request before it buffers, so its
    connection pool (and urllib3's exit-time close of that pool) exists before the exit."""
    script = textwrap.dedent(
        """
        import atexit, sys
        import flask
        from queen_sync.contrib.flask import FlaskQueen, queen

        state = {}
        # registered before the extension's hook, so it runs after it (atexit is LIFO)
        atexit.register(lambda: print("closed-at-exit:", state["client"].closed, flush=True))
        app = flask.Flask("exit")
        app.config["QUEEN_URL"] = sys.argv[1]
        FlaskQueen(app)
        with app.app_context():
            state["client"] = queen._get_current_object()
            if sys.argv[3] == "1":
                queen.queue(sys.argv[2]).create()
            queen.queue(sys.argv[2]).buffer(1000, 600000).push([{"data": i} for i in range(3)])
        print("pushed", flush=True)
        """
    )
    client.queue(qname).create()
    proc = run_script(script, client.urls[0], qname, "1" if request_first else "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["pushed", "closed-at-exit:", "True"], proc.stdout + proc.stderr
    assert sorted(m["data"] for m in pop_all(client, qname)) == [0, 1, 2]
