"""An in-memory stand-in for a Queen broker's pop / ack / streams routes, with fault
injection, for the streams runtime tests (no HTTP). Semantics follow the captures:
one lease per pop shared by its partitions, a cycle's ack fenced by its lease,
``release_lease``, sink dedup per (queue, partition, transactionId), all-or-nothing cycles.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from queen_sync.errors import QueenConnectionError, QueenHTTPError
from queen_sync.streams.state import to_iso_ms


@dataclass
class _Resp:
    status: int
    data: bytes


class _Part:
    def __init__(self, name: str) -> None:
        self.name = name
        self.id = str(uuid.uuid4())
        self.messages: List[Dict[str, Any]] = []
        self.cursor = 0  # index of the next message for the streams group
        self.lease: Optional[str] = None
        self.lease_until = 0.0
        self.lease_end = 0  # delivered up to (exclusive)


class FakeBroker:
    """Thread-safe. ``faults`` is a list of callables ``f(path, body) -> action`` consulted per
    streams call (first non-None wins, then removed when it returns an action): actions
    ``"lose_after"`` (apply, then raise a lost-reply error), ``"lose_before"`` (raise, not
    applied), ``"503"`` (answer 503, not applied)."""

    def __init__(self, lease_seconds: float = 30.0) -> None:
        self.lock = threading.RLock()
        self.parts: Dict[str, _Part] = {}
        self.by_id: Dict[str, _Part] = {}
        self.lease_seconds = lease_seconds
        self.queries: Dict[str, Dict[str, Any]] = {}
        self.state: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.sink: Dict[Tuple[str, str], List[Any]] = {}
        self.sink_ids: set = set()
        self.faults: List[Callable[[str, Dict[str, Any]], Optional[str]]] = []
        self.calls: List[Tuple[str, Dict[str, Any]]] = []
        self.pops = 0
        self.busy: Dict[str, int] = {}  # partition id -> streams calls in flight
        self.max_busy = 0
        self.seq = 0
        self.pop_delay = 0.0
        self.last_pop_opts: Dict[str, Any] = {}

    # producer side -----------------------------------------------------------------

    def push(self, partition: str, data: Any, created_ms: Optional[int] = None) -> None:
        with self.lock:
            p = self.parts.get(partition)
            if p is None:
                p = self.parts[partition] = _Part(partition)
                self.by_id[p.id] = p
            self.seq += 1
            created = to_iso_ms(created_ms if created_ms is not None else int(time.time() * 1000))[:-1] + "000Z"
            p.messages.append({"id": "%012d" % self.seq, "transactionId": "tx-%d" % self.seq, "partitionId": p.id,
                               "partition": partition, "data": data, "createdAt": created,
                               "consumerGroup": None, "leaseId": None, "traceId": None, "producerSub": None})

    def sink_payloads(self, partition: Optional[str] = None) -> List[Any]:
        with self.lock:
            out: List[Any] = []
            for (q, part), items in sorted(self.sink.items()):
                if partition is None or part == partition:
                    out.extend(items)
            return out

    # pop / ack ---------------------------------------------------------------------

    def pop(self, batch: int, partitions: int, group: str) -> List[Dict[str, Any]]:
        if self.pop_delay:
            time.sleep(self.pop_delay)
        with self.lock:
            self.pops += 1
            now = time.monotonic()
            lease = str(uuid.uuid4())
            out: List[Dict[str, Any]] = []
            claimed = 0
            for p in self.parts.values():
                if claimed >= partitions or len(out) >= batch:
                    break
                if p.lease is not None and p.lease_until > now:
                    continue
                p.lease = None
                avail = p.messages[p.cursor:p.cursor + (batch - len(out))]
                if not avail:
                    continue
                p.lease, p.lease_until, p.lease_end = lease, now + self.lease_seconds, p.cursor + len(avail)
                claimed += 1
                out.extend(dict(m, leaseId=lease, consumerGroup=group) for m in avail)
        if not out:
            time.sleep(0.01)
        return out

    def release(self, messages: List[Dict[str, Any]]) -> None:
        with self.lock:
            for m in messages:
                p = self.by_id[m["partitionId"]]
                if p.lease == m["leaseId"]:
                    p.lease = None

    # streams routes ----------------------------------------------------------------

    def request(self, method: str, path: str, *, body: Optional[bytes] = None, **_kw: Any) -> _Resp:
        doc = json.loads(body or b"{}")
        pid = doc.get("partition_id")
        action = None
        with self.lock:
            self.calls.append((path, doc))
            for f in list(self.faults):
                action = f(path, doc)
                if action is not None:
                    self.faults.remove(f)
                    break
            if pid:
                self.busy[pid] = self.busy.get(pid, 0) + 1
                self.max_busy = max(self.max_busy, self.busy[pid])
        try:
            if action == "503":
                raise QueenHTTPError("503 from a proxy", status=503)
            if action == "lose_before":
                raise QueenConnectionError("connection broke before the broker read the request", sent=True)
            time.sleep(0.001)  # let concurrent calls overlap if the runner allowed it
            with self.lock:
                reply = self._handle(path, doc)
            if action == "lose_after":
                raise QueenConnectionError("connection broke after sending (reply lost)", sent=True)
            return _Resp(200, json.dumps(reply).encode())
        finally:
            if pid:
                with self.lock:
                    self.busy[pid] -= 1

    def _handle(self, path: str, doc: Dict[str, Any]) -> Dict[str, Any]:
        if path == "/streams/v1/queries":
            q = self.queries.get(doc["name"])
            if q is None:
                q = self.queries[doc["name"]] = {"id": str(uuid.uuid4()), "hash": doc["config_hash"]}
                return {"success": True, "query_id": q["id"], "name": doc["name"], "fresh": True, "reset": False}
            if q["hash"] != doc["config_hash"]:
                if not doc.get("reset"):
                    return {"success": False, "query_id": q["id"], "name": doc["name"], "error":
                            "config_hash mismatch: operator chain changed for queryId '%s'. Pass reset:true to wipe "
                            "existing state, or use a new queryId." % doc["name"]}
                q["hash"] = doc["config_hash"]
                for k in [k for k in self.state if k[0] == q["id"]]:
                    del self.state[k]
                return {"success": True, "query_id": q["id"], "name": doc["name"], "fresh": False, "reset": True}
            return {"success": True, "query_id": q["id"], "name": doc["name"], "fresh": False, "reset": False}
        if path == "/streams/v1/state/get":
            rows = self.state.get((doc["query_id"], doc["partition_id"]), {})
            prefix = doc.get("key_prefix") or ""
            ripe = doc.get("ripe_at_or_before")
            out = []
            for k in sorted(rows, key=lambda s: s.encode()):
                v = rows[k]
                if prefix and not k.startswith(prefix):
                    continue
                if ripe is not None and not (isinstance(v, dict) and isinstance(v.get("windowEnd"), int)
                                             and v["windowEnd"] <= ripe):
                    continue
                out.append({"key": k, "value": json.loads(json.dumps(v)), "updated_at": "x"})
            return {"success": True, "rows": out}
        if path == "/streams/v1/cycle":
            return self._cycle(doc)
        raise AssertionError("unexpected path %s" % path)

    def _cycle(self, doc: Dict[str, Any]) -> Dict[str, Any]:
        p = self.by_id.get(doc["partition_id"])
        ack = doc.get("ack")
        fail = {"success": False, "query_id": doc["query_id"], "partition_id": doc["partition_id"],
                "state_ops_applied": 0, "push_results": [], "ack_result": None}
        if ack is not None:
            idx = next((i for i, m in enumerate(p.messages) if m["transactionId"] == ack["transactionId"]), None)
            if idx is None:
                return dict(fail, error="Message not found")
            if ack.get("leaseId") and (p.lease != ack["leaseId"] or p.lease_until <= time.monotonic()):
                return dict(fail, error="Invalid or expired lease")
        st = self.state.setdefault((doc["query_id"], doc["partition_id"]), {})
        for op in doc["state_ops"]:
            if op["type"] == "upsert":
                st[op["key"]] = json.loads(json.dumps(op.get("value", {})))
            else:
                st.pop(op["key"], None)
        results = []
        for i, it in enumerate(doc["push_items"]):
            key = (it["queue"], it.get("partition") or "Default", it.get("transactionId") or str(uuid.uuid4()))
            if key in self.sink_ids:
                results.append({"index": i, "status": "duplicate"})
                continue
            self.sink_ids.add(key)
            self.sink.setdefault(key[:2], []).append(it.get("payload", {}))
            results.append({"index": i, "status": "queued"})
        ack_result = None
        if ack is not None:
            p.cursor = max(p.cursor, idx + 1)
            released = False
            if doc.get("release_lease", True) is not False:
                p.lease = None
                released = True
            ack_result = {"success": True, "count": ack.get("count", 1), "lease_released": released, "dlq": False}
        return {"success": True, "query_id": doc["query_id"], "partition_id": doc["partition_id"],
                "queueName": "src", "state_ops_applied": len(doc["state_ops"]), "push_results": results,
                "ack_result": ack_result}


class FakeClient:
    """What the runner needs of a client session: ``request`` (the streams routes go to the
    fake broker; the ``retry`` acks that release popped messages are recorded in ``acks``)."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.acks: List[Tuple[str, int]] = []

    def request(self, method: str, path: str, **kw: Any) -> _Resp:
        if not path.startswith("/api/v1/ack"):
            return self.broker.request(method, path, **kw)
        doc = json.loads(kw.get("body") or b"{}")
        items = doc.get("acknowledgments", [doc])
        assert all(it["status"] == "retry" for it in items)
        self.acks.append(("retry", len(items)))
        self.broker.release(items)
        results = [{"index": i, "success": True, "transactionId": it["transactionId"]} for i, it in enumerate(items)]
        body = results if "acknowledgments" in doc else results[0]
        return _Resp(200, json.dumps(body).encode())


