"""Admin, status, trace, consumer-group and maintenance routes of the embedded broker.

Shapes follow the captures of a real Queen 0.15 broker (``scenario-admin-*.jsonl``). Broker-wide
statistics that the real broker computes in background jobs (throughput, worker metrics,
PostgreSQL statistics) are answered with the same structure and zero/empty values.
"""

from __future__ import annotations

import bisect
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import unquote

from ._records import QUEUE_MODE, Msg, Partition, Queue, Row
from ._state import BrokerState
from ._util import BadRequest as _BadRequest
from ._util import fmt_ms, now_us, parse_ts_us, uuid4

Reply = Tuple[int, Any]


def health(st: BrokerState) -> dict:
    """Body of ``GET /health``."""
    return {"status": "healthy", "database": "connected", "server": "C++ Queen Server (libqueen)",
            "worker_id": 0, "version": "1.0.0",
            "queen": {"worker_id": 0, "status": "active"},
            "shared_state": {"enabled": False, "maintenance_mode": st.maintenance,
                             "pop_maintenance_mode": st.pop_maintenance,
                             "queue_config_cache": {"hit_rate": 0.0, "hits": 0, "misses": 0,
                                                    "size": len(st.queues)},
                             "running": False,
                             "server_health": {"heartbeats_received": 0, "restarts_detected": 0,
                                               "servers_alive": 0, "servers_dead": 0, "servers_tracked": 0},
                             "server_id": "embedded"}}


def _int(v: Optional[str], default: int) -> int:
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        return default


def _zero_stats() -> dict:
    return {"completed": 0, "deadLetter": 0, "failed": 0, "pending": 0, "processing": 0, "total": 0}


def _live_lease_expiry(st: BrokerState, row: Optional[Row], now: int) -> Optional[int]:
    if row is None or row.lease_id is None:
        return None
    lease = st.leases.get(row.lease_id)
    if lease is None or lease.expires <= now:
        return None
    return lease.expires


def _pending_after(p: Partition, row: Optional[Row]) -> List[Msg]:
    start = row.cursor if row is not None else 0
    return [m for m in p.messages[start:] if not m.deleted]


def _bus_rows(p: Partition) -> Dict[str, Row]:
    return {g: r for g, r in p.rows.items() if g != QUEUE_MODE}


def _queue_status(st: BrokerState, m: Msg, now: int) -> str:
    row = m.partition.rows.get(QUEUE_MODE)
    if row is not None and row.cursor > m.idx:
        return "completed"
    if row is not None and _live_lease_expiry(st, row, now) is not None and m.idx < row.cursor + row.batch_size:
        return "processing"
    return "pending"


def _msg_status(st: BrokerState, m: Msg, now: int, dead: Optional[set] = None) -> Tuple[str, str, int, int]:
    """(status, queueStatus, consumedBy, totalGroups) of a stored message."""
    bus = _bus_rows(m.partition)
    consumed_by = sum(1 for r in bus.values() if r.cursor > m.idx)
    if dead is None:
        dead = {id(d["msg"]) for d in st.dlq}
    if id(m) in dead:
        return "dead_letter", "dead_letter", consumed_by, len(bus)
    qs = _queue_status(st, m, now)
    if not bus:
        return qs, qs, 0, 0
    return ("completed" if consumed_by >= len(bus) else "pending"), qs, consumed_by, len(bus)


def _mode(p_list: List[Partition]) -> dict:
    groups = set()
    has_qm = False
    for p in p_list:
        for g in p.rows:
            if g == QUEUE_MODE:
                has_qm = True
            else:
                groups.add(g)
    typ = "hybrid" if (groups and has_qm) else ("bus" if groups else "queue")
    return {"busGroupsCount": len(groups), "hasQueueMode": has_qm, "type": typ}


