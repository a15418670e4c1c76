"""In-memory store and messaging semantics of the embedded Queen-compatible broker.

Every public method of :class:`BrokerState` takes already-decoded request data and returns
``(http_status, body)`` where ``body`` is a JSON-ready Python object. One lock protects the
whole store; each queue has its own condition variable (sharing that lock) on which long-poll
pops wait, woken by pushes, acks, lease releases and queue deletion.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from ._util import fmt_ms, fmt_us, is_uuid, now_us, parse_ts_us, uuid4, uuid7

logger = logging.getLogger("queen_sync.testing")

QUEUE_MODE = "__QUEUE_MODE__"

OPTION_DEFAULTS: Dict[str, Any] = {
    "leaseTime": 300,
    "retryLimit": 3,
    "retryDelay": 1000,
    "deadLetterQueue": False,
    "dlqAfterMaxRetries": False,
    "priority": 0,
    "delayedProcessing": 0,
    "windowBuffer": 0,
    "maxSize": 0,
    "ttl": 3600,
    "retentionSeconds": 0,
    "completedRetentionSeconds": 0,
    "retentionEnabled": False,
    "encryptionEnabled": False,
    "maxWaitTimeSeconds": 0,
}
BOOL_OPTIONS = {"deadLetterQueue", "dlqAfterMaxRetries", "retentionEnabled", "encryptionEnabled"}

DUP_TX_ERROR = 'duplicate key value violates unique constraint "messages_partition_transaction_unique"'
CONFIGURE_NULL_ERROR = "[json.exception.type_error.306] cannot use value() with null"
INVALID_LEASE = "Invalid or expired lease"
NOT_FOUND = "Message not found"

Reply = Tuple[int, Any]


class Msg(object):
    __slots__ = ("id", "txid", "data", "created", "trace_id", "partition", "idx", "deleted")

    def __init__(self, mid: str, txid: str, data: Any, created: int, trace_id: Optional[str],
                 partition: "Partition", idx: int) -> None:
        self.id = mid
        self.txid = txid
        self.data = data
        self.created = created
        self.trace_id = trace_id
        self.partition = partition
        self.idx = idx
        self.deleted = False


class Row(object):
    """One (partition, consumer group) cursor with its lease: PostgreSQL's partition_consumers."""

    __slots__ = ("group", "cursor", "lease_id", "batch_size", "acked", "retry", "nacked_lease",
                 "total_consumed", "batches_consumed", "last_consumed", "created")

    def __init__(self, group: str, cursor: int, created: int) -> None:
        self.group = group
        self.cursor = cursor
        self.lease_id: Optional[str] = None
        self.batch_size = 0
        self.acked = 0
        self.retry = 0
        self.nacked_lease: Optional[str] = None
        self.total_consumed = 0
        self.batches_consumed = 0
        self.last_consumed: Optional[int] = None
        self.created = created

    def snapshot(self) -> tuple:
        return tuple(getattr(self, k) for k in Row.__slots__)

    def restore(self, snap: tuple) -> None:
        for k, v in zip(Row.__slots__, snap):
            setattr(self, k, v)


class Partition(object):
    __slots__ = ("id", "name", "queue", "messages", "created_list", "by_tx", "rows", "created",
                 "last_activity")

    def __init__(self, name: str, queue: "Queue", created: int) -> None:
        self.id = uuid4()
        self.name = name
        self.queue = queue
        self.messages: List[Msg] = []
        self.created_list: List[int] = []
        self.by_tx: Dict[str, Msg] = {}
        self.rows: Dict[str, Row] = {}
        self.created = created
        self.last_activity: Optional[int] = None

    def live_count(self) -> int:
        return sum(1 for m in self.messages if not m.deleted)


class Queue(object):
    __slots__ = ("id", "name", "namespace", "task", "options", "partitions", "created", "rr")

    def __init__(self, name: str, namespace: str, task: str, created: int) -> None:
        self.id = uuid4()
        self.name = name
        self.namespace = namespace
        self.task = task
        self.options: Dict[str, Any] = dict(OPTION_DEFAULTS)
        self.partitions: Dict[str, Partition] = {}
        self.created = created
        self.rr = 0

    def lease_seconds(self) -> float:
        lt = self.options.get("leaseTime") or 0
        return float(lt) if lt > 0 else 60.0


class Lease(object):
    __slots__ = ("id", "queue", "group", "expires", "partitions")

    def __init__(self, lid: str, queue: str, group: str, expires: int) -> None:
        self.id = lid
        self.queue = queue
        self.group = group
        self.expires = expires
        self.partitions: List[Partition] = []


