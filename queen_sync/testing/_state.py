"""The messaging routes of the embedded Queen-compatible broker: :class:`BrokerState`.

Every public method of :class:`BrokerState` takes already-decoded request data and returns
``(http_status, body)`` where ``body`` is a JSON-ready Python object: push, pop (long poll,
partition claims, leases), ack, lease extend, configure, delete, DLQ reads. One lock protects
the whole store; each queue has its own condition variable (sharing that lock) on which
long-poll pops wait, woken by pushes, acks, lease releases and queue deletion.

Where the rest lives: the records in :mod:`._records`, the store and the rules the routes
share in :mod:`._store`, transactions in :mod:`._transactions`, Streams in :mod:`._streams`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from ._records import (
    BOOL_OPTIONS,
    INVALID_LEASE,
    NOT_FOUND,
    OPTION_DEFAULTS,
    QUEUE_MODE,
    Lease,
    Msg,
    Partition,
    Queue,
    Reply,
    Row,
)
from ._transactions import TransactionalStore
from ._util import fmt_ms, fmt_us, int_param, is_uuid, now_us, parse_ts_us, uuid7

logger = logging.getLogger("queen_sync.testing")

CONFIGURE_NULL_ERROR = "[json.exception.type_error.306] cannot use value() with null"


def _bool_param(v: Optional[str]) -> bool:
    return v in ("true", "1")


class BrokerState(TransactionalStore):
    """The whole broker store. Thread-safe; see the module docstring."""

    # ------------------------------------------------------------------ push
    def push(self, items: List[dict]) -> Reply:
        """``POST /api/v1/push`` with validated ``items``; returns the per-item result list."""
        for it in items:
            tid = it.get("traceId")
            if tid is not None and not is_uuid(tid):
                # The real broker's DB insert fails for the whole batch and its file buffer
                # "buffers" it (and never manages to store it). Nothing is stored here.
                return 200, [{"queue": x.get("queue"), "status": "buffered"} for x in items]
        if self.maintenance:
            with self.lock:
                if self.maintenance:
                    self.push_buffer.extend(items)
                    out = []
                    for it in items:
                        r = {"status": "buffered", "queue": it.get("queue"),
                             "partition": it.get("partition") or "Default"}
                        if it.get("transactionId"):
                            r["transactionId"] = it["transactionId"]
                        out.append(r)
                    return 201, out
        with self.lock:
            now = now_us()
            out = []
            touched: Set[str] = set()
            for idx, it in enumerate(items):
                out.append(self._push_one(idx, it, now, None, touched))
            for qn in touched:
                self._notify(qn)
        return 200, out

    # ------------------------------------------------------------------ pop
    def pop(self, queue: str, partition: Optional[str], params: Dict[str, str],
            disconnected: Optional[Any] = None) -> Reply:
        """``GET /api/v1/pop/queue/{queue}[/partition/{partition}]``; long-polls when ``wait``."""
        if self.pop_maintenance:
            return 204, {"messages": [], "paused": True}
        group = params.get("consumerGroup") or QUEUE_MODE
        batch = max(1, int_param(params.get("batch"), 1))
        wait = _bool_param(params.get("wait"))
        timeout_ms = int_param(params.get("timeout"), 30000)
        nparts = 1 if partition is not None else max(1, int_param(params.get("partitions"), 1))
        auto_ack = _bool_param(params.get("autoAck"))
        sub_mode = params.get("subscriptionMode")
        sub_from = params.get("subscriptionFrom")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        with self.lock:
            while True:
                # A caller that already hung up must not be handed (and leased) anything: the
                # real broker cancels the parked pop job when its connection closes.
                if disconnected is not None and disconnected():
                    break
                body, next_expiry = self._try_pop(queue, partition, group, batch, nparts, auto_ack,
                                                  sub_mode, sub_from)
                if not wait or body.get("messages"):
                    return 200, body
                if self.stopping:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if next_expiry is not None:
                    remaining = min(remaining, max(0.001, (next_expiry - now_us()) / 1e6 + 0.002))
                if disconnected is not None:
                    remaining = min(remaining, 1.0)
                self._cond(queue).wait(remaining)
                if self.pop_maintenance:
                    return 204, {"messages": [], "paused": True}
        return 200, {"success": True, "queue": queue, "partition": partition if partition is not None else "",
                     "partitionId": None, "leaseId": None, "consumerGroup": group, "messages": []}

    def release_lease(self, lease_id: str) -> int:
        """Give back an undelivered pop's lease (its reply could not be written to the caller).

        Every partition still held by ``lease_id`` becomes claimable again at once, with no retry
        counted (the messages were never handed out). Auto-ack pops have no lease and are not
        undone. Returns the number of partitions released (0 when the lease is unknown).
        """
        with self.lock:
            lease = self.leases.get(lease_id)
            if lease is None:
                return 0
            released = 0
            for p in list(lease.partitions):
                row = p.rows.get(lease.group)
                if row is not None and row.lease_id == lease_id:
                    self._release(row)
                    released += 1
            self.leases.pop(lease_id, None)
            if released:
                self._notify(lease.queue)
            return released

    def _record_subscription(self, q: Queue, group: str, sub_mode: Optional[str], sub_from: Optional[str],
                             now: int) -> None:
        if group == QUEUE_MODE or (group, q.name) in self.meta:
            return
        if sub_mode == "new" or sub_from == "now":
            self.meta[(group, q.name)] = {"mode": "new", "ts": now, "created": now}
        elif sub_from:
            ts = parse_ts_us(sub_from)
            if ts is not None:
                self.meta[(group, q.name)] = {"mode": "timestamp", "ts": ts, "created": now}

    def _try_pop(self, queue: str, partition: Optional[str], group: str, batch: int, nparts: int,
                 auto_ack: bool, sub_mode: Optional[str], sub_from: Optional[str]) -> Tuple[dict, Optional[int]]:
        now = now_us()
        q = self.queues.get(queue)
        next_expiry: Optional[int] = None
        claim: List[Partition] = []
        delayed: Optional[Partition] = None  # a partition with messages held back by delayedProcessing only
        if partition is not None:
            p = q.partitions.get(partition) if q is not None else None
            if p is None:
                return {"success": False, "error": "partition_not_found", "messages": []}, None
            row = p.rows.get(group)
            if row is not None and self._lease_live(row, now):
                lease = self.leases.get(row.lease_id)  # type: ignore[arg-type]
                return ({"success": False, "error": "lease_held", "messages": []},
                        lease.expires if lease is not None else None)
            claim.append(p)
            next_expiry = self._visible_until(p, now)[1]
        else:
            if q is not None and q.partitions:
                parts = list(q.partitions.values())
                start = q.rr % len(parts)
                q.rr += 1
                for p in parts[start:] + parts[:start]:
                    row = p.rows.get(group)
                    if row is not None and self._lease_live(row, now):
                        lease = self.leases.get(row.lease_id)  # type: ignore[arg-type]
                        if lease is not None and (next_expiry is None or lease.expires < next_expiry):
                            next_expiry = lease.expires
                        continue
                    pending, wake = self._has_pending(p, row, now)
                    if wake is not None and (next_expiry is None or wake < next_expiry):
                        next_expiry = wake
                    if pending:
                        claim.append(p)
                        if len(claim) >= nparts:
                            break
                    elif delayed is None and wake is not None and self._only_delayed(p, row, now):
                        delayed = p
            if not claim and delayed is not None:
                # As the real broker (0.15.1, 2026-12-02): a partition whose next messages are
                # held only by delayedProcessing is claimed and answers an empty success with a
                # lease (given back at once); one held by windowBuffer is not claimed.
                claim.append(delayed)
            if not claim:
                return {"success": False, "error": "no_available_partition", "messages": []}, next_expiry
        assert q is not None
        self._record_subscription(q, group, sub_mode, sub_from, now)
        lease_id = "" if auto_ack else uuid7()
        lease = None
        self._claims += 1
        if self._claims % 2000 == 0:
            self._prune_leases(now)
        if not auto_ack:
            lease = Lease(lease_id, q.name, group, now + int(q.lease_seconds() * 1_000_000))
            self.leases[lease_id] = lease
        out: List[dict] = []
        budget = batch
        claimed = 0
        for p in claim:
            row = p.rows.get(group)
            if row is None:
                row = Row(group, self._start_cursor(p, group), now)
                p.rows[group] = row
            msgs = self._available(p, row, budget, now)
            claimed += 1
            budget -= len(msgs)
            ca = fmt_us
            pid, pname = p.id, p.name
            for m in msgs:
                out.append({"id": m.id, "transactionId": m.txid, "partitionId": pid, "partition": pname,
                            "data": m.data, "createdAt": ca(m.created), "leaseId": lease_id,
                            "consumerGroup": group, "traceId": m.trace_id, "producerSub": None})
            if auto_ack:
                if msgs:
                    self._advance(row, msgs[-1], now)
                    row.total_consumed += len(msgs)
                    row.batches_consumed += 1
                self._release(row)
            elif msgs:
                row.lease_id = lease_id
                row.batch_size = len(msgs)
                row.acked = 0
                lease.partitions.append(p)  # type: ignore[union-attr]
            else:
                self._release(row)
            if budget <= 0:
                break
        first = claim[0]
        body = {"success": True, "queue": q.name, "partition": first.name, "partitionId": first.id,
                "leaseId": lease_id, "consumerGroup": group, "partitionsClaimed": claimed, "messages": out}
        if lease is not None and not lease.partitions:
            self.leases.pop(lease_id, None)
        return body, next_expiry

    # ------------------------------------------------------------------ ack
    def ack(self, items: List[dict], group_override: Optional[str] = None, batch_route: bool = False) -> Reply:
        """``POST /api/v1/ack`` (one item) or ``/ack/batch``; returns the per-item result list."""
        touched: Set[str] = set()
        results: List[Any] = [None] * len(items)
        with self.lock:
            now = now_us()
            groups = [(group_override if batch_route else it.get("consumerGroup")) or QUEUE_MODE for it in items]
            # Like ack_messages_v2, every item's lease is checked before any is applied: a nack
            # that releases the lease leaves the later items of the same call valid (and they
            # act on the released partition), while a later call with that lease is refused.
            lease_ok = [self._lease_valid(it, g, now) for it, g in zip(items, groups)]
            # The acks of one call are applied in (partition, group, message) order, so within
            # one call the cursor only moves forward; results keep input order.
            for idx in sorted(range(len(items)), key=lambda i: self._ack_order(items[i])):
                results[idx] = self._ack_one(idx, items[idx], groups[idx], now, touched, lease_ok[idx], batch_route)
            for qn in touched:
                self._notify(qn)
        return 200, results

    def _ack_order(self, it: dict) -> Tuple[str, int]:
        pid = it.get("partitionId")
        p = self.partitions_by_id.get(pid) if isinstance(pid, str) else None
        txid = it.get("transactionId")
        m = p.by_tx.get(txid) if (p is not None and isinstance(txid, str)) else None
        return (pid if isinstance(pid, str) else "", m.idx if m is not None else -1)

    def _lease_valid(self, it: dict, group: str, now: int) -> bool:
        """Whether an ack item passes the lease check (True without a leaseId: unfenced)."""
        lease_id = it.get("leaseId") or None
        if lease_id is None:
            return True
        pid = it.get("partitionId")
        p = self.partitions_by_id.get(pid) if isinstance(pid, str) else None
        row = p.rows.get(group) if p is not None else None
        return row is not None and row.lease_id == lease_id and self._lease_live(row, now)

    def _ack_one(self, idx: int, it: dict, group: str, now: int, touched: Set[str], lease_ok: bool,
                 batch_route: bool) -> dict:
        txid = it.get("transactionId")
        pid = it.get("partitionId")
        status = it.get("status", "completed")
        if status is None:
            status = "completed"
        lease_id = it.get("leaseId") or None
        res = {"index": idx, "transactionId": txid, "success": False, "error": None, "queueName": None,
               "partitionName": None, "leaseReleased": False, "dlq": False}
        p = self.partitions_by_id.get(pid) if isinstance(pid, str) else None
        if p is None:
            res["error"] = NOT_FOUND
            return res
        res["queueName"] = p.queue.name
        res["partitionName"] = p.name
        m = p.by_tx.get(txid) if isinstance(txid, str) else None
        if m is None or m.deleted:
            res["error"] = NOT_FOUND
            return res
        row = p.rows.get(group)
        if not lease_ok:
            res["error"] = INVALID_LEASE
            return res
        if status not in ("completed", "success", "failed", "retry", "dlq"):
            return res
        touched.add(p.queue.name)
        # the DLQ entry's error when the ack gives none: the single route sends "", the batch
        # route none, which the broker's SQL turns into "Retries exhausted" (dlq status too)
        err = it.get("error")
        if not isinstance(err, str):
            err = "Retries exhausted" if batch_route else ""
        if row is None:
            # Unfenced ack by a group that never read this partition: no cursor to move. As
            # the real broker's SQL (no retry count found), a nack dead-letters the message
            # though the group's cursor stays, so it is still delivered to that group.
            res["success"] = True
            if status in ("failed", "dlq"):
                self._to_dlq(m, group, err, 0, now)
                res["dlq"] = True
            else:
                res["leaseReleased"] = True if status == "retry" else None
            return res
        held = row.lease_id is not None  # the broker's worker_id: set while leased, even expired
        live = self._lease_live(row, now)
        if status in ("completed", "success"):
            self._advance(row, m, now)
            row.total_consumed += 1
            res["success"] = True
            res["leaseReleased"] = self._count_ack(row, live)
            return res
        if status == "retry":
            self._release(row)
            res["success"] = True
            res["leaseReleased"] = True
            return res
        if status == "failed" and row.retry < int(p.queue.options.get("retryLimit") or 0):
            # the real broker's release counts a retry only while the partition is leased:
            # the later nacks of a call whose first nack released it change nothing
            if held:
                row.retry += 1
                self._release(row)
            res["success"] = True
            res["leaseReleased"] = True
            return res
        # failed with retries exhausted, or status dlq: move to the DLQ, step past it. The
        # retry count is not reset (as on the real broker): until a completed ack ends a
        # batch, the partition's next failed message goes to the DLQ on its first nack, and
        # a later item of the same call too, its cursor move skipping the ones released before
        self._to_dlq(m, group, err, row.retry, now)  # the count as it stands, for a dlq status too
        self._advance(row, m, now)
        self._count_ack(row, live, reset_retry=False)
        res["success"] = True
        res["dlq"] = True
        res["leaseReleased"] = False
        return res

    # ------------------------------------------------------------------ lease
    def extend(self, lease_id: str, seconds: int) -> Reply:
        """``POST /api/v1/lease/{leaseId}/extend``; new expiry = max(current, now + seconds)."""
        res = {"index": 0, "leaseId": lease_id, "success": False, "error": None, "expiresAt": None}
        with self.lock:
            now = now_us()
            lease = self.leases.get(lease_id)
            held = []
            if lease is not None:
                held = [p for p in lease.partitions
                        if p.rows.get(lease.group) is not None and p.rows[lease.group].lease_id == lease_id]
            if lease is None or not held:
                res["error"] = "Lease not found"
                return 200, [res]
            if lease.expires <= now:
                res["error"] = "Lease already expired"
                return 200, [res]
            lease.expires = max(lease.expires, now + int(seconds) * 1_000_000)
            res["success"] = True
            res["expiresAt"] = fmt_ms(lease.expires)
        return 200, [res]

    # ------------------------------------------------------------------ configure / delete
    def configure(self, body: dict) -> Reply:
        """``POST /api/v1/configure``: create or reset a queue (see the wire notes)."""
        name = body["queue"]
        options = body.get("options")
        options = options if isinstance(options, dict) else {}
        given = {k: v for k, v in options.items() if k in OPTION_DEFAULTS}
        ns, task = body.get("namespace"), body.get("task")
        with self.lock:
            now = now_us()
            q = self.queues.get(name)
            if q is None:
                q = Queue(name, "", "", now)
                self.queues[name] = q
            p = self._get_or_create_partition(q, "Default", now)
            if not given and ns is None and task is None:
                return 200, {"error": CONFIGURE_NULL_ERROR}
            new_opts = dict(OPTION_DEFAULTS)
            for k, v in given.items():
                if k in BOOL_OPTIONS:
                    if isinstance(v, bool):
                        new_opts[k] = v
                    elif isinstance(v, str) and v.lower() in ("true", "false", "t", "f", "yes", "no", "1", "0"):
                        new_opts[k] = v.lower() in ("true", "t", "yes", "1")
                    elif v is not None:
                        return 200, {"success": False, "error": _pg_type_error(v, "boolean")}
                else:
                    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and _is_int(v))
                                                   or (isinstance(v, float) and v == int(v))):
                        if v is None:
                            continue
                        return 200, {"success": False, "error": _pg_type_error(v, "integer")}
                    new_opts[k] = int(v)
            q.options = new_opts
            q.namespace = ns if isinstance(ns, str) else ""
            q.task = task if isinstance(task, str) else ""
            self._notify(name)
            return 200, {"configured": True, "queue": name, "queueId": q.id, "partitionId": p.id,
                         "namespace": q.namespace, "task": q.task, "options": dict(new_opts)}

    def delete_queue(self, name: str) -> Reply:
        """``DELETE /api/v1/resources/queues/{queue}``: idempotent."""
        with self.lock:
            q = self.queues.pop(name, None)
            if q is not None:
                for p in q.partitions.values():
                    self.partitions_by_id.pop(p.id, None)
                self.dlq = [d for d in self.dlq if d["partition"].queue is not q]
                for key in [k for k in self.meta if k[1] == name]:
                    del self.meta[key]
                for lid in [lid for lid, lease in self.leases.items() if lease.queue == name]:
                    del self.leases[lid]
                self.traces = [t for t in self.traces if t["partition"].queue is not q]
                self._notify(name)
        return 200, {"deleted": True, "queue": name, "existed": q is not None}

    # ------------------------------------------------------------------ dlq
    def dlq_rows(self, queue: Optional[str], group: Optional[str], limit: int, offset: int) -> Reply:
        """``GET /api/v1/dlq``: newest failure first; ``limit`` is echoed but not applied."""
        if offset >= 1:
            return 200, {"success": True, "value": None}
        with self.lock:
            rows = [d for d in reversed(self.dlq)
                    if (not queue or d["queue"] == queue) and (not group or d["group"] == group)]
            out = [self._dlq_json(d) for d in rows]
        return 200, {"messages": out, "pagination": {"limit": limit, "offset": offset}}

    @staticmethod
    def _dlq_json(d: dict) -> dict:
        m: Msg = d["msg"]
        p: Partition = d["partition"]
        return {"id": m.id, "transactionId": m.txid, "partitionId": p.id, "queue": d["queue"],
                "partition": p.name, "consumerGroup": d["group"], "data": m.data, "errorMessage": d["error"],
                "retryCount": d["retry"], "producerSub": None, "createdAt": fmt_ms(m.created),
                "failedAt": fmt_ms(d["failed"])}

    # ------------------------------------------------------------------ introspection
    def stored_messages(self, queue: str) -> List[dict]:
        """Every stored (not deleted) message of ``queue``, in push order."""
        with self.lock:
            q = self.queues.get(queue)
            if q is None:
                return []
            msgs = [m for p in q.partitions.values() for m in p.messages if not m.deleted]
            msgs.sort(key=lambda m: (m.created, m.id))
            return [{"id": m.id, "transactionId": m.txid, "partition": m.partition.name,
                     "partitionId": m.partition.id, "data": m.data, "createdAt": fmt_us(m.created),
                     "traceId": m.trace_id} for m in msgs]


def _is_int(s: str) -> bool:
    try:
        int(s.strip())
    except ValueError:
        return False
    return True


def _pg_type_error(v: Any, typ: str) -> str:
    text = v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
    return ('ERROR:  invalid input syntax for type %s: "%s"\nCONTEXT:  PL/pgSQL function '
            "queen.configure_queue_v1(text,jsonb) line 27 at assignment\n" % (typ, text))

