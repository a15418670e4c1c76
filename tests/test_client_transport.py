"""Transport and wire-shape tests against a tiny stdlib HTTP server with scripted replies.

The stub records every request (method, path, query, headers, body, client port), so these
tests check exactly what goes on the wire, and how each reply status maps to an exception.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

import pytest

from queen_sync import (
    AckError,
    AuthenticationError,
    BrokerError,
    ClientClosedError,
    LeaseError,
    Queen,
    QueenConnectionError,
    QueenError,
    QueenHTTPError,
    QueenTimeoutError,
    RouteNotFoundError,
    TransactionError,
)
from queen_sync.errors import ProtocolError

POP_EMPTY = {"success": False, "error": "no_available_partition", "messages": []}


class Stub:
    """Scripted HTTP server: answers queued replies in order, then ``default``."""

    def __init__(self) -> None:
        self.requests: List[Dict[str, Any]] = []
        self.replies: List[Tuple[int, bytes, Dict[str, str]]] = []
        self.default: Tuple[int, bytes, Dict[str, str]] = (200, b"{}", {})
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                parts = urlsplit(self.path)
                with stub.lock:
                    stub.requests.append(
                        {
                            "method": self.command,
                            "path": parts.path,
                            "query": {k: v[0] for k, v in parse_qs(parts.query).items()},
                            "query_raw": parts.query,
                            "headers": dict(self.headers.items()),
                            "body": body,
                            "port": self.client_address[1],
                        }
                    )
                    status, data, headers = stub.replies.pop(0) if stub.replies else stub.default
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def reply(self, status: int, body: Any = None, headers: Optional[Dict[str, str]] = None, times: int = 1) -> None:
        data = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        with self.lock:
            for _ in range(times):
                self.replies.append((status, data, headers or {}))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def sq(stub: Stub) -> Iterator[Queen]:
    q = Queen(stub.url, retry_attempts=3, retry_delay_millis=1, timeout_millis=5000)
    try:
        yield q
    finally:
        q.close()


MSG = {
    "id": "01a22b19-65cc-7000-af05-bf46450b6f75",
    "transactionId": "b085f179-a03a-40ee-b9ef-927e81c6abab",
    "partitionId": "2cea0438-481e-4505-a861-0beee85bf66a",
    "partition": "acme",
    "data": {"x": 1},
    "leaseId": "01a22b19-66a9-7000-9aa7-810b2c18a2ba",
    "consumerGroup": "billing",
}


# --------------------------------------------------------------------------- status mapping


@pytest.mark.parametrize(
    "status,cls",
    [(401, AuthenticationError), (403, AuthenticationError), (404, RouteNotFoundError), (500, QueenHTTPError), (400, QueenHTTPError)],
)
def test_status_maps_to_error_class(stub: Stub, sq: Queen, status: int, cls: type) -> None:
    stub.reply(status, {"error": "nope %d" % status}, times=3)
    with pytest.raises(cls) as ei:
        sq.queue("orders").delete()
    assert ei.value.status == status
    assert ei.value.error == "nope %d" % status
    assert "DELETE /api/v1/resources/queues/orders" in str(ei.value)
    if status != 500:  # 4xx is never retried
        assert len(stub.requests) == 1


def test_404_html_body_names_route(stub: Stub, sq: Queen) -> None:
    stub.reply(404, b"<html>Not Found</html>")
    with pytest.raises(RouteNotFoundError) as ei:
        sq.queue("orders").pop()
    assert "GET /api/v1/pop/queue/orders" in str(ei.value)
    assert ei.value.error is None


def test_5xx_retried_for_idempotent_get(stub: Stub, sq: Queen) -> None:
    stub.reply(503, {"error": "busy"}, times=2)
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    assert sq.queue("orders").pop() == []
    assert len(stub.requests) == 3


def test_5xx_gives_up_after_attempts(stub: Stub, sq: Queen) -> None:
    stub.reply(502, {"error": "bad gateway"}, times=10)
    with pytest.raises(QueenHTTPError) as ei:
        sq.queue("orders").pop()
    assert ei.value.status == 502 and ei.value.error == "bad gateway"
    assert len(stub.requests) == 3  # retry_attempts is the total


def test_5xx_not_retried_for_ack_and_transaction(stub: Stub, sq: Queen) -> None:
    stub.reply(500, {"error": "boom"}, times=5)
    with pytest.raises(QueenHTTPError):
        sq.ack(MSG)
    assert len(stub.requests) == 1
    with pytest.raises(QueenHTTPError):
        sq.transaction().ack(MSG).commit()
    assert len(stub.requests) == 2


def test_bearer_token_and_headers_sent_not_shown(stub: Stub) -> None:
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    with Queen(stub.url, bearer_token="s3cret-token", headers={"X-Extra": "1"}) as q:
        assert "s3cret" not in repr(q)
        q.queue("orders").pop()
    h = stub.requests[0]["headers"]
    assert h["Authorization"] == "Bearer s3cret-token"
    assert h["X-Extra"] == "1"


def test_token_never_logged(stub: Stub, caplog: pytest.LogCaptureFixture) -> None:
    stub.reply(503, {"error": "busy"})
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    caplog.set_level(logging.DEBUG, logger="queen_sync")
    with Queen(stub.url, bearer_token="s3cret-token", retry_delay_millis=1) as q:
        q.queue("orders").pop()
    assert caplog.records, "a retry should have been logged"
    assert all("s3cret" not in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- wire shapes


def test_pop_query_params_exact(stub: Stub, sq: Queen) -> None:
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    sq.queue("orders").group("billing").batch(10).partitions(3).wait(True).timeout_millis(2000) \
        .subscription_mode("all").subscription_from("now").auto_ack(True).pop()
    r = stub.requests[-1]
    assert r["method"] == "GET" and r["path"] == "/api/v1/pop/queue/orders"
    assert r["query"] == {
        "batch": "10",
        "wait": "true",
        "timeout": "2000",
        "consumerGroup": "billing",
        "partitions": "3",
        "autoAck": "true",
        "subscriptionMode": "all",
        "subscriptionFrom": "now",
    }
    assert r["body"] == b""


def test_pop_defaults_and_routes(stub: Stub, sq: Queen) -> None:
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    sq.queue("orders").pop()
    assert stub.requests[-1]["query"] == {"batch": "1", "wait": "false"}
    sq.queue("orders").partition("Default").pop()
    assert stub.requests[-1]["path"] == "/api/v1/pop/queue/orders"
    sq.queue("orders").partition("acme").partitions(5).pop()
    assert stub.requests[-1]["path"] == "/api/v1/pop/queue/orders/partition/acme"
    assert "partitions" not in stub.requests[-1]["query"]


def test_pop_real_error_raises_not_empty(stub: Stub, sq: Queen) -> None:
    stub.reply(200, {"error": "database unavailable"})
    with pytest.raises(BrokerError) as ei:
        sq.queue("orders").pop()
    assert ei.value.error == "database unavailable"


def test_pop_204_with_body_then_connection_not_reused(stub: Stub, sq: Queen) -> None:
    stub.reply(204, {"messages": [], "paused": True})
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    assert sq.queue("orders").pop() == []
    assert sq.queue("orders").pop() == []
    assert sq.queue("orders").pop() == []
    ports = [r["port"] for r in stub.requests]
    assert ports[1] != ports[0], "the connection that carried a 204 must not be reused"
    assert ports[2] == ports[1], "other connections are kept alive"


def test_every_post_has_json_body(stub: Stub, sq: Queen) -> None:
    stub.reply(200, [{"index": 0, "leaseId": MSG["leaseId"], "success": True, "error": None, "expiresAt": "x"}])
    sq.renew(MSG)
    r = stub.requests[-1]
    assert r["method"] == "POST" and r["path"] == "/api/v1/lease/%s/extend" % MSG["leaseId"]
    assert r["body"] == b"{}"
    assert r["headers"]["Content-Type"] == "application/json"


def test_create_body_sends_defaults_and_config(stub: Stub, sq: Queen) -> None:
    stub.default = (200, b'{"configured": true}', {})
    sq.queue("orders").create()
    body = json.loads(stub.requests[-1]["body"])
    assert body["queue"] == "orders"
    assert body["options"]["leaseTime"] == 300 and len(body["options"]) == 15
    sq.queue("orders").namespace("ns").task("t").config({"lease_time": 60, "retryLimit": 2, "dead_letter_queue": True}).create()
    body = json.loads(stub.requests[-1]["body"])
    assert body["namespace"] == "ns" and body["task"] == "t"
    assert body["options"]["leaseTime"] == 60 and body["options"]["retryLimit"] == 2
    assert body["options"]["deadLetterQueue"] is True


def test_configure_error_reply_raises(stub: Stub, sq: Queen) -> None:
    stub.reply(200, {"success": False, "error": "ERROR: invalid input syntax for type integer"})
    with pytest.raises(BrokerError) as ei:
        sq.queue("orders").create()
    assert "invalid input syntax" in ei.value.error


def test_push_error_body_and_failed_item(stub: Stub, sq: Queen) -> None:
    stub.reply(200, {"error": "queue is paused"})
    with pytest.raises(BrokerError) as ei:
        sq.queue("orders").push({"data": 1})
    assert ei.value.error == "queue is paused"
    stub.reply(201, [{"index": 0, "status": "failed", "error": "disk full"}, {"index": 1, "status": "queued"}])
    with pytest.raises(BrokerError) as ei:
        sq.queue("orders").push([{"data": 1}, {"data": 2}])
    assert ei.value.error == "disk full"
    assert isinstance(ei.value.body, list) and len(ei.value.body) == 2


def test_ack_batch_split_per_group(stub: Stub, sq: Queen) -> None:
    m1 = dict(MSG, consumerGroup="g1", transactionId="t1")
    m2 = dict(MSG, consumerGroup="g2", transactionId="t2")
    # another partition than m1's: a nack is the last ack of its partition in a call
    m3 = dict(MSG, consumerGroup="g1", transactionId="t3", partitionId="0a0b0c0d-0000-4000-8000-000000000003")
    m4 = dict(MSG, consumerGroup="__QUEUE_MODE__", transactionId="t4")
    ok = lambda n: [{"index": i, "success": True, "error": None} for i in range(n)]  # noqa: E731
    stub.reply(200, ok(2))
    stub.reply(200, ok(1))
    stub.reply(200, ok(1))
    res = sq.ack([m1, m2, m3, m4], "failed", {"error": "bad"})
    assert [r["index"] for r in res] == [0, 1, 2, 3]
    bodies = [json.loads(r["body"]) for r in stub.requests]
    assert all(r["path"] == "/api/v1/ack/batch" for r in stub.requests)
    assert bodies[0]["consumerGroup"] == "g1"
    assert [a["transactionId"] for a in bodies[0]["acknowledgments"]] == ["t1", "t3"]
    assert bodies[1]["consumerGroup"] == "g2"
    assert "consumerGroup" not in bodies[2]  # queue mode
    assert all(a["status"] == "failed" and a["error"] == "bad" for b in bodies for a in b["acknowledgments"])
    assert all(a["leaseId"] == MSG["leaseId"] for b in bodies for a in b["acknowledgments"])


def test_a_partitions_acks_after_its_nack_wait_for_the_outcome(stub: Stub, sq: Queen) -> None:
    ms = [dict(MSG, transactionId="t%d" % i, consumerGroup="g") for i in range(3)]
    other = dict(MSG, transactionId="o1", consumerGroup="g", partitionId="0a0b0c0d-0000-4000-8000-000000000009")
    stub.reply(200, [{"index": 0, "transactionId": "t0", "success": True, "error": None, "dlq": True, "leaseReleased": False},
                     {"index": 1, "transactionId": "o1", "success": True, "error": None, "dlq": False, "leaseReleased": True}])
    stub.reply(200, [{"index": 0, "transactionId": "t1", "success": True, "error": None, "dlq": True},
                     {"index": 1, "transactionId": "t2", "success": True, "error": None, "dlq": True}])
    res = sq.ack([ms[0], other, ms[1], ms[2]], "failed")
    calls = [[a["transactionId"] for a in json.loads(r["body"])["acknowledgments"]] for r in stub.requests]
    assert calls == [["t0", "o1"], ["t1", "t2"]]  # t0 was dead-lettered: the rest follow in a second call
    assert [(r["index"], r["transactionId"], r["dlq"]) for r in res] == [
        (0, "t0", True), (1, "o1", False), (2, "t1", True), (3, "t2", True)]
    stub.requests.clear()
    stub.reply(200, [{"index": 0, "transactionId": "t0", "success": True, "error": None, "dlq": False, "leaseReleased": True}])
    res = sq.ack(ms, "failed")
    assert len(stub.requests) == 1  # t0 released the lease: t1, t2 are redelivered with it, not sent
    assert [(r["transactionId"], r["success"], r["leaseReleased"]) for r in res] == [
        ("t0", True, True), ("t1", True, True), ("t2", True, True)]


def test_a_refused_nack_or_another_lease_holds_nothing_back(stub: Stub, sq: Queen) -> None:
    ms = [dict(MSG, transactionId="t%d" % i, consumerGroup="g") for i in range(3)]
    stale = dict(MSG, transactionId="s0", consumerGroup="g", leaseId="01a22b19-0000-7000-8000-00000000dead")
    # a nack under an older pop's lease decides nothing for this pop's acks: one call
    stub.reply(200, [{"index": i, "transactionId": t, "success": i > 0, "error": None if i else "Invalid or expired lease"}
                     for i, t in enumerate(["s0", "t0", "t1", "t2"])])
    with pytest.raises(AckError):
        sq.ack([dict(stale, _status="failed")] + ms, "completed")
    assert [[a["transactionId"] for a in json.loads(r["body"])["acknowledgments"]] for r in stub.requests] == [
        ["s0", "t0", "t1", "t2"]]
    stub.requests.clear()
    # a refused nack changed nothing: the rest go in the next call and get the broker's verdicts
    stub.reply(200, [{"index": 0, "transactionId": "t0", "success": False, "error": "Message not found"}])
    stub.reply(200, [{"index": 0, "transactionId": "t1", "success": True, "error": None},
                     {"index": 1, "transactionId": "t2", "success": True, "error": None, "leaseReleased": True}])
    with pytest.raises(AckError) as ei:
        sq.ack([dict(ms[0], _status="failed"), ms[1], ms[2]], "completed")
    assert [[a["transactionId"] for a in json.loads(r["body"])["acknowledgments"]] for r in stub.requests] == [
        ["t0"], ["t1", "t2"]]
    assert [(r["transactionId"], r["success"]) for r in ei.value.results] == [("t0", False), ("t1", True), ("t2", True)]


def test_a_list_ack_failing_midway_says_what_was_applied(stub: Stub, sq: Queen) -> None:
    ms = [dict(MSG, transactionId="t%d" % i, consumerGroup="g") for i in range(3)]
    stub.reply(200, [{"index": 0, "transactionId": "t0", "success": True, "error": None, "dlq": True}])
    stub.reply(400, {"error": "boom"})
    with pytest.raises(QueenError) as ei:
        sq.ack(ms, "failed")
    assert [(r["index"], r["transactionId"], r["dlq"]) for r in ei.value.applied] == [(0, "t0", True)]
    if sys.version_info >= (3, 11):  # exception notes
        assert any("see .applied" in n for n in ei.value.__notes__)


def test_ack_explicit_group_overrides(stub: Stub, sq: Queen) -> None:
    stub.reply(200, [{"index": 0, "success": True, "error": None}])
    sq.ack(MSG, True, {"consumer_group": "other"})
    body = json.loads(stub.requests[-1]["body"])
    assert body["consumerGroup"] == "other" and body["status"] == "completed"


def test_ack_refused_item_raises_with_results(stub: Stub, sq: Queen) -> None:
    stub.reply(200, [{"index": 0, "success": True, "error": None}, {"index": 1, "success": False, "error": "Invalid or expired lease"}])
    with pytest.raises(AckError) as ei:
        sq.ack([dict(MSG, transactionId="a"), dict(MSG, transactionId="b")])
    assert len(ei.value.results) == 2 and len(ei.value.failed) == 1
    assert ei.value.failed[0]["error"] == "Invalid or expired lease"


def test_renew_refused_and_dedup(stub: Stub, sq: Queen) -> None:
    stub.reply(200, [{"index": 0, "leaseId": "L1", "success": True, "error": None, "expiresAt": "x"}])
    stub.reply(200, [{"index": 0, "leaseId": "L2", "success": False, "error": "Lease already expired", "expiresAt": None}])
    with pytest.raises(LeaseError) as ei:
        sq.renew([dict(MSG, leaseId="L1"), "L1", dict(MSG, leaseId="L2")], seconds=30)
    assert ei.value.error == "Lease already expired"
    assert [r["path"] for r in stub.requests] == ["/api/v1/lease/L1/extend", "/api/v1/lease/L2/extend"]
    assert json.loads(stub.requests[0]["body"]) == {"seconds": 30}


def test_transaction_wire_shape(stub: Stub, sq: Queen) -> None:
    stub.reply(200, {"success": True, "transactionId": "t", "results": []})
    sq.transaction().queue("inv").partition("acme").push([{"data": {"n": 1}}]).ack(MSG, "completed").commit()
    body = json.loads(stub.requests[-1]["body"])
    push, ack = body["operations"]
    assert push["type"] == "push" and push["items"][0]["queue"] == "inv" and push["items"][0]["partition"] == "acme"
    assert push["items"][0]["payload"] == {"n": 1} and len(push["items"][0]["transactionId"]) == 36
    assert ack == {
        "type": "ack",
        "transactionId": MSG["transactionId"],
        "partitionId": MSG["partitionId"],
        "status": "completed",
        "consumerGroup": "billing",
        "leaseId": MSG["leaseId"],
    }
    stub.reply(200, {"success": False, "error": "ACK operation failed: Message not found", "results": []})
    with pytest.raises(TransactionError) as ei:
        sq.transaction().ack(MSG).commit()
    assert ei.value.result["success"] is False
    assert "Message not found" in str(ei.value)


def test_non_json_reply_is_protocol_error(stub: Stub, sq: Queen) -> None:
    stub.reply(200, b"<html>oops</html>")
    with pytest.raises(ProtocolError):
        sq.queue("orders").pop()


def test_configure_and_delete_replies_must_be_objects(stub: Stub, sq: Queen) -> None:
    # create()/delete() are typed to return a dict: valid JSON that is not an object
    # (here a list and a string, answered with 200) is a protocol error, not a return value
    stub.reply(200, b"[]")
    with pytest.raises(ProtocolError, match="configure of queue 'orders'"):
        sq.queue("orders").create()
    stub.reply(200, b'"ok"')
    with pytest.raises(ProtocolError, match="delete of queue 'orders'"):
        sq.queue("orders").delete()
    stub.reply(200, b'{"deleted": true, "existed": false, "queue": "orders"}')
    assert sq.queue("orders").delete() == {"deleted": True, "existed": False, "queue": "orders"}
    # update_config(): the status read is fine, the configure reply is not an object
    stub.reply(200, b'{"queue": {"name": "orders", "config": {"leaseTime": 60}}}')
    stub.reply(200, b"[]")
    with pytest.raises(ProtocolError, match="configure of queue 'orders'"):
        sq.queue("orders").update_config({"retry_limit": 2})
    assert [r["path"] for r in stub.requests[-2:]] == ["/api/v1/status/queues/orders", "/api/v1/configure"]


# --------------------------------------------------------------------------- connection faults


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_connection_refused() -> None:
    url = "http://127.0.0.1:%d" % _free_port()
    with Queen(url, retry_attempts=2, retry_delay_millis=1) as q:
        with pytest.raises(QueenConnectionError) as ei:
            q.queue("orders").push({"data": 1})
    assert not isinstance(ei.value, QueenTimeoutError)
    assert ei.value.url == url


def test_connection_refused_not_sent_retried_even_for_ack() -> None:
    url = "http://127.0.0.1:%d" % _free_port()
    with Queen(url, retry_attempts=3, retry_delay_millis=1) as q:
        with pytest.raises(QueenConnectionError):
            q.ack(MSG)


def test_read_timeout() -> None:
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)  # accepts (kernel handshake) and never answers
    try:
        url = "http://127.0.0.1:%d" % lsock.getsockname()[1]
        with Queen(url, timeout_millis=200, retry_attempts=1) as q:
            with pytest.raises(QueenTimeoutError) as ei:
                q.queue("orders").pop()
        assert isinstance(ei.value, TimeoutError) and isinstance(ei.value, QueenConnectionError)
    finally:
        lsock.close()


def test_failover_to_second_url(stub: Stub) -> None:
    dead = "http://127.0.0.1:%d" % _free_port()
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    with Queen([dead, stub.url], retry_attempts=1, retry_delay_millis=1) as q:
        for _ in range(4):  # round-robin starts on each URL in turn
            assert q.queue("orders").pop() == []
    assert len(stub.requests) == 4


def test_closed_client_raises(stub: Stub) -> None:
    q = Queen(stub.url)
    q.close()
    q.close()  # idempotent
    assert q.closed
    with pytest.raises(ClientClosedError):
        q.queue("orders")
    with pytest.raises(ClientClosedError):
        q.ack(MSG)
    assert stub.requests == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_uses_fresh_pool(stub: Stub) -> None:
    stub.default = (200, json.dumps(POP_EMPTY).encode(), {})
    with Queen(stub.url) as q:
        q.queue("orders").pop()
        parent_pool = q._transport._pool
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                ok = q.queue("orders").pop() == [] and q._transport._pool is not parent_pool
                code = 0 if ok else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert q._transport._pool is parent_pool
        assert q.queue("orders").pop() == []
    ports = {r["port"] for r in stub.requests}
    assert len(ports) >= 2  # the child opened its own connection


def test_each_call_gets_the_read_timeout_it_asks_for(broker_url: str, monkeypatch: Any) -> None:
    # the urllib3.Timeout of a read timeout is made once and kept (a few recur: long polls,
    # acks), in a bounded table; urllib3 clones it per request, so sharing it is safe
    from queen_sync.transport import _transport

    seen: List[Tuple[Optional[float], Optional[float]]] = []
    real = _transport.send_once

    def send_once(*args: Any, **kw: Any) -> Any:
        timeout = args[9]
        seen.append((timeout.connect_timeout, timeout.read_timeout))
        return real(*args, **kw)

    monkeypatch.setattr(_transport, "send_once", send_once)
    t = _transport.Transport([broker_url], timeout_millis=4000, connect_timeout_millis=1500)
    try:
        asked = [None, 1200, 700, 1200] + list(range(2000, 2000 + 2 * _transport._MAX_TIMEOUTS))
        for ms in asked:
            assert t.request("GET", "/health", idempotent=True, timeout_millis=ms).status == 200
        assert seen == [(1.5, 4.0 if ms is None else ms / 1000.0) for ms in asked]
        assert 0 < _transport._timeout.cache_info().currsize <= _transport._MAX_TIMEOUTS
    finally:
        t.close()