class Journal(object):
    """Undo log of one transaction: everything needed to roll the store back."""

    def __init__(self) -> None:
        self.rows: Dict[int, Tuple[Partition, str, Optional[tuple]]] = {}
        self.messages: List[Msg] = []
        self.partitions: List[Partition] = []
        self.queues: List[Queue] = []
        self.dlq_len: Optional[int] = None
        self.leases: List["Lease"] = []

    def save_row(self, part: Partition, group: str) -> None:
        key = id(part) ^ hash(group)
        if key in self.rows:
            return
        row = part.rows.get(group)
        self.rows[key] = (part, group, row.snapshot() if row is not None else None)


class Query(object):
    __slots__ = ("id", "name", "source_queue", "sink_queue", "config_hash")

    def __init__(self, name: str, source_queue: str, sink_queue: Optional[str], config_hash: str) -> None:
        self.id = uuid4()
        self.name = name
        self.source_queue = source_queue
        self.sink_queue = sink_queue
        self.config_hash = config_hash


class StreamsStore(object):
    """Registered queries (by name and by id) and state rows: ``shards[(query id, partition id)]``
    maps a key to ``(value, updated_at in epoch microseconds)``."""

    def __init__(self) -> None:
        self.by_name: Dict[str, Query] = {}
        self.by_id: Dict[str, Query] = {}
        self.shards: Dict[Tuple[str, str], Dict[str, Tuple[Any, int]]] = {}


def _bool_param(v: Optional[str]) -> bool:
    return v in ("true", "1")


def _int_param(v: Optional[str], default: int) -> int:
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        return default


