"""The streams wire functions (``queen_sync.wire.streams``) check replies through the shared
``wire._base`` checks: a 0.15 broker's 200 ``success:false`` (or no ``success``) is a refusal,
and every error names the query. A canned requester stands in for the broker (no HTTP)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import pytest

from queen_sync.errors import (
    InvalidInputError,
    ProtocolError,
    RouteNotFoundError,
    StreamsConfigHashError,
    StreamsCycleError,
    StreamsError,
)
from queen_sync.wire import streams as wire

PID = "5e3b0f1c-0000-4000-8000-000000000001"
QID = "5e3b0f1c-0000-4000-8000-000000000002"


@dataclass
class _Resp:
    status: int
    data: bytes


class Canned:
    """Answers every call with one canned reply (a JSON-able object, raw bytes, or an error)."""

    def __init__(self, reply: Any, status: int = 200) -> None:
        self.reply, self.status = reply, status
        self.calls: List[Tuple[str, str, Optional[bytes], dict]] = []

    def request(self, method: str, path: str, *, body: Optional[bytes] = None, **kw: Any) -> _Resp:
        self.calls.append((method, path, body, kw))
        if isinstance(self.reply, Exception):
            raise self.reply
        data = self.reply if isinstance(self.reply, bytes) else json.dumps(self.reply).encode()
        return _Resp(self.status, data)


def _register(r: Any) -> Any:
    return wire.register_query(r, name="q1", source_queue="src", config_hash="h" * 64, sink_queue="out")


def _cycle(r: Any, **kw: Any) -> Any:
    return wire.cycle(r, query_id=QID, partition_id=PID, consumer_group="streams.q1", query="q1", **kw)


def _state(r: Any) -> Any:
    return wire.get_state(r, query_id=QID, partition_id=PID, query="q1")


def test_register_refusals_keep_their_errors_and_messages() -> None:
    mismatch = ("config_hash mismatch: operator chain changed for queryId 'q1'. Pass reset:true to wipe "
                "existing state, or use a new queryId.")
    with pytest.raises(StreamsConfigHashError) as ei:
        _register(Canned({"success": False, "query_id": QID, "name": "q1", "error": mismatch}))
    e = ei.value
    assert str(e).startswith("stream query 'q1': config_hash mismatch, the operator chain changed since it was "
                             "registered (broker: config_hash mismatch: ")
    assert e.query == "q1" and e.config_hash == "h" * 64 and e.status == 200 and e.error == mismatch
    with pytest.raises(StreamsError) as ei2:
        _register(Canned({"success": False, "error": "ERROR:  boom\n"}))
    assert type(ei2.value) is StreamsError and ei2.value.query == "q1"
    assert str(ei2.value) == "stream query 'q1': register refused by the broker: ERROR:  boom\n"
    # every streams reply carries success: one without it is no success either
    with pytest.raises(StreamsError, match=r"^stream query 'q1': register refused by the broker: register refused$"):
        _register(Canned({"query_id": QID}))


def test_cycle_and_state_refusals_keep_their_errors_and_messages() -> None:
    with pytest.raises(StreamsCycleError) as ei:
        _cycle(Canned({"success": False, "error": "Invalid or expired lease", "query_id": QID}))
    assert str(ei.value) == ("stream query 'q1': cycle on partition %s rolled back by the broker: "
                             "Invalid or expired lease" % PID)
    assert ei.value.lease_refused and ei.value.query == "q1" and ei.value.status == 200
    with pytest.raises(StreamsCycleError) as ei2:
        _cycle(Canned({"success": False, "error": 5}))
    assert ei2.value.error is None and str(ei2.value).endswith("rolled back by the broker: 5")
    with pytest.raises(StreamsError) as ei3:
        _state(Canned({"success": False, "error": "ERROR:  invalid input syntax for type uuid"}))
    assert type(ei3.value) is StreamsError and ei3.value.query == "q1"
    assert str(ei3.value) == ("stream query 'q1': state read on partition %s refused by the broker: "
                              "ERROR:  invalid input syntax for type uuid" % PID)
    assert _state(Canned({"success": True, "rows": [{"key": "a", "value": 1}]})) == {"a": 1}


def test_a_missing_streams_route_names_the_query_and_the_call() -> None:
    """A broker without the streams routes (before 0.15) answers the HTML 404: the error
    names the query, the call and the route (was: the transport's bare 404 error)."""
    lost = RouteNotFoundError("HTTP 404", status=404, error=None, body=None)
    with pytest.raises(RouteNotFoundError, match=r"^stream query 'q1': register: POST /streams/v1/queries: "
                                                 r"the Queen broker has no such route \(HTTP 404\)"):
        _register(Canned(lost))
    with pytest.raises(RouteNotFoundError, match=r"^stream query 'q1': cycle on partition %s: POST /streams/v1/cycle:" % PID):
        _cycle(Canned(lost))


def test_malformed_replies_name_the_query() -> None:
    reply: Any
    for reply in ([], b"", 5):
        with pytest.raises(ProtocolError, match=r"^stream query 'q1': register: the reply is not a JSON object"):
            _register(Canned(reply))
    with pytest.raises(ProtocolError, match=r"^stream query 'q1': register: the reply has no query_id"):
        _register(Canned({"success": True}))
    ack = {"transactionId": "t", "leaseId": "l", "status": "completed", "count": 1}
    with pytest.raises(ProtocolError, match=r"^stream query 'q1': cycle on partition .*: the reply has no successful ack_result"):
        _cycle(Canned({"success": True, "ack_result": None}), ack=ack)
    with pytest.raises(ProtocolError, match=r"^stream query 'q1': state read on partition .*: the reply has no rows list"):
        _state(Canned({"success": True}))


def test_cycle_sends_through_the_shared_check_with_its_retry_rules_and_nan_policy() -> None:
    r = Canned({"success": True, "ack_result": None})
    _cycle(r, push_items=[{"queue": "out", "partition": "p", "payload": {"v": float("nan")}}], nan_as_null=True)
    method, path, body, kw = r.calls[0]
    assert (method, path) == ("POST", "/streams/v1/cycle")
    assert json.loads(body or b"")["push_items"][0]["payload"] == {"v": None}
    assert kw["idempotent"] is False and kw["retry"] == "unsent" and kw["affinity_key"] == PID
    with pytest.raises(InvalidInputError, match="NaN"):
        _cycle(r, push_items=[{"queue": "out", "payload": float("inf")}])
    assert len(r.calls) == 1  # refused before sending
    r2 = Canned({"success": True, "query_id": QID, "fresh": True})
    assert _register(r2)["query_id"] == QID and r2.calls[0][3]["idempotent"] is True
