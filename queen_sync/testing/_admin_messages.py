"""Message and trace routes of the embedded broker: ``GET /api/v1/messages``,
``GET``/``DELETE /api/v1/messages/{pid}/{tx}``, ``POST /api/v1/traces``,
``GET /api/v1/traces/{pid}/{tx}``, ``/traces/by-name/{name}`` and ``/traces/names``.

A stored message's status follows the real broker's ``list_messages_v1``/``get_message_v1``:
``dead_letter`` once any group moved it to the DLQ; on a partition read only by consumer groups,
``completed`` when every group's cursor is past it, else ``pending``; otherwise its queue-mode
status (``completed`` past the queue-mode cursor, ``processing`` while a queue-mode lease is live
on the partition, else ``pending``). Lock held inside each function.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ._admin_listing import queue_mode_status, sorted_messages
from ._records import QUEUE_MODE, Msg, Partition
from ._stats import Reply, bus_rows, live_lease_expiry
from ._util import BadRequest, fmt_ms, now_us, paging, parse_ts_us, uuid4

MINUTE_US = 60 * 1_000_000


def msg_status(st: Any, m: Msg, now: int, dead: Optional[set] = None) -> Tuple[str, str, int, int]:
    """(status, queueStatus, consumedBy, totalGroups) of a stored message."""
    p = m.partition
    bus = bus_rows(p)
    consumed_by = sum(1 for r in bus.values() if r.cursor > m.idx)
    if dead is None:
        dead = {id(d["msg"]) for d in st.dlq}
    if id(m) in dead:
        return "dead_letter", "dead_letter", consumed_by, len(bus)
    qs = queue_mode_status(st, m, now)
    if QUEUE_MODE not in p.rows and bus:
        return ("completed" if consumed_by >= len(bus) else "pending"), qs, consumed_by, len(bus)
    return qs, qs, consumed_by, len(bus)


def mode(parts: List[Partition]) -> dict:
    """``{hasQueueMode, busGroupsCount, type}`` over the partitions' readers."""
    groups = set()
    has_qm = False
    for p in parts:
        for g in p.rows:
            if g == QUEUE_MODE:
                has_qm = True
            else:
                groups.add(g)
    typ = "hybrid" if (groups and has_qm) else ("bus" if groups else ("queue" if has_qm else "none"))
    return {"busGroupsCount": len(groups), "hasQueueMode": has_qm, "type": typ}