class _AdminRoutes(object):
    def __init__(self, st: BrokerState, router: Any) -> None:
        self.st = st
        self.router = router

    # ------------------------------------------------------------------ resources
    def queue_summary(self, q: Queue) -> dict:
        total = sum(p.live_count() for p in q.partitions.values())
        return {"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                "createdAt": fmt_ms(q.created), "partitions": len(q.partitions),
                "messages": {"total": total, "pending": 0, "processing": 0}}

    def list_queues(self) -> Reply:
        with self.st.lock:
            qs = sorted(self.st.queues.values(), key=lambda q: q.created, reverse=True)
            return 200, {"queues": [self.queue_summary(q) for q in qs]}

    def queue_detail(self, name: str) -> Reply:
        with self.st.lock:
            q = self.st.queues.get(name)
            if q is None:
                return 200, {"error": "Queue not found"}
            parts = [{"id": p.id, "name": p.name, "createdAt": fmt_ms(p.created), "newestMessage": None,
                      "oldestMessage": None, "stats": _zero_stats()} for p in q.partitions.values()]
            return 200, {"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                         "createdAt": fmt_ms(q.created), "partitions": parts, "totals": _zero_stats()}

    def overview(self) -> Reply:
        with self.st.lock:
            qs = list(self.st.queues.values())
            total = sum(p.live_count() for q in qs for p in q.partitions.values())
            return 200, {"queues": len(qs), "partitions": sum(len(q.partitions) for q in qs),
                         "namespaces": len({q.namespace for q in qs}),
                         "tasks": len({q.task for q in qs if q.task}),
                         "messages": {"total": total, "pending": 0, "processing": 0, "completed": 0,
                                      "failed": 0, "deadLetter": len(self.st.dlq)},
                         "lag": {"time": {"avg": 0, "max": 0, "median": 0, "min": 0},
                                 "offset": {"avg": 0, "max": 0, "median": 0, "min": 0}},
                         "throughput": {"ingestedPerSecond": 0.0, "processedPerSecond": 0.0},
                         "statsAge": 0, "timestamp": fmt_ms(now_us())}

    def namespaces(self) -> Reply:
        with self.st.lock:
            acc: Dict[str, dict] = {}
            for q in self.st.queues.values():
                e = acc.setdefault(q.namespace, {"namespace": q.namespace, "queues": 0, "partitions": 0,
                                                 "messages": {"total": 0, "pending": 0}})
                e["queues"] += 1
                e["partitions"] += len(q.partitions)
                e["messages"]["total"] += sum(p.live_count() for p in q.partitions.values())
            return 200, {"namespaces": sorted(acc.values(), key=lambda e: e["namespace"])}

    def tasks(self) -> Reply:
        with self.st.lock:
            acc: Dict[str, dict] = {}
            for q in self.st.queues.values():
                if not q.task:
                    continue
                e = acc.setdefault(q.task, {"task": q.task, "queues": 0, "partitions": 0,
                                            "messages": {"total": 0, "pending": 0}})
                e["queues"] += 1
                e["partitions"] += len(q.partitions)
                e["messages"]["total"] += sum(p.live_count() for p in q.partitions.values())
            return 200, {"tasks": sorted(acc.values(), key=lambda e: e["task"])}

    # ------------------------------------------------------------------ status
    def status(self) -> Reply:
        now = now_us()
        with self.st.lock:
            qs = list(self.st.queues.values())
            leased = [(p, r) for q in qs for p in q.partitions.values() for r in p.rows.values()
                      if _live_lease_expiry(self.st, r, now) is not None]
            queues = [{"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                       "partitions": len(q.partitions),
                       "totalConsumed": sum(r.total_consumed for p in q.partitions.values()
                                            for r in p.rows.values())} for q in qs]
            total = sum(p.live_count() for q in qs for p in q.partitions.values())
            dlq = len(self.st.dlq)
        frm = fmt_ms(now - 3600 * 1_000_000)
        return 200, {
            "timeRange": {"from": frm, "to": fmt_ms(now)}, "bucketMinutes": 1, "pointCount": 0,
            "throughput": [],
            "queues": queues,
            "messages": {"total": total, "pending": 0, "processing": 0, "completed": 0, "failed": 0,
                         "deadLetter": dlq, "requests": {"push": 0, "pop": 0, "ack": 0},
                         "batchEfficiency": {"push": 0.0, "pop": 0.0, "ack": 0.0}},
            "leases": {"active": len({r.lease_id for _, r in leased}), "partitionsWithLeases": len(leased),
                       "totalBatchSize": sum(r.batch_size for _, r in leased),
                       "totalAcked": sum(r.acked for _, r in leased)},
            "deadLetterQueue": {"totalMessages": dlq, "affectedPartitions":
                                len({id(d["partition"]) for d in self.st.dlq}), "topErrors": []},
            "errors": {"ackFailed": 0, "dbErrors": 0, "dlqMessages": dlq},
            "workers": [{"workerId": 0, "hostname": "embedded", "dbConnections": 0, "freeSlots": 0,
                         "jobQueueSize": 0, "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0,
                         "messagesProcessed": 0}],
            "statsAge": 0,
        }

    def status_queues(self, params: Dict[str, str]) -> Reply:
        limit, offset = _int(params.get("limit"), 100), _int(params.get("offset"), 0)
        with self.st.lock:
            qs = sorted(self.st.queues.values(), key=lambda q: q.created, reverse=True)
            if params.get("namespace"):
                qs = [q for q in qs if q.namespace == params["namespace"]]
            if params.get("task"):
                qs = [q for q in qs if q.task == params["task"]]
            out = [self.queue_summary(q) for q in qs[offset:offset + limit]]
        return 200, {"queues": out, "pagination": {"limit": limit, "offset": offset}}

    def status_queue(self, name: str) -> Reply:
        with self.st.lock:
            q = self.st.queues.get(name)
            if q is None:
                return 200, {"error": "Queue not found"}
            parts = []
            for p in q.partitions.values():
                parts.append({"id": p.id, "name": p.name, "createdAt": fmt_ms(p.created),
                              "lastActivity": fmt_ms(p.last_activity),
                              "cursor": {"totalConsumed": sum(r.total_consumed for r in p.rows.values()),
                                         "batchesConsumed": 0},
                              "messages": _zero_stats(), "stats": _zero_stats(),
                              "newestMessage": None, "oldestMessage": None})
            o = q.options
            totals = _zero_stats()
            totals["messages"] = _zero_stats()
            return 200, {"queue": {"id": q.id, "name": q.name, "namespace": q.namespace, "task": q.task,
                                   "priority": o.get("priority", 0), "createdAt": fmt_ms(q.created),
                                   "config": {"leaseTime": o["leaseTime"], "retryLimit": o["retryLimit"],
                                              "retryDelay": o["retryDelay"], "ttl": o["ttl"],
                                              "deadLetterQueue": o["deadLetterQueue"],
                                              "maxQueueSize": o["maxSize"]}},
                         "partitions": parts, "totals": totals}

    def status_queue_messages(self, name: str, params: Dict[str, str]) -> Reply:
        limit, offset = _int(params.get("limit"), 50), _int(params.get("offset"), 0)
        now = now_us()
        with self.st.lock:
            q = self.st.queues.get(name)
            if q is None:
                return 200, []
            msgs = self._sorted_messages([q], params.get("partition"))
            dead = {id(d["msg"]) for d in self.st.dlq}
            out = [{"id": m.id, "transactionId": m.txid, "partitionId": m.partition.id,
                    "partition": m.partition.name, "queue": q.name, "queuePath": q.name + "/" + m.partition.name,
                    "createdAt": fmt_ms(m.created),
                    "status": "dead_letter" if id(m) in dead else _queue_status(self.st, m, now)}
                   for m in msgs[offset:offset + limit]]
        return 200, out

    def analytics(self, params: Dict[str, str]) -> Reply:
        now = now_us()
        to = parse_ts_us(params.get("to")) or now
        frm = parse_ts_us(params.get("from")) or (to - 24 * 3600 * 1_000_000)
        hour = 3600 * 1_000_000
        with self.st.lock:
            created = [m.created for q in self.st.queues.values() for p in q.partitions.values()
                       for m in p.messages]
        points: List[Dict[str, Any]] = []
        t = (frm // hour + 1) * hour
        while t <= to and len(points) < 1000:
            points.append({"timestamp": fmt_ms(t), "messages": sum(1 for c in created if t <= c < t + hour)})
            t += hour
        return 200, {"from": fmt_ms(frm), "to": fmt_ms(to), "interval": params.get("interval") or "hour",
                     "dataPoints": points}

    # ------------------------------------------------------------------ messages
    def _sorted_messages(self, queues: List[Queue], partition: Optional[str] = None) -> List[Msg]:
        msgs = [m for q in queues for p in q.partitions.values() if partition in (None, "", p.name)
                for m in p.messages if not m.deleted]
        msgs.sort(key=lambda m: (m.created, m.id), reverse=True)
        return msgs

    def messages(self, params: Dict[str, str]) -> Reply:
        limit, offset = _int(params.get("limit"), 200), _int(params.get("offset"), 0)
        now = now_us()
        with self.st.lock:
            qs = list(self.st.queues.values())
            if params.get("queue"):
                qs = [q for q in qs if q.name == params["queue"]]
            ns = params.get("ns") or params.get("namespace")
            if ns:
                qs = [q for q in qs if q.namespace == ns]
            if params.get("task"):
                qs = [q for q in qs if q.task == params["task"]]
            msgs = self._sorted_messages(qs, params.get("partition"))
            dead = {id(d["msg"]) for d in self.st.dlq}
            out = []
            for m in msgs:
                status, qstatus, consumed_by, total_groups = _msg_status(self.st, m, now, dead)
                if params.get("status") and params["status"] != status:
                    continue
                p = m.partition
                out.append({"id": m.id, "transactionId": m.txid, "partitionId": p.id, "partition": p.name,
                            "queue": p.queue.name, "namespace": p.queue.namespace, "task": p.queue.task,
                            "queuePath": p.queue.name + "/" + p.name, "queuePriority": p.queue.options["priority"],
                            "createdAt": fmt_ms(m.created), "traceId": m.trace_id, "producerSub": None,
                            "leaseExpiresAt": fmt_ms(_live_lease_expiry(self.st, p.rows.get(QUEUE_MODE), now)),
                            "status": status, "queueStatus": qstatus,
                            "busStatus": {"consumedBy": consumed_by, "totalGroups": total_groups}})
            mode = _mode([p for q in qs for p in q.partitions.values()])
        return 200, {"messages": out[offset:offset + limit], "mode": mode}

    def _find(self, pid: str, txid: str) -> Optional[Msg]:
        p = self.st.partitions_by_id.get(pid)
        m = p.by_tx.get(txid) if p is not None else None
        return None if (m is None or m.deleted) else m

    def message_detail(self, pid: str, txid: str) -> Reply:
        now = now_us()
        with self.st.lock:
            m = self._find(pid, txid)
            if m is None:
                return 200, {"error": "Message not found"}
            p, q = m.partition, m.partition.queue
            status, _, consumed_by, _ = _msg_status(self.st, m, now)
            groups = [{"name": g, "consumed": r.cursor > m.idx,
                       "leaseExpiresAt": fmt_ms(_live_lease_expiry(self.st, r, now))}
                      for g, r in _bus_rows(p).items()]
            mode = _mode([p])
            mode["consumedByGroups"] = consumed_by
            dl = [d for d in self.st.dlq if d["msg"] is m]
            o = q.options
            return 200, {"id": m.id, "transactionId": m.txid, "partitionId": p.id, "partition": p.name,
                         "queue": q.name, "namespace": q.namespace, "task": q.task,
                         "queuePath": q.name + "/" + p.name, "payload": m.data, "traceId": m.trace_id,
                         "producerSub": None, "createdAt": fmt_ms(m.created), "isEncrypted": False,
                         "status": status, "retryCount": None,
                         "errorMessage": dl[-1]["error"] if dl else None,
                         "leaseExpiresAt": fmt_ms(_live_lease_expiry(self.st, p.rows.get(QUEUE_MODE), now)),
                         "consumerGroups": groups, "mode": mode,
                         "queueConfig": {"leaseTime": o["leaseTime"], "retryLimit": o["retryLimit"],
                                         "retryDelay": o["retryDelay"], "ttl": o["ttl"],
                                         "priority": o["priority"]}}

    def delete_message(self, pid: str, txid: str) -> Reply:
        with self.st.lock:
            m = self._find(pid, txid)
            if m is None:
                return 200, {"success": False, "error": "Message not found"}
            m.deleted = True
            m.partition.by_tx.pop(m.txid, None)
            self.st._notify(m.partition.queue.name)
            return 200, {"success": True, "deleted": True, "messageId": m.id, "transactionId": txid,
                         "partitionId": pid}

    # ------------------------------------------------------------------ traces
    def post_trace(self, body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("transactionId"), str) \
                or not isinstance(body.get("partitionId"), str):
            raise _BadRequest("transactionId and partitionId are required")
        if body.get("data") is None:
            raise _BadRequest("data is required")
        names = body.get("traceNames")
        if isinstance(names, str):
            names = [names]
        elif not isinstance(names, list):
            names = None
        with self.st.lock:
            m = self._find(body["partitionId"], body["transactionId"])
            if m is None:
                return 200, {"success": False, "error": "Message not found"}
            tid = uuid4()
            self.st.traces.append({"id": tid, "msg": m, "partition": m.partition,
                                   "group": body.get("consumerGroup") or QUEUE_MODE,
                                   "event": body.get("eventType") or "info", "data": body["data"],
                                   "names": [n for n in names if isinstance(n, str)] if names else None,
                                   "created": now_us()})
        return 200, {"success": True, "traceId": tid}

    @staticmethod
    def _trace_json(t: dict, full: bool = False) -> dict:
        out = {"id": t["id"], "event_type": t["event"], "data": t["data"], "consumer_group": t["group"],
               "trace_names": t["names"], "worker_id": "0", "created_at": fmt_ms(t["created"])}
        if full:
            m: Msg = t["msg"]
            out.update({"transaction_id": m.txid, "partition_id": m.partition.id,
                        "partition_name": m.partition.name, "queue_name": m.partition.queue.name,
                        "message_id": m.id})
        return out

    def traces_for(self, pid: str, txid: str) -> Reply:
        with self.st.lock:
            out = [self._trace_json(t) for t in self.st.traces
                   if t["msg"].txid == txid and t["partition"].id == pid]
        return 200, {"traces": out}

    def traces_by_name(self, name: str, params: Dict[str, str]) -> Reply:
        limit, offset = _int(params.get("limit"), 100), _int(params.get("offset"), 0)
        with self.st.lock:
            rows = [t for t in reversed(self.st.traces) if t["names"] and name in t["names"]]
            out = [self._trace_json(t, True) for t in rows[offset:offset + limit]]
        return 200, {"traces": out, "total": len(rows), "pagination": {"limit": limit, "offset": offset}}

    def trace_names(self, params: Dict[str, str]) -> Reply:
        limit, offset = _int(params.get("limit"), 50), _int(params.get("offset"), 0)
        with self.st.lock:
            acc: Dict[str, dict] = {}
            for t in self.st.traces:
                for n in t["names"] or ():
                    e = acc.setdefault(n, {"trace_name": n, "trace_count": 0, "msgs": set(), "last": 0})
                    e["trace_count"] += 1
                    e["msgs"].add(id(t["msg"]))
                    e["last"] = max(e["last"], t["created"])
        rows = sorted(acc.values(), key=lambda e: e["last"], reverse=True)
        out = [{"trace_name": e["trace_name"], "trace_count": e["trace_count"], "message_count": len(e["msgs"]),
                "last_seen": fmt_ms(e["last"])} for e in rows[offset:offset + limit]]
        return 200, {"trace_names": out, "total": len(rows), "pagination": {"limit": limit, "offset": offset}}

    # ------------------------------------------------------------------ consumer groups
    def groups(self) -> Reply:
        now = now_us()
        with self.st.lock:
            out = []
            for q in sorted(self.st.queues.values(), key=lambda q: q.name):
                names = sorted({g for p in q.partitions.values() for g in p.rows})
                for g in names:
                    rows = [(p, p.rows[g]) for p in q.partitions.values() if g in p.rows]
                    lags = [_pending_after(p, r) for p, r in rows]
                    with_lag = [l for l in lags if l]
                    max_lag = max([(now - l[0].created) // 1_000_000 for l in with_lag], default=0)
                    meta = self.st.meta.get((g, q.name)) or {}
                    out.append({"name": g, "queueName": q.name, "topics": [q.name], "members": 1,
                                "totalLag": None, "partitionsWithLag": len(with_lag), "maxTimeLag": int(max_lag),
                                "state": "Lagging" if max_lag > 3600 else "Stable",
                                "subscriptionMode": meta.get("mode"),
                                "subscriptionTimestamp": fmt_ms(meta.get("ts")),
                                "subscriptionCreatedAt": fmt_ms(meta.get("created"))})
        return 200, out

    def group_detail(self, group: str) -> Reply:
        now = now_us()
        with self.st.lock:
            out: Dict[str, Any] = {}
            for q in self.st.queues.values():
                parts = []
                for p in q.partitions.values():
                    r = p.rows.get(group)
                    if r is None:
                        continue
                    pend = _pending_after(p, r)
                    exp = _live_lease_expiry(self.st, r, now)
                    parts.append({"partition": p.name, "totalConsumed": r.total_consumed,
                                  "lastConsumedAt": fmt_ms(r.last_consumed), "offsetLag": len(pend),
                                  "timeLagSeconds": int((now - pend[0].created) // 1_000_000) if pend else 0,
                                  "leaseActive": exp is not None, "workerId": r.lease_id if exp else None})
                if parts:
                    out[q.name] = {"partitions": parts}
        return 200, out

    def lagging(self, params: Dict[str, str]) -> Reply:
        min_lag = _int(params.get("minLagSeconds"), 3600)
        now = now_us()
        with self.st.lock:
            out: List[Dict[str, Any]] = []
            for q in self.st.queues.values():
                for p in q.partitions.values():
                    for g, r in p.rows.items():
                        pend = _pending_after(p, r)
                        if not pend:
                            continue
                        lag = (now - pend[0].created) / 1e6
                        if lag < min_lag:
                            continue
                        exp = _live_lease_expiry(self.st, r, now)
                        out.append({"consumer_group": g, "queue_name": q.name, "partition_name": p.name,
                                    "partition_id": p.id, "worker_id": r.lease_id if exp else None,
                                    "offset_lag": len(pend), "time_lag_seconds": int(lag),
                                    "lag_hours": round(lag / 3600.0, 2),
                                    "oldest_unconsumed_at": fmt_ms(pend[0].created),
                                    "last_consumed_at": fmt_ms(r.last_consumed)})
        out.sort(key=lambda e: e["time_lag_seconds"], reverse=True)
        return 200, out

    def delete_group(self, group: str, params: Dict[str, str], queue: Optional[str] = None) -> Reply:
        delete_meta = params.get("deleteMetadata", "true") in ("true", "1")
        with self.st.lock:
            n = 0
            qs = [self.st.queues[queue]] if queue is not None and queue in self.st.queues else \
                ([] if queue is not None else list(self.st.queues.values()))
            for q in qs:
                for p in q.partitions.values():
                    if p.rows.pop(group, None) is not None:
                        n += 1
                self.st._notify(q.name)
            if delete_meta:
                for key in [k for k in self.st.meta if k[0] == group and (queue is None or k[1] == queue)]:
                    del self.st.meta[key]
        body = {"success": True, "consumerGroup": group, "deletedPartitions": n, "metadataDeleted": delete_meta}
        if queue is not None:
            body["queueName"] = queue
        return 200, body

    def update_subscription(self, group: str, body: Any) -> Reply:
        ts_text = body.get("subscriptionTimestamp") if isinstance(body, dict) else None
        if not ts_text:
            raise _BadRequest("Missing subscriptionTimestamp in request body")
        ts = parse_ts_us(ts_text)
        with self.st.lock:
            n = 0
            for key, meta in self.st.meta.items():
                if key[0] == group and ts is not None:
                    meta["ts"] = ts
                    meta["mode"] = "timestamp"
                    n += 1
        return 200, {"success": True, "consumerGroup": group, "newTimestamp": ts_text, "rowsUpdated": n}

    def seek(self, group: str, queue: str, body: Any, partition: Optional[str] = None) -> Reply:
        to_end = partition is not None or (isinstance(body, dict) and body.get("toEnd") is True)
        ts_text = body.get("timestamp") if isinstance(body, dict) else None
        if not to_end and not ts_text:
            raise _BadRequest("Must specify either 'toEnd': true or 'timestamp'")
        ts = None if to_end else parse_ts_us(ts_text)
        now = now_us()
        with self.st.lock:
            q = self.st.queues.get(queue)
            n = 0
            if q is not None:
                for p in q.partitions.values():
                    if partition is not None and p.name != partition:
                        continue
                    r = p.rows.get(group)
                    if r is None:
                        r = Row(group, 0, now)
                        p.rows[group] = r
                    if to_end:
                        r.cursor = len(p.messages)
                    else:
                        r.cursor = bisect.bisect_right(p.created_list, ts if ts is not None else 0)
                    r.lease_id = None
                    r.batch_size = 0
                    r.acked = 0
                    r.retry = 0
                    n += 1
                self.st._notify(queue)
        body_out = {"success": True, "consumerGroup": group, "queueName": queue, "seekToEnd": to_end,
                    "targetTimestamp": None if to_end else ts_text, "partitionsUpdated": n}
        if partition is not None:
            body_out["partitionName"] = partition
        return 200, body_out

    # ------------------------------------------------------------------ maintenance / system
    def maintenance_get(self) -> Reply:
        with self.st.lock:
            buffered = len(self.st.push_buffer)
        return 200, {"maintenanceMode": self.st.maintenance, "popMaintenanceMode": self.st.pop_maintenance,
                     "bufferedMessages": buffered, "bufferHealthy": True,
                     "bufferStats": {"dbHealthy": True, "failedCount": 0, "pendingCount": buffered,
                                     "failedFiles": {"count": 0, "failoverCount": 0, "qos0Count": 0,
                                                     "totalBytes": 0, "totalMB": 0.0}}}

    def maintenance_set(self, body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
            raise _BadRequest("enabled (boolean) is required")
        enabled = body["enabled"]
        self.st.maintenance = enabled
        flushed = 0
        if not enabled:
            with self.st.lock:
                pending, self.st.push_buffer = self.st.push_buffer, []
            if pending:
                self.st.push(pending)
                flushed = len(pending)
        msg = ("Maintenance mode ENABLED. All PUSH operations will be buffered." if enabled else
               "Maintenance mode DISABLED. %d buffered messages were written." % flushed)
        return 200, {"maintenanceMode": enabled, "bufferedMessages": len(self.st.push_buffer),
                     "bufferHealthy": True, "message": msg}

    def pop_maintenance_get(self) -> Reply:
        on = self.st.pop_maintenance
        return 200, {"popMaintenanceMode": on,
                     "message": ("Pop maintenance mode is ON. All POP operations return empty arrays." if on else
                                 "Pop maintenance mode is OFF. Normal operation.")}

    def pop_maintenance_set(self, body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
            raise _BadRequest("enabled (boolean) is required")
        on = body["enabled"]
        with self.st.lock:
            self.st.pop_maintenance = on
            for c in self.st.conds.values():
                c.notify_all()
        return 200, {"popMaintenanceMode": on,
                     "message": ("Pop maintenance mode ENABLED. All POP operations will return empty arrays."
                                 if on else "Pop maintenance mode DISABLED. Normal operation resumed.")}

    def stats_refresh(self) -> Reply:
        with self.st.lock:
            nq = len(self.st.queues)
            npart = sum(len(q.partitions) for q in self.st.queues.values())
            nns = len({q.namespace for q in self.st.queues.values()})
        return 200, {"queue": {"queuesUpdated": nq}, "namespace": {"namespacesUpdated": nns},
                     "task": {"tasksUpdated": 0}, "system": {"systemUpdated": 1},
                     "partition": {"dirtyPartitionsScanned": npart, "newPartitions": 0,
                                   "partitionsSkippedByWatermark": 0, "partitionsUpdated": npart},
                     "cleanup": {"orphanedDeleted": 0}}

    def metrics(self) -> Reply:
        with self.st.lock:
            total = sum(p.live_count() for q in self.st.queues.values() for p in q.partitions.values())
        return 200, {"uptime": int(time.time() - self.st.started),
                     "requests": {"total": 0, "rate": 0}, "messages": {"total": total, "rate": 0},
                     "database": {"poolSize": 0, "idleConnections": 0, "waitingRequests": 0},
                     "memory": {"rss": 0, "heapTotal": 0, "heapUsed": 0, "external": 0, "arrayBuffers": 0},
                     "cpu": {"user": 0, "system": 0}}

    def system_metrics(self, params: Dict[str, str]) -> Reply:
        now = now_us()
        return 200, {"timeRange": {"from": fmt_ms(now - 3600 * 1_000_000), "to": fmt_ms(now)},
                     "bucketMinutes": 1, "pointCount": 0, "replicaCount": 1,
                     "replicas": [{"hostname": "embedded", "port": 0, "workerId": "0", "timeSeries": []}]}

    def worker_metrics(self, params: Dict[str, str]) -> Reply:
        now = now_us()
        with self.st.lock:
            total = sum(p.live_count() for q in self.st.queues.values() for p in q.partitions.values())
        return 200, {"timeRange": {"from": fmt_ms(now - 3600 * 1_000_000), "to": fmt_ms(now)},
                     "bucketMinutes": 1, "pointCount": 0, "timeSeries": [], "queues": [],
                     "workers": [{"workerId": 0, "hostname": "embedded", "lastSeen": fmt_ms(now),
                                  "dbConnections": 0, "freeSlots": 0, "jobQueueSize": 0, "backoffSize": 0,
                                  "avgEventLoopLagMs": 0, "maxEventLoopLagMs": 0, "messagesProcessed": 0}],
                     "summary": {"totalPushRequests": 0, "totalPushMessages": total, "totalPopRequests": 0,
                                 "totalPopMessages": 0, "totalAckRequests": 0, "totalAckMessages": 0,
                                 "totalAckFailed": 0, "totalDbErrors": 0, "totalDlq": len(self.st.dlq),
                                 "pendingMessages": 0}}

    def postgres_stats(self) -> Reply:
        return 200, {"database": "embedded", "timestamp": fmt_ms(now_us()),
                     "bufferConfig": {"sharedBuffers": "0", "sharedBuffersSize": "0 MB"},
                     "cacheSummary": {"tables": {"cacheHits": 0, "diskReads": 0, "hitRatio": 100.0},
                                      "indexes": {"cacheHits": 0, "diskReads": 0, "hitRatio": 100.0}},
                     "databaseCache": {"database": "embedded", "cacheHits": 0, "diskReads": 0,
                                       "cacheHitRatio": 100.0},
                     "activeQueries": [], "autovacuumStatus": [], "bufferUsage": [], "deadTuples": [],
                     "hotUpdates": [], "indexCache": [], "tableCache": [], "tableSizes": []}


def route(st: BrokerState, router: Any, method: str, path: str, params: Dict[str, str],
          raw: bytes) -> Optional[Reply]:
    """Answer an admin route, or return None when the route does not exist (404)."""
    a = _AdminRoutes(st, router)
    segs = path.split("/")
    n = len(segs)
    if method == "GET":
        if path == "/metrics":
            return a.metrics()
        if n < 4 or segs[1] != "api" or segs[2] != "v1":
            return None
        head = segs[3]
        if head == "resources":
            if n == 5:
                return {"queues": a.list_queues, "overview": a.overview, "namespaces": a.namespaces,
                        "tasks": a.tasks}.get(segs[4], lambda: None)()
            if n == 6 and segs[4] == "queues" and segs[5]:
                return a.queue_detail(segs[5])
        elif head == "status":
            if n == 4:
                return a.status()
            if n == 5 and segs[4] == "queues":
                return a.status_queues(params)
            if n == 5 and segs[4] == "analytics":
                return a.analytics(params)
            if n == 6 and segs[4] == "queues" and segs[5]:
                return a.status_queue(segs[5])
            if n == 7 and segs[4] == "queues" and segs[6] == "messages":
                return a.status_queue_messages(segs[5], params)
        elif head == "consumer-groups":
            if n == 4:
                return a.groups()
            if n == 5 and segs[4] == "lagging":
                return a.lagging(params)
            if n == 5 and segs[4]:
                return a.group_detail(segs[4])
        elif head == "messages":
            if n == 4:
                return a.messages(params)
            if n == 6:
                return a.message_detail(segs[4], segs[5])
        elif head == "traces":
            if n == 5 and segs[4] == "names":
                return a.trace_names(params)
            if n == 6 and segs[4] == "by-name":
                return a.traces_by_name(unquote(segs[5]), params)
            if n == 6:
                return a.traces_for(segs[4], segs[5])
        elif head == "analytics" and n == 5:
            if segs[4] == "system-metrics":
                return a.system_metrics(params)
            if segs[4] == "worker-metrics":
                return a.worker_metrics(params)
            if segs[4] == "postgres-stats":
                return a.postgres_stats()
        elif head == "system":
            if path == "/api/v1/system/maintenance":
                return a.maintenance_get()
            if path == "/api/v1/system/maintenance/pop":
                return a.pop_maintenance_get()
        return None
    if method == "POST":
        if path == "/api/v1/traces":
            return a.post_trace(router.parse_body(raw))
        if path == "/api/v1/stats/refresh":
            return a.stats_refresh()
        if path == "/api/v1/system/maintenance":
            return a.maintenance_set(router.parse_body(raw))
        if path == "/api/v1/system/maintenance/pop":
            return a.pop_maintenance_set(router.parse_body(raw))
        if n >= 5 and segs[1:4] == ["api", "v1", "consumer-groups"] and segs[4]:
            g = segs[4]
            if n == 6 and segs[5] == "subscription":
                return a.update_subscription(g, router.parse_body(raw))
            if n == 8 and segs[5] == "queues" and segs[7] == "seek":
                return a.seek(g, segs[6], router.parse_body(raw))
            if n == 10 and segs[5] == "queues" and segs[7] == "partitions" and segs[9] == "seek":
                return a.seek(g, segs[6], None, partition=segs[8])
        return None
    if method == "DELETE":
        if n >= 5 and segs[1:4] == ["api", "v1", "consumer-groups"] and segs[4]:
            if n == 5:
                return a.delete_group(segs[4], params)
            if n == 7 and segs[5] == "queues" and segs[6]:
                return a.delete_group(segs[4], params, queue=segs[6])
        if n == 6 and segs[1:4] == ["api", "v1", "messages"]:
            return a.delete_message(segs[4], segs[5])
    return None
