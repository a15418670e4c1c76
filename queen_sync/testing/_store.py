"""The embedded broker's store: its containers, the one lock, the per-queue conditions long
polls wait on, and the lock-held rules the routes share.

Those rules: queues and partitions are made on first use; a lease is live until it expires
(then its partition is claimable again, no retry counted) and is forgotten once fully
released; where a new consumer group's cursor starts (subscription metadata) and how an ack
moves it (to the acked message: an earlier one moves it back); what ``delayedProcessing`` /
``windowBuffer`` keep invisible; storing one pushed message (a duplicate ``transactionId``
answers ``duplicate``); counting an ack against its batch; moving a message to the DLQ. The
routes are in :mod:`._state` (and :mod:`._transactions`, :mod:`._streams`).
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from ._metrics import BrokerMetrics
from ._records import QUEUE_MODE, Journal, Lease, Msg, Partition, Queue, Row, StreamsStore
from ._util import uuid4, uuid7


class Store(object):
    """The broker store and its shared lock-held rules (see the module docstring)."""

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
        self.metrics = BrokerMetrics()  # request counters the dashboard routes read

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

    def _only_delayed(self, part: Partition, row: Optional[Row], now: int) -> bool:
        """Whether the partition has a message past the cursor that only delayedProcessing
        holds back (not windowBuffer, which holds the whole partition)."""
        if not part.queue.options.get("delayedProcessing") or self._visible_until(part, now)[0] == -1:
            return False  # no delay, or windowBuffer holds the whole partition
        i = row.cursor if row is not None else 0
        return any(not m.deleted for m in part.messages[i:])

    def _advance(self, row: Row, msg: Msg, now: int) -> None:
        # The real broker stores the acked message as the cursor (last_consumed_id): an ack of an
        # earlier message moves it BACK, and the messages after it are delivered again.
        row.cursor = msg.idx + 1
        row.last_consumed = now
        msg.partition.last_activity = now

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

    def _count_ack(self, row: Row, live: bool, reset_retry: bool = True) -> bool:
        """Count an ack against the partition's batch (a completed one, or a dead-lettering
        nack: ``reset_retry=False``, the broker leaves the retry count as it is); True when
        that releases the lease."""
        if not live:
            self._release(row)
            if reset_retry:
                row.retry = 0
            row.batches_consumed += 1
            return True
        row.acked += 1
        if row.acked >= row.batch_size:
            self._release(row)
            if reset_retry:
                row.retry = 0
            row.batches_consumed += 1
            return True
        return False

    def _to_dlq(self, m: Msg, group: str, error: str, retry_count: int, now: int) -> None:
        p = m.partition
        self.dlq.append({"msg": m, "group": group, "error": error, "retry": retry_count, "failed": now,
                         "queue": p.queue.name, "partition": p})