def messages(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/messages?queue=&partition=&ns=&task=&status=&from=&to=&limit=200&offset=0``:
    newest first, created from ``from`` (default an hour ago) to the end of the minute of ``to``."""
    limit, offset = paging(params, 200)
    now = now_us()
    frm = parse_ts_us(params.get("from")) or now - 60 * MINUTE_US
    to = parse_ts_us(params.get("to")) or now
    to = to - to % MINUTE_US + MINUTE_US
    with st.lock:
        qs = list(st.queues.values())
        if params.get("queue"):
            qs = [q for q in qs if q.name == params["queue"]]
        mode_parts = [m.partition for m in sorted_messages(qs) if frm <= m.created < to]
        ns = params.get("ns") or params.get("namespace")
        if ns:
            qs = [q for q in qs if q.namespace == ns]
        if params.get("task"):
            qs = [q for q in qs if q.task == params["task"]]
        msgs = [m for m in sorted_messages(qs, params.get("partition")) if frm <= m.created < to]
        dead = {id(d["msg"]) for d in st.dlq}
        out = []
        for m in msgs:
            status, qstatus, consumed_by, total_groups = msg_status(st, m, now, dead)
            if params.get("status") and params["status"] != status:
                continue
            p = m.partition
            out.append({"id": m.id, "transactionId": m.txid, "partitionId": p.id, "partition": p.name,
                        "queue": p.queue.name, "namespace": p.queue.namespace, "task": p.queue.task,
                        "queuePath": p.queue.name + "/" + p.name, "queuePriority": p.queue.options["priority"],
                        "createdAt": fmt_ms(m.created), "traceId": m.trace_id, "producerSub": None,
                        "leaseExpiresAt": fmt_ms(live_lease_expiry(st, p.rows.get(QUEUE_MODE), now)),
                        "status": status, "queueStatus": qstatus,
                        "busStatus": {"consumedBy": consumed_by, "totalGroups": total_groups}})
        m_mode = mode(list({id(p): p for p in mode_parts}.values()))
    return 200, {"messages": out[offset:offset + limit], "mode": m_mode}


def find(st: Any, pid: str, txid: str) -> Optional[Msg]:
    """The stored (not deleted) message ``txid`` of partition ``pid``, or None."""
    p = st.partitions_by_id.get(pid)
    m = p.by_tx.get(txid) if p is not None else None
    return None if (m is None or m.deleted) else m


def message_detail(st: Any, pid: str, txid: str) -> Reply:
    """``GET /api/v1/messages/{pid}/{tx}``."""
    now = now_us()
    with st.lock:
        m = find(st, pid, txid)
        if m is None:
            return 200, {"error": "Message not found"}
        p, q = m.partition, m.partition.queue
        status, _, consumed_by, _ = msg_status(st, m, now)
        groups = [{"name": g, "consumed": r.cursor > m.idx,
                   "leaseExpiresAt": fmt_ms(live_lease_expiry(st, r, now))}
                  for g, r in p.rows.items()]
        m_mode = mode([p])
        m_mode["consumedByGroups"] = consumed_by
        dl = [d for d in st.dlq if d["msg"] is m]
        o = q.options
        return 200, {"id": m.id, "transactionId": m.txid, "partitionId": p.id, "partition": p.name,
                     "queue": q.name, "namespace": q.namespace, "task": q.task,
                     "queuePath": q.name + "/" + p.name, "payload": m.data, "traceId": m.trace_id,
                     "producerSub": None, "createdAt": fmt_ms(m.created), "isEncrypted": False,
                     "status": status, "retryCount": dl[-1]["retry"] if dl else None,
                     "errorMessage": dl[-1]["error"] if dl else None,
                     "leaseExpiresAt": fmt_ms(live_lease_expiry(st, p.rows.get(QUEUE_MODE), now)),
                     "consumerGroups": groups, "mode": m_mode,
                     "queueConfig": {"leaseTime": o["leaseTime"], "retryLimit": o["retryLimit"],
                                     "retryDelay": o["retryDelay"], "ttl": o["ttl"], "priority": o["priority"]}}


def delete_message(st: Any, pid: str, txid: str) -> Reply:
    """``DELETE /api/v1/messages/{pid}/{tx}``."""
    with st.lock:
        m = find(st, pid, txid)
        # the real broker's shapes (0.15.1, 2026-12-02): the outcome's text is in "message"
        if m is None:
            return 200, {"success": False, "message": "Message not found", "partitionId": pid, "transactionId": txid}
        m.deleted = True
        m.partition.by_tx.pop(m.txid, None)
        st._notify(m.partition.queue.name)
        return 200, {"success": True, "message": "Message deleted successfully", "partitionId": pid,
                     "transactionId": txid}


def post_trace(st: Any, body: Any) -> Reply:
    """``POST /api/v1/traces``."""
    if not isinstance(body, dict) or not isinstance(body.get("transactionId"), str) \
            or not isinstance(body.get("partitionId"), str):
        raise BadRequest("transactionId and partitionId are required")
    if body.get("data") is None:
        raise BadRequest("data is required")
    names = body.get("traceNames")
    if isinstance(names, str):
        names = [names]
    elif not isinstance(names, list):
        names = None
    with st.lock:
        m = find(st, body["partitionId"], body["transactionId"])
        if m is None:
            return 200, {"success": False, "error": "Message not found"}
        tid = uuid4()
        st.traces.append({"id": tid, "msg": m, "partition": m.partition,
                          "group": body.get("consumerGroup") or QUEUE_MODE,
                          "event": body.get("eventType") or "info", "data": body["data"],
                          "names": [n for n in names if isinstance(n, str)] if names else None,
                          "created": now_us()})
    return 200, {"success": True, "traceId": tid}


def _trace_json(t: dict, full: bool = False) -> dict:
    out = {"id": t["id"], "event_type": t["event"], "data": t["data"], "consumer_group": t["group"],
           "trace_names": t["names"], "worker_id": "0", "created_at": fmt_ms(t["created"])}
    if full:
        m: Msg = t["msg"]
        out.update({"transaction_id": m.txid, "partition_id": m.partition.id,
                    "partition_name": m.partition.name, "queue_name": m.partition.queue.name,
                    "message_id": m.id})
    return out


def traces_for(st: Any, pid: str, txid: str) -> Reply:
    """``GET /api/v1/traces/{pid}/{tx}``."""
    with st.lock:
        out = [_trace_json(t) for t in st.traces if t["msg"].txid == txid and t["partition"].id == pid]
    return 200, {"traces": out}


def traces_by_name(st: Any, name: str, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/traces/by-name/{name}?limit=100&offset=0``, newest first."""
    limit, offset = paging(params, 100)
    with st.lock:
        rows = [t for t in reversed(st.traces) if t["names"] and name in t["names"]]
        # as the real broker (0.15.1, 2026-12-02), which pages one aggregated row: every trace
        # for any limit >= 1, and null for limit 0 or an offset >= 1
        out = [_trace_json(t, True) for t in rows] if limit >= 1 and offset == 0 else None
    return 200, {"traces": out, "total": len(rows), "pagination": {"limit": limit, "offset": offset}}


def trace_names(st: Any, params: Dict[str, str]) -> Reply:
    """``GET /api/v1/traces/names?limit=50&offset=0``, most recently seen first."""
    limit, offset = paging(params, 50)
    with st.lock:
        acc: Dict[str, dict] = {}
        for t in st.traces:
            for n in t["names"] or ():
                e = acc.setdefault(n, {"trace_name": n, "trace_count": 0, "msgs": set(), "last": 0})
                e["trace_count"] += 1
                e["msgs"].add(id(t["msg"]))
                e["last"] = max(e["last"], t["created"])
    rows = sorted(acc.values(), key=lambda e: e["last"], reverse=True)
    out = [{"trace_name": e["trace_name"], "trace_count": e["trace_count"], "message_count": len(e["msgs"]),
            "last_seen": fmt_ms(e["last"])} for e in rows[offset:offset + limit]]
    return 200, {"trace_names": out, "total": len(rows), "pagination": {"limit": limit, "offset": offset}}