class FakeSource:
    """A queue builder stand-in: the pop options the runner sets, and ``pop()``."""

    def __init__(self, broker: FakeBroker, name: str = "src", client: Optional[FakeClient] = None) -> None:
        self.broker = broker
        self.name = name
        self._session = client or FakeClient(broker)
        self.opts: Dict[str, Any] = {}

    def _set(self, **kw: Any) -> "FakeSource":
        new = FakeSource(self.broker, self.name, self._session)
        new.opts = dict(self.opts, **kw)
        return new

    def batch(self, n: int) -> "FakeSource":
        return self._set(batch=n)

    def wait(self, w: bool = True) -> "FakeSource":
        return self._set(wait=w)

    def timeout_millis(self, ms: int) -> "FakeSource":
        return self._set(timeout=ms)

    def group(self, g: str) -> "FakeSource":
        return self._set(group=g)

    def partitions(self, n: int) -> "FakeSource":
        return self._set(partitions=n)

    def subscription_mode(self, m: str) -> "FakeSource":
        return self._set(subscription_mode=m)

    def subscription_from(self, f: str) -> "FakeSource":
        return self._set(subscription_from=f)

    def pop(self) -> List[Dict[str, Any]]:
        self.broker.last_pop_opts = dict(self.opts)
        return self.broker.pop(self.opts.get("batch", 1), self.opts.get("partitions", 1), self.opts["group"])
