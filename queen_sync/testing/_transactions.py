"""``POST /api/v1/transaction`` of the embedded broker: pushes and acks, all or nothing.

The whole transaction runs under the store lock with a :class:`~._records.Journal` recording
what to undo; the first failing operation rolls everything back (:meth:`_rollback`, also used
by the Streams cycle) and the reply names the error as the real broker does.
"""

from __future__ import annotations

from typing import Any, List, Optional, Set, Tuple

from ._records import INVALID_LEASE, NOT_FOUND, QUEUE_MODE, Journal, Reply, Row
from ._store import Store
from ._util import is_uuid, now_us, uuid4

DUP_TX_ERROR = 'duplicate key value violates unique constraint "messages_partition_transaction_unique"'


class TransactionalStore(Store):
    """The store with its all-or-nothing transaction route."""

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
                    # as the real broker: the results of the items stored before it stay
                    # (an item of an earlier op, or of this one), though all is rolled back
                    error = DUP_TX_ERROR
                    break
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