class BrokerState(object):
    """The whole broker store. Thread-safe; see the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queues: Dict[str, Queue] = {}
        self.partitions_by_id: Dict[str, Partition] = {}
        self.leases: Dict[str, Lease] = {}
        self.dlq: List[dict] = []  # rows, oldest failure first
        self.meta: Dict[Tuple[str, str], dict] = {}  # (group, queue) -> subscription metadata
        self.traces: List[dict] = []
        self.conds: Dict[str, threading.Condition] = {}
        self.maintenance = False
        self.pop_maintenance = False
        self.push_buffer: List[dict] = []  # pushes accepted while (push) maintenance mode is on
        self.started = time.time()
        self.stopping = False
        self.msg_seq = 0
        self._journal: Optional[Journal] = None
        self._claims = 0
        self.streams: Optional[StreamsStore] = None  # Streams queries and state (see _streams)

    # ------------------------------------------------------------------ helpers (lock held)
    def _cond(self, queue: str) -> threading.Condition:
        c = self.conds.get(queue)
        if c is None:
            c = threading.Condition(self.lock)
            self.conds[queue] = c
        return c

    def _notify(self, queue: str) -> None:
        c = self.conds.get(queue)
        if c is not None:
            c.notify_all()

    def wake_all(self) -> None:
        """Wake every long poll (used when the server stops)."""
        with self.lock:
            for c in self.conds.values():
                c.notify_all()

    def _get_or_create_queue(self, name: str, now: int, journal: Optional[Journal] = None) -> Queue:
        q = self.queues.get(name)
        if q is None:
            ns, _, task = name.partition(".")
            q = Queue(name, ns if task else name, task, now)
            self.queues[name] = q
            if journal is not None:
                journal.queues.append(q)
        return q

    def _get_or_create_partition(self, q: Queue, name: str, now: int,
                                 journal: Optional[Journal] = None) -> Partition:
        p = q.partitions.get(name)
        if p is None:
            p = Partition(name, q, now)
            q.partitions[name] = p
            self.partitions_by_id[p.id] = p
            if journal is not None:
                journal.partitions.append(p)
        return p

    def _lease_live(self, row: Row, now: int) -> bool:
        lid = row.lease_id
        if lid is None:
            return False
        lease = self.leases.get(lid)
        if lease is not None and lease.expires > now:
            return True
        row.lease_id = None  # expired: the partition is claimable again (no retry counted)
        return False

    def _release(self, row: Row) -> None:
        lid = row.lease_id
        row.lease_id = None
        row.batch_size = 0
        row.acked = 0
        if lid is not None:
            lease = self.leases.get(lid)
            if lease is not None and not any(
                    (p.rows.get(lease.group) is not None and p.rows[lease.group].lease_id == lid)
                    for p in lease.partitions):
                # Fully released: forget it ("Lease not found" from now on, like the real broker).
                del self.leases[lid]
                if self._journal is not None:
                    self._journal.leases.append(lease)

    def _prune_leases(self, now: int) -> None:
        """Forget leases that expired more than 10 minutes ago (bounded memory)."""
        limit = now - 600 * 1_000_000
        for lid in [lid for lid, lease in self.leases.items() if lease.expires < limit]:
            del self.leases[lid]

    def _start_cursor(self, part: Partition, group: str) -> int:
        if group == QUEUE_MODE:
            return 0
        meta = self.meta.get((group, part.queue.name))
        if not meta or meta.get("ts") is None:
            return 0
        return bisect.bisect_right(part.created_list, meta["ts"])

    def _visible_until(self, part: Partition, now: int) -> Tuple[int, Optional[int]]:
        """(latest visible created-time, time when more becomes visible) for delayedProcessing and
        windowBuffer (both in seconds on the queue)."""
        opts = part.queue.options
        delay = opts.get("delayedProcessing") or 0
        window = opts.get("windowBuffer") or 0
        if not delay and not window:
            return now, None
        limit = now - int(delay) * 1_000_000
        wake: Optional[int] = None
        if window and part.created_list:
            newest = part.created_list[-1]
            if newest > now - int(window) * 1_000_000:
                return -1, newest + int(window) * 1_000_000  # the whole partition waits
        if delay:
            i = bisect.bisect_right(part.created_list, limit)
            if i < len(part.created_list):
                wake = part.created_list[i] + int(delay) * 1_000_000
        return limit, wake

    def _available(self, part: Partition, row: Optional[Row], limit: int, now: int) -> List[Msg]:
        out: List[Msg] = []
        if limit <= 0:
            return out
        visible, _ = self._visible_until(part, now)
        msgs = part.messages
        i = row.cursor if row is not None else 0
        n = len(msgs)
        while i < n and len(out) < limit:
            m = msgs[i]
            if m.created > visible:
                break
            if not m.deleted:
                out.append(m)
            i += 1
        return out

    def _has_pending(self, part: Partition, row: Optional[Row], now: int) -> Tuple[bool, Optional[int]]:
        """(has a deliverable message past the cursor, time at which one may become deliverable)."""
        msgs = part.messages
        i = row.cursor if row is not None else 0
        for j in range(i, len(msgs)):
            if not msgs[j].deleted:
                visible, wake = self._visible_until(part, now)
                if msgs[j].created > visible:
                    return False, wake
                return True, None
        return False, None

    def _advance(self, row: Row, msg: Msg, now: int) -> None:
        # The real broker stores the acked message as the cursor (last_consumed_id): an ack of an
        # earlier message moves it BACK, and the messages after it are delivered again.
        row.cursor = msg.idx + 1
        row.last_consumed = now
        msg.partition.last_activity = now

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

    def _push_one(self, idx: int, it: dict, now: int, journal: Optional[Journal], touched: Set[str]) -> dict:
        return self.insert_message(idx, it["queue"], it.get("partition") or "Default",
                                   it.get("transactionId") or uuid4(), it.get("payload"), it.get("traceId"),
                                   now, journal, touched)

    def insert_message(self, idx: int, qname: str, pname: str, txid: str, payload: Any,
                       trace_id: Optional[str], now: int, journal: Optional[Journal], touched: Set[str]) -> dict:
        """Store one message (lock held), auto-creating its queue and partition; returns the
        push result item (``queued``, or ``duplicate`` of the stored original)."""
        q = self._get_or_create_queue(qname, now, journal)
        p = self._get_or_create_partition(q, pname, now, journal)
        existing = p.by_tx.get(txid)
        if existing is not None:
            return {"index": idx, "message_id": existing.id, "queueName": qname, "status": "duplicate",
                    "transaction_id": txid}
        m = Msg(uuid7(), txid, payload, now, trace_id, p, len(p.messages))
        p.messages.append(m)
        p.created_list.append(now)
        p.by_tx[txid] = m
        if journal is not None:
            journal.messages.append(m)
        touched.add(qname)
        return {"index": idx, "message_id": m.id, "partition_id": p.id, "queueName": qname,
                "status": "queued", "trace_id": m.trace_id, "transaction_id": txid}

    # ------------------------------------------------------------------ pop
    def pop(self, queue: str, partition: Optional[str], params: Dict[str, str],
            disconnected: Optional[Any] = None) -> Reply:
        """``GET /api/v1/pop/queue/{queue}[/partition/{partition}]``; long-polls when ``wait``."""
        if self.pop_maintenance:
            return 204, {"messages": [], "paused": True}
        group = params.get("consumerGroup") or QUEUE_MODE
        batch = max(1, _int_param(params.get("batch"), 1))
        wait = _bool_param(params.get("wait"))
        timeout_ms = _int_param(params.get("timeout"), 30000)
        nparts = 1 if partition is not None else max(1, _int_param(params.get("partitions"), 1))
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
                row.nacked_lease = None
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
            # Like ack_messages_v2: the acks of one call are applied in (partition, group, message)
            # order, so within one call the cursor only moves forward; results keep input order.
            for idx in sorted(range(len(items)), key=lambda i: self._ack_order(items[i])):
                it = items[idx]
                group = group_override if batch_route else it.get("consumerGroup")
                results[idx] = self._ack_one(idx, it, group or QUEUE_MODE, now, touched)
            for qn in touched:
                self._notify(qn)
        return 200, results

    def _ack_order(self, it: dict) -> Tuple[str, int]:
        pid = it.get("partitionId")
        p = self.partitions_by_id.get(pid) if isinstance(pid, str) else None
        txid = it.get("transactionId")
        m = p.by_tx.get(txid) if (p is not None and isinstance(txid, str)) else None
        return (pid if isinstance(pid, str) else "", m.idx if m is not None else -1)

    def _ack_one(self, idx: int, it: dict, group: str, now: int, touched: Set[str]) -> dict:
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
        if lease_id is not None:
            if row is not None and row.nacked_lease == lease_id and status in ("failed", "retry"):
                res["success"] = True
                res["leaseReleased"] = True
                return res
            if row is None or row.lease_id != lease_id or not self._lease_live(row, now):
                res["error"] = INVALID_LEASE
                return res
        if status not in ("completed", "success", "failed", "retry", "dlq"):
            return res
        touched.add(p.queue.name)
        if row is None:
            # Unfenced ack by a group that never read this partition: nothing to move.
            res["success"] = True
            res["leaseReleased"] = None
            return res
        live = self._lease_live(row, now)
        if status in ("completed", "success"):
            self._advance(row, m, now)
            row.total_consumed += 1
            res["success"] = True
            res["leaseReleased"] = self._count_ack(row, live)
            return res
        if status == "retry":
            if live:
                row.nacked_lease = row.lease_id
            self._release(row)
            res["success"] = True
            res["leaseReleased"] = True
            return res
        if status == "failed" and row.retry < int(p.queue.options.get("retryLimit") or 0):
            row.retry += 1
            if live:
                row.nacked_lease = row.lease_id
            self._release(row)
            res["success"] = True
            res["leaseReleased"] = True
            return res
        # failed with retries exhausted, or status dlq: move to the DLQ, step past it
        retry_count = row.retry if status == "failed" else 0
        err = it.get("error")
        if not isinstance(err, str) or not err:
            err = "Retries exhausted" if status == "failed" else "Moved to DLQ"
        self._to_dlq(m, group, err, retry_count, now)
        self._advance(row, m, now)
        row.retry = 0
        self._count_ack(row, live)
        res["success"] = True
        res["dlq"] = True
        res["leaseReleased"] = False
        return res

    def _count_ack(self, row: Row, live: bool) -> bool:
        if not live:
            self._release(row)
            row.retry = 0
            row.batches_consumed += 1
            return True
        row.acked += 1
        if row.acked >= row.batch_size:
            self._release(row)
            row.retry = 0
            row.batches_consumed += 1
            return True
        return False

    def _to_dlq(self, m: Msg, group: str, error: str, retry_count: int, now: int) -> None:
        p = m.partition
        self.dlq.append({"msg": m, "group": group, "error": error, "retry": retry_count, "failed": now,
                         "queue": p.queue.name, "partition": p})

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

    # ------------------------------------------------------------------ transaction
    def transaction(self, operations: List[Any]) -> Reply:
        """``POST /api/v1/transaction``: all-or-nothing pushes and acks."""
        tx_id = uuid4()
        journal = Journal()
        touched: Set[str] = set()
        with self.lock:
            self._journal = journal
            try:
                return self._transaction_locked(operations, tx_id, journal, touched)
            finally:
                self._journal = None

    def _transaction_locked(self, operations: List[Any], tx_id: str, journal: Journal, touched: Set[str]) -> Reply:
        results: List[dict] = []
        now = now_us()
        error: Optional[str] = None
        idx = 0
        for op in operations:
            op = op if isinstance(op, dict) else {}
            typ = op.get("type")
            if typ == "push":
                raw_items = op.get("items")
                items = raw_items if isinstance(raw_items, list) else []
                dup = False
                for it in items:
                    it = it if isinstance(it, dict) else {}
                    qn = it.get("queue")
                    if not isinstance(qn, str):
                        error = "Queue must be a string"
                        break
                    q = self.queues.get(qn)
                    p = q.partitions.get(it.get("partition") or "Default") if q is not None else None
                    txid = it.get("transactionId")
                    tid = it.get("traceId")
                    if tid is not None and not is_uuid(tid):
                        error = 'invalid input syntax for type uuid: "%s"' % (tid,)
                        break
                    if p is not None and isinstance(txid, str) and txid in p.by_tx:
                        dup = True
                        break
                    r = self._push_one(idx, it, now, journal, touched)
                    if r["status"] == "duplicate":
                        dup = True
                        break
                    results.append({"index": idx, "type": "push", "success": True,
                                    "transactionId": r["transaction_id"], "messageId": r["message_id"],
                                    "partitionId": r["partition_id"], "queueName": qn})
                    idx += 1
                if dup:
                    error = DUP_TX_ERROR
                if error:
                    results = []
                    break
            elif typ == "ack":
                r, err = self._tx_ack(idx, op, now, journal, touched)
                results.append(r)
                idx += 1
                if err is not None:
                    error = "ACK operation failed: " + err
                    break
            else:
                text = "Unknown operation type: %s" % (typ if isinstance(typ, str) else
                                                       ("null" if typ is None else str(typ)))
                results.append({"index": idx, "type": typ, "success": False, "error": text})
                error = text
                break
        if error is not None:
            self._rollback(journal)
            return 200, {"success": False, "error": error, "transactionId": tx_id, "results": results}
        for qn in touched:
            self._notify(qn)
        return 200, {"success": True, "transactionId": tx_id, "results": results}

    def _tx_ack(self, idx: int, op: dict, now: int, journal: Journal, touched: Set[str]) -> Tuple[dict, Optional[str]]:
        txid = op.get("transactionId")
        res = {"index": idx, "type": "ack", "success": False, "transactionId": txid, "error": None, "dlq": False}
        group = op.get("consumerGroup") or QUEUE_MODE
        status = op.get("status", "completed")
        if status is None:
            status = "completed"
        lease_id = op.get("leaseId") or None
        pid = op.get("partitionId")
        p = self.partitions_by_id.get(pid) if isinstance(pid, str) else None
        m = p.by_tx.get(txid) if (p is not None and isinstance(txid, str)) else None
        if m is None or m.deleted:
            res["error"] = NOT_FOUND
            return res, NOT_FOUND
        assert p is not None
        row = p.rows.get(group)
        if lease_id is not None:
            if row is None or row.lease_id != lease_id or not self._lease_live(row, now):
                res["error"] = INVALID_LEASE
                return res, INVALID_LEASE
        if not isinstance(status, str) or status not in ("completed", "success", "failed", "dlq"):
            return res, "Unknown error"
        journal.save_row(p, group)
        if row is None:
            row = Row(group, self._start_cursor(p, group), now)
            p.rows[group] = row
        live = self._lease_live(row, now)
        touched.add(p.queue.name)
        if status in ("failed", "dlq"):
            if journal.dlq_len is None:
                journal.dlq_len = len(self.dlq)
            err = op.get("error")
            self._to_dlq(m, group, err if isinstance(err, str) and err else "Unknown error", 0, now)
            self._advance(row, m, now)
            res["dlq"] = True
        else:
            self._advance(row, m, now)
            row.total_consumed += 1
        if live:
            self._count_ack(row, True)
        res["success"] = True
        return res, None

    def _rollback(self, journal: Journal) -> None:
        for m in reversed(journal.messages):
            p = m.partition
            if p.messages and p.messages[-1] is m:
                p.messages.pop()
                p.created_list.pop()
            p.by_tx.pop(m.txid, None)
        for p, group, snap in journal.rows.values():
            if snap is None:
                p.rows.pop(group, None)
            else:
                row = p.rows.get(group)
                if row is None:
                    row = Row(group, 0, 0)
                    p.rows[group] = row
                row.restore(snap)
        for p in reversed(journal.partitions):
            if not p.messages:
                p.queue.partitions.pop(p.name, None)
                self.partitions_by_id.pop(p.id, None)
        for q in reversed(journal.queues):
            if not q.partitions:
                self.queues.pop(q.name, None)
        if journal.dlq_len is not None:
            del self.dlq[journal.dlq_len:]
        for lease in journal.leases:
            self.leases[lease.id] = lease

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
