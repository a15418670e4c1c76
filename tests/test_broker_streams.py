"""The Streams routes (``/streams/v1/queries``, ``/cycle``, ``/state/get``): semantics, not just
shapes, as a Queen 0.15 broker has them (wire notes, "Streams captures").

Raw HTTP (urllib3), not the queen_sync client; runs against the embedded broker, or a real one
with ``QUEEN_URL`` (query names are unique per test: a broker never forgets a query).
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Dict, Iterator, List, Optional

import pytest

from _broker_http import RawHTTP, unique

TS_PG = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?\+00:00$")
HTML_404 = "<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>"


@pytest.fixture(scope="module")
def http(broker_url: str) -> Iterator[RawHTTP]:
    yield RawHTTP(broker_url)


class Streams(object):
    """One source queue (partition ``p1``), its sink queue and one registered query."""

    def __init__(self, http: RawHTTP) -> None:
        self.http = http
        self.src = unique("src")
        self.sink = self.src + "-out"
        self.name = self.src + ".q"
        self.group = "streams." + self.name
        self.qid = self.register()["query_id"]
        self.pid = ""

    def call(self, route: str, body: Any) -> Dict[str, Any]:
        status, reply = self.http.request("POST", "/streams/v1/" + route, body)
        assert status == 200, (route, status, reply)
        return reply

    def register(self, config_hash: str = "h", **extra: Any) -> Dict[str, Any]:
        body = {"name": self.name, "source_queue": self.src, "sink_queue": self.sink, "config_hash": config_hash}
        body.update(extra)
        return self.call("queries", body)

    def push_source(self, payloads: List[Any]) -> List[dict]:
        res = self.http.push(self.src, payloads, partition="p1")
        self.pid = res[0]["partition_id"]
        return res

    def pop_source(self, batch: int = 10, wait: bool = True, timeout: int = 2000) -> dict:
        return self.http.pop(self.src, "p1", batch=batch, wait=wait, timeout=timeout, consumerGroup=self.group)

    def cycle(self, pid: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        body = {"query_id": self.qid, "partition_id": pid or self.pid, "consumer_group": self.group}
        body.update(fields)
        return self.call("cycle", body)

    def state(self, pid: Optional[str] = None, **filters: Any) -> List[dict]:
        reply = self.call("state/get", dict({"query_id": self.qid, "partition_id": pid or self.pid}, **filters))
        assert reply["success"] is True, reply
        return reply["rows"]

    def sink_payloads(self, partition: str = "p1") -> List[Any]:
        body = self.http.pop(self.sink, partition, batch=100, wait=False, autoAck=True)
        return [m["data"] for m in body["messages"]]

    def cleanup(self) -> None:
        self.http.delete_queue(self.src)
        self.http.delete_queue(self.sink)


@pytest.fixture
def s(http: RawHTTP) -> Iterator[Streams]:
    st = Streams(http)
    yield st
    st.cleanup()


def _ack(msg: dict, **extra: Any) -> Dict[str, Any]:
    return dict({"transactionId": msg["transactionId"], "leaseId": msg["leaseId"], "status": "completed"}, **extra)


def _full_cycle(s: Streams, ack: Dict[str, Any], tag: str, **fields: Any) -> Dict[str, Any]:
    return s.cycle(state_ops=[{"type": "upsert", "key": "k", "value": {"tag": tag}}],
                   push_items=[{"queue": s.sink, "partition": "p1", "payload": {"tag": tag}}], ack=ack, **fields)


# ----------------------------------------------------------------------------- register

def test_register_fresh_idempotent_conflict_and_reset(s: Streams) -> None:
    again = s.register()
    assert (again["success"], again["fresh"], again["reset"], again["query_id"]) == (True, False, False, s.qid)
    s.push_source([1])
    s.push_source([2])  # same partition
    s.cycle(state_ops=[{"type": "upsert", "key": "a", "value": 1}])
    # a matching hash ignores reset:true (state kept)
    assert s.register(reset=True)["reset"] is False and len(s.state()) == 1
    conflict = s.register("h2")
    assert conflict == {"success": False, "query_id": s.qid, "name": s.name, "error":
                        "config_hash mismatch: operator chain changed for queryId '%s'. Pass reset:true to "
                        "wipe existing state, or use a new queryId." % s.name}
    assert s.register("h2", reset=False)["success"] is False and len(s.state()) == 1  # nothing changed
    wiped = s.register("h2", reset="yes")  # cast like a PostgreSQL boolean
    assert (wiped["success"], wiped["reset"], wiped["fresh"], wiped["query_id"]) == (True, True, False, s.qid)
    assert s.state() == []
    assert s.register("h")["success"] is False  # the stored hash is h2 now
    assert s.register("h3", reset=1)["reset"] is True
    bad = s.register("h4", reset="maybe")
    assert bad == {"success": False, "error": 'ERROR:  invalid input syntax for type boolean: "maybe"\n'
                   "CONTEXT:  PL/pgSQL function queen.streams_register_query_v1(jsonb) line 28 at assignment\n"}
    assert s.register("h3", reset=None)["success"] is True


def test_register_validation_and_unknown_routes(http: RawHTTP) -> None:
    name = unique("reg")
    assert http.request("POST", "/streams/v1/queries", {"name": "", "source_queue": "x", "config_hash": "h"}) == \
        (400, {"error": "name is required"})
    assert http.request("POST", "/streams/v1/queries", {"name": name, "config_hash": "h"}) == \
        (400, {"error": "source_queue is required"})
    assert http.request("POST", "/streams/v1/queries", {"name": name, "source_queue": "x", "config_hash": 7}) == \
        (400, {"error": "config_hash is required"})
    assert http.request("POST", "/streams/v1/queries", ["x"]) == (400, {"error": "request body must be a JSON object"})
    assert http.request("POST", "/streams/v1/cycle", raw=b"") == (400, {"error": "Empty request body"})
    assert http.request("POST", "/streams/v1/cycle", {"query_id": 1, "partition_id": "x"}) == \
        (400, {"error": "query_id is required"})
    assert http.request("POST", "/streams/v1/state/get", {"query_id": "x", "partition_id": None}) == \
        (400, {"error": "partition_id is required"})
    for method, path in (("GET", "/streams/v1/queries"), ("GET", "/streams/v1/cycle"),
                         ("POST", "/streams/v1/state"), ("GET", "/streams/v1/state/get")):
        r = http.response(method, path, body={} if method == "POST" else None)
        assert (r.status, r.data.decode(), r.headers.get("Content-Type")) == (404, HTML_404, None)


# ----------------------------------------------------------------------------- cycle

def test_full_cycle_commits_state_push_and_ack_together(s: Streams) -> None:
    s.push_source([{"n": 1}, {"n": 2}, {"n": 3}])
    popped = s.pop_source()
    last = popped["messages"][-1]
    res = s.cycle(state_ops=[{"type": "upsert", "key": "count", "value": {"n": 3}}, {"type": "upsert", "key": "x"}],
                  push_items=[{"queue": s.sink, "partition": "p1", "payload": {"sum": 6}},
                              {"queue": s.sink, "partition": "p1"}],
                  ack=_ack(last, count=3), release_lease=True)
    assert res["success"] is True and res["state_ops_applied"] == 2 and res["queueName"] == s.src
    assert res["ack_result"] == {"success": True, "count": 3, "lease_released": True, "dlq": False}
    assert [r["status"] for r in res["push_results"]] == ["queued", "queued"]
    rows = s.state()
    assert [(r["key"], r["value"]) for r in rows] == [("count", {"n": 3}), ("x", {})]  # no value: {}
    assert all(TS_PG.match(r["updated_at"]) for r in rows) and len({r["updated_at"] for r in rows}) == 1
    assert s.sink_payloads() == [{"sum": 6}, {}]  # visible at once, in item order
    assert s.pop_source(wait=False)["messages"] == []  # the cursor is on the acked message


def test_a_cycle_whose_ack_fails_applies_no_state_op_and_no_push(s: Streams) -> None:
    s.push_source([{"n": 1}, {"n": 2}])
    popped = s.pop_source()
    last = popped["messages"][-1]
    for ack, fields, error in (
            (_ack(last, leaseId=str(uuid.uuid4())), {}, "Invalid or expired lease"),           # random lease
            (_ack(last), {"consumer_group": None}, "Invalid or expired lease"),                 # queue mode
            (_ack(last), {"consumer_group": s.group + "-other"}, "Invalid or expired lease"),   # other group
            (_ack(last, transactionId="no-such-tx"), {}, "Message not found"),
            (_ack(last, status="retry"), {}, "Unknown ack.status: retry"),
            (_ack(last, count="two"), {}, 'invalid input syntax for type integer: "two"')):
        res = _full_cycle(s, ack, "failed", **fields)
        assert (res["success"], res["error"], res["ack_result"]) == (False, error, None), res
    assert s.state() == []
    assert s.http.request("GET", "/api/v1/resources/queues/" + s.sink)[1] == {"error": "Queue not found"}
    # the source lease is still held by the pop
    assert s.http.pop(s.src, "p1", wait=False, consumerGroup=s.group)["error"] == "lease_held"
    res = _full_cycle(s, _ack(last, count=2), "ok")
    assert res["success"] is True and res["ack_result"]["lease_released"] is True
    assert [r["value"] for r in s.state()] == [{"tag": "ok"}] and s.sink_payloads() == [{"tag": "ok"}]


def test_a_failure_inside_state_ops_or_pushes_undoes_the_earlier_ops(s: Streams) -> None:
    s.push_source([1])
    s.cycle(state_ops=[{"type": "upsert", "key": "keep", "value": 1}])
    res = s.cycle(state_ops=[{"type": "delete", "key": "keep"}, {"type": "upsert", "key": "new", "value": 2},
                             {"type": "merge", "key": "k"}])
    assert (res["success"], res["error"], res["state_ops_applied"]) == (False, "Unknown state_op type: merge", 2)
    res = s.cycle(state_ops=[{"type": "delete", "key": "keep"}],
                  push_items=[{"queue": s.sink, "payload": 1}, {"partition": "p1", "payload": 2}])
    assert res["error"] == 'null value in column "name" of relation "queues" violates not-null constraint'
    assert [(r["key"], r["value"]) for r in s.state()] == [("keep", 1)]
    assert s.http.request("GET", "/api/v1/resources/queues/" + s.sink)[1] == {"error": "Queue not found"}
    assert s.cycle(state_ops=None)["error"] == "cannot get array length of a scalar"
    assert s.cycle(push_items={"queue": s.sink})["error"] == "cannot get array length of a non-array"


def test_the_lease_fences_a_resent_cycle_and_no_lease_means_no_fence(s: Streams) -> None:
    s.push_source([{"n": 1}])
    m = s.pop_source()["messages"][0]
    assert _full_cycle(s, _ack(m), "first")["success"] is True
    resent = _full_cycle(s, _ack(m), "resent")  # the lease was released by the first commit
    assert (resent["success"], resent["error"]) == (False, "Invalid or expired lease")
    assert [r["value"] for r in s.state()] == [{"tag": "first"}] and s.sink_payloads() == [{"tag": "first"}]
    unfenced = {"transactionId": m["transactionId"], "status": "completed"}
    assert _full_cycle(s, unfenced, "again")["success"] is True
    assert _full_cycle(s, unfenced, "again")["success"] is True  # applies twice
    assert s.sink_payloads() == [{"tag": "again"}, {"tag": "again"}]


def test_an_expired_lease_is_refused(s: Streams) -> None:
    s.http.configure(s.src, leaseTime=1)
    s.push_source([{"n": 1}])
    m = s.pop_source()["messages"][0]
    again = s.pop_source(timeout=5000)  # answered once the 1-s lease has expired: redelivery
    assert [x["transactionId"] for x in again["messages"]] == [m["transactionId"]]
    res = _full_cycle(s, _ack(m), "late")
    assert (res["success"], res["error"]) == (False, "Invalid or expired lease") and s.state() == []
    assert _full_cycle(s, _ack(again["messages"][0]), "new lease")["success"] is True


def test_release_lease_false_moves_the_cursor_and_keeps_the_lease(s: Streams) -> None:
    s.push_source([{"n": i} for i in range(1, 6)])
    msgs = s.pop_source()["messages"]
    part = s.cycle(ack=_ack(msgs[1], count=2), release_lease=False)
    assert part["ack_result"] == {"success": True, "count": 2, "lease_released": False, "dlq": False}
    assert s.http.pop(s.src, "p1", wait=False, consumerGroup=s.group)["error"] == "lease_held"
    assert s.cycle(ack=_ack(msgs[2]), release_lease="false")["ack_result"]["lease_released"] is False
    # releasing now (null = default true) hands out what follows the cursor at once
    assert s.cycle(ack=_ack(msgs[2]), release_lease=None)["ack_result"]["lease_released"] is True
    assert [m["data"]["n"] for m in s.pop_source(wait=False)["messages"]] == [4, 5]
    bad = s.cycle(release_lease="maybe")
    assert bad == {"success": False, "error": 'ERROR:  invalid input syntax for type boolean: "maybe"\n'
                   "CONTEXT:  PL/pgSQL function queen.streams_cycle_v1(jsonb) line 56 at assignment\n"}


def test_a_cycle_ack_sets_the_cursor_also_backwards(s: Streams) -> None:
    s.push_source([{"n": i} for i in range(1, 5)])
    msgs = s.pop_source()["messages"]
    assert s.cycle(ack=_ack(msgs[3], count=4))["success"] is True
    # an unfenced cycle ack of message 2 (a stale resend, say) moves the group's cursor back to it
    assert s.cycle(ack={"transactionId": msgs[1]["transactionId"]})["success"] is True
    assert [m["data"]["n"] for m in s.pop_source(wait=False)["messages"]] == [3, 4]


def test_failed_ack_dead_letters_only_the_acked_message(s: Streams) -> None:
    s.push_source([{"n": 1}, {"n": 2}])
    msgs = s.pop_source()["messages"]
    res = s.cycle(ack=_ack(msgs[1], status="failed", error="boom", count=2))
    assert res["ack_result"] == {"success": True, "count": 0, "lease_released": False, "dlq": True}
    assert s.pop_source(wait=False)["messages"] == []  # cursor past both, lease cleared
    dlq = s.http.request("GET", "/api/v1/dlq?queue=" + s.src)[1]["messages"]
    assert [(d["data"], d["errorMessage"], d["retryCount"], d["consumerGroup"]) for d in dlq] == \
        [({"n": 2}, "boom", 0, s.group)]


def test_unknown_ids_and_sink_dedup(s: Streams) -> None:
    s.push_source([1])
    other = str(uuid.uuid4())
    # an unknown query id fails only a state upsert (foreign key); an unknown partition id is fine for state
    res = s.call("cycle", {"query_id": other, "partition_id": s.pid, "state_ops": [{"type": "upsert", "key": "k"}]})
    assert res["error"] == 'insert or update on table "state" violates foreign key constraint "state_query_id_fkey"'
    assert s.call("cycle", {"query_id": other, "partition_id": s.pid,
                            "state_ops": [{"type": "delete", "key": "k"}]})["success"] is True
    res = s.cycle(pid=other, state_ops=[{"type": "upsert", "key": "k", "value": 1}])
    assert (res["success"], res["queueName"]) == (True, None) and len(s.state(pid=other)) == 1
    assert s.cycle(pid=other, ack={"transactionId": "x"})["error"] == "Message not found"
    bad = s.call("cycle", {"query_id": "not-a-uuid", "partition_id": s.pid})
    assert (bad["success"], bad["query_id"], bad["partition_id"], bad["error"]) == \
        (False, "", "", 'invalid input syntax for type uuid: "not-a-uuid"')
    # sink pushes dedupe on (sink partition, transactionId) like /api/v1/push
    items = [{"queue": s.sink, "partition": "p1", "payload": {"i": 1}, "transactionId": "out-1"},
             {"queue": s.sink, "partition": "p1", "payload": {"i": 11}, "transactionId": "out-1"}]
    first = s.cycle(push_items=items)["push_results"]
    assert [r["status"] for r in first] == ["queued", "duplicate"]
    assert first[0]["message_id"] == first[1]["message_id"]
    assert [r["status"] for r in s.cycle(push_items=items[:1])["push_results"]] == ["duplicate"]
    assert s.http.push(s.sink, [{"i": 1}], partition="p1", transactionId="out-1")[0]["status"] == "duplicate"
    assert s.sink_payloads() == [{"i": 1}]


# ----------------------------------------------------------------------------- state/get

KEYS = ["a:1", "a:2", "b:1", "a_b", "A:1", "ab", "a-c", "t\u001f2026\u001fk"]


def test_state_rows_byte_order_and_key_filters(s: Streams) -> None:
    s.push_source([1])
    s.cycle(state_ops=[{"type": "upsert", "key": k, "value": i} for i, k in enumerate(KEYS)])
    assert [r["key"] for r in s.state()] == ["A:1", "a-c", "a:1", "a:2", "a_b", "ab", "b:1", "t\u001f2026\u001fk"]
    assert [r["key"] for r in s.state(keys=["a:1", "zzz"])] == ["a:1"]
    assert len(s.state(keys="a:1")) == len(s.state(keys=None)) == len(KEYS)  # not a list: no filter
    assert [r["key"] for r in s.state(key_prefix="a:")] == ["a:1", "a:2"]
    # key_prefix is an unescaped LIKE prefix: _ and % are wildcards, a backslash escapes
    assert [r["key"] for r in s.state(key_prefix="a_")] == ["a-c", "a:1", "a:2", "a_b", "ab"]
    assert [r["key"] for r in s.state(key_prefix="a\\_")] == ["a_b"]
    assert len(s.state(key_prefix="%")) == len(s.state(key_prefix="")) == len(KEYS)
    assert [r["key"] for r in s.state(key_prefix="t\u001f")] == ["t\u001f2026\u001fk"]
    assert [r["key"] for r in s.state(keys=["a:1", "b:1"], key_prefix="a")] == ["a:1"]  # ANDed
    s.cycle(state_ops=[{"type": "delete", "key": "a:1"}, {"type": "delete", "key": "never"}, {"type": "delete"}])
    assert "a:1" not in [r["key"] for r in s.state()]


def test_ripe_at_or_before_filter(s: Streams) -> None:
    s.push_source([1])
    s.cycle(state_ops=[{"type": "upsert", "key": "w:1", "value": {"windowEnd": 1000}},
                       {"type": "upsert", "key": "w:2", "value": {"windowEnd": 2000}},
                       {"type": "upsert", "key": "w:3", "value": {"windowEnd": "1500"}},
                       {"type": "upsert", "key": "w:4", "value": {"acc": 4}},
                       {"type": "upsert", "key": "x", "value": 7}])
    assert [r["key"] for r in s.state(ripe_at_or_before=1500)] == ["w:1"]
    assert [r["key"] for r in s.state(ripe_at_or_before=2000)] == ["w:1", "w:2"]  # inclusive
    assert s.state(ripe_at_or_before=0) == []
    assert len(s.state(ripe_at_or_before="3000")) == len(s.state(ripe_at_or_before=None)) == 5  # ignored
    assert [r["key"] for r in s.state(key_prefix="w:", ripe_at_or_before=1000)] == ["w:1"]
    bad = s.call("state/get", {"query_id": s.qid, "partition_id": s.pid, "ripe_at_or_before": 2000.0})
    assert bad == {"success": False, "error": 'ERROR:  invalid input syntax for type bigint: "2000.0"\n'
                   "CONTEXT:  PL/pgSQL function queen.streams_state_get_v1(jsonb) line 11 at FOR over SELECT rows\n"}
    # a stored fractional windowEnd breaks every ripe query on the partition, whatever the keys
    s.cycle(state_ops=[{"type": "upsert", "key": "w:frac", "value": {"windowEnd": 1500.5}}])
    bad = s.call("state/get", {"query_id": s.qid, "partition_id": s.pid, "keys": ["w:1"], "ripe_at_or_before": 5000})
    assert bad["success"] is False
    assert bad["error"].startswith('ERROR:  invalid input syntax for type bigint: "1500.5"\nCONTEXT:  SQL statement')
    assert len(s.state()) == 6  # plain reads still work


def test_state_is_per_query_and_partition(s: Streams) -> None:
    s.push_source([1])
    p1 = s.pid
    s.http.push(s.src, [2], partition="p2")
    p2 = s.http.push(s.src, [3], partition="p2")[0]["partition_id"]
    s.cycle(state_ops=[{"type": "upsert", "key": "a", "value": 1}])
    s.cycle(pid=p2, state_ops=[{"type": "upsert", "key": "a", "value": 2}])
    assert [r["value"] for r in s.state(pid=p1)] == [1] and [r["value"] for r in s.state(pid=p2)] == [2]
    assert s.call("state/get", {"query_id": str(uuid.uuid4()), "partition_id": p1}) == {"success": True, "rows": []}
    bad = s.call("state/get", {"query_id": s.qid, "partition_id": "nope"})
    assert bad["error"].startswith('ERROR:  invalid input syntax for type uuid: "nope"\n')
    # reset wipes the query's rows on every partition
    s.register("h-new", reset=True)
    assert s.state(pid=p1) == [] and s.state(pid=p2) == []
