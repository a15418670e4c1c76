"""Fault injection, lifecycle and introspection API of the embedded broker (raw HTTP, urllib3)."""

from __future__ import annotations

import threading
import time

import pytest
import urllib3

from _broker_http import RawHTTP


def _push(http: RawHTTP, queue: str, payload: object, txid: str = None):  # type: ignore[assignment]
    item = {"queue": queue, "payload": payload}
    if txid:
        item["transactionId"] = txid
    return http.request("POST", "/api/v1/push", {"items": [item]})


def test_drop_before_closes_without_processing(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    f = embedded_broker.faults.add(method="POST", path_prefix="/api/v1/push", action="drop_before", times=1)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        _push(http, "fq", 1)
    assert embedded_broker.messages("fq") == []
    assert f.hits == 1 and len(embedded_broker.faults) == 0
    assert _push(http, "fq", 2)[0] == 200
    assert [m["data"] for m in embedded_broker.messages("fq")] == [2]
    assert embedded_broker.request_count("POST", "/api/v1/push") == 2


def test_drop_after_commits_but_loses_the_response(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    embedded_broker.faults.add("POST", "/api/v1/push", "drop_after")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        _push(http, "fq", {"v": 1}, txid="tx-1")
    stored = embedded_broker.messages("fq")
    assert [(m["transactionId"], m["data"]) for m in stored] == [("tx-1", {"v": 1})]
    # a client retrying with the same transactionId gets "duplicate": exactly once
    st, res = _push(http, "fq", {"v": 1}, txid="tx-1")
    assert st == 200 and res[0]["status"] == "duplicate" and res[0]["message_id"] == stored[0]["id"]
    assert len(embedded_broker.messages("fq")) == 1


@pytest.mark.parametrize("status", [503, 429])
def test_status_fault_answers_without_processing(embedded_broker, status: int) -> None:
    http = RawHTTP(embedded_broker.url)
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=status, retry_after=2, times=2)
    for _ in range(2):
        r = http.response("POST", "/api/v1/push", body={"items": [{"queue": "fq", "payload": 1}]})
        assert r.status == status and r.headers["Retry-After"] == "2"
        assert r.headers["Content-Type"] == "application/json" and b"error" in r.data
    assert embedded_broker.messages("fq") == []
    assert _push(http, "fq", 1)[0] == 200  # the fault is used up
    assert len(embedded_broker.messages("fq")) == 1


def test_delay_fault_and_matching_rules(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    embedded_broker.faults.add("GET", "/health", "delay", delay_ms=300, times=None)
    t0 = time.monotonic()
    assert http.request("GET", "/health")[0] == 200
    assert time.monotonic() - t0 >= 0.3
    t0 = time.monotonic()
    assert http.request("GET", "/health")[0] == 200  # times=None: still active
    assert time.monotonic() - t0 >= 0.3
    assert _push(http, "fq", 1)[0] == 200  # other method/path: untouched
    embedded_broker.faults.clear()
    assert len(embedded_broker.faults) == 0
    with pytest.raises(ValueError):
        embedded_broker.faults.add("GET", "/", "explode")


def test_fault_on_any_method_and_removal(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    f = embedded_broker.faults.add(path_prefix="/api/v1/pop", action="status", status=500, times=None)
    assert http.request("GET", "/api/v1/pop/queue/x?wait=false")[0] == 500
    embedded_broker.faults.remove(f)
    assert http.request("GET", "/api/v1/pop/queue/x?wait=false")[0] == 200


def test_stop_refuses_connections_and_closes_open_ones(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    _push(http, "lq", "kept")
    errors: list = []

    def long_poll() -> None:
        try:
            RawHTTP(embedded_broker.url).pop("other-q", wait=True, timeout=20000)
        except Exception as exc:  # the broker going away ends the poll one way or another
            errors.append(exc)
        else:
            errors.append(None)

    t = threading.Thread(target=long_poll)
    t.start()
    deadline = time.monotonic() + 5
    while embedded_broker.request_count("GET", "/api/v1/pop/queue/other-q") == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    url = embedded_broker.url
    embedded_broker.stop()
    t.join(5)
    assert not t.is_alive()  # the long poll did not hang on
    with pytest.raises((urllib3.exceptions.NewConnectionError, urllib3.exceptions.MaxRetryError)):
        RawHTTP(url).request("GET", "/health", timeout=2)
    embedded_broker.start()
    assert embedded_broker.url == url
    got = RawHTTP(url).pop("lq", wait=True, timeout=2000)
    assert [m["data"] for m in got["messages"]] == ["kept"]


def test_reset_and_introspection(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    http.request("POST", "/api/v1/push", {"items": [{"queue": "iq", "partition": "b", "payload": 1},
                                                    {"queue": "iq", "partition": "a", "payload": 2}]})
    msgs = embedded_broker.messages("iq")
    assert [(m["partition"], m["data"]) for m in msgs] == [("b", 1), ("a", 2)]  # push order
    assert set(msgs[0]) == {"id", "transactionId", "partition", "partitionId", "data", "createdAt", "traceId"}
    assert embedded_broker.request_count() >= 1 and embedded_broker.request_count("DELETE") == 0
    assert embedded_broker.messages("missing") == [] and embedded_broker.dlq() == []
    embedded_broker.reset()
    assert embedded_broker.messages("iq") == []
    assert http.request("GET", "/api/v1/resources/queues/iq")[1] == {"error": "Queue not found"}


def test_history_records_each_applied_fault_with_its_body(embedded_broker) -> None:
    http = RawHTTP(embedded_broker.url)
    assert list(embedded_broker.faults.history) == []
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=503, times=1)
    embedded_broker.faults.add("POST", "/api/v1/push", "drop_after", times=1)
    t0 = time.monotonic()
    assert http.response("POST", "/api/v1/push", body={"items": [{"queue": "hq", "payload": 1}]}).status == 503
    with pytest.raises(urllib3.exceptions.ProtocolError):
        _push(http, "hq", 2)
    assert _push(http, "hq", 3)[0] == 200  # no fault left: not recorded
    embedded_broker.faults.clear()  # leaves the history
    hits = list(embedded_broker.faults.history)
    assert [(h.method, h.path, h.action, h.status) for h in hits] == [
        ("POST", "/api/v1/push", "status", 503), ("POST", "/api/v1/push", "drop_after", 503)]
    assert t0 <= hits[0].at <= hits[1].at <= time.monotonic()
    import orjson

    assert [orjson.loads(h.body)["items"][0]["payload"] for h in hits] == [1, 2]
    embedded_broker.faults.history.clear()
    assert len(embedded_broker.faults.history) == 0
