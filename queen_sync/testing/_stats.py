"""Message counts of the embedded broker's store, computed the way the real broker's statistics
job computes them (``queen.compute_partition_stats_v3`` and the ``aggregate_*_stats`` procedures),
plus the read-only views of the store that the admin routes share.

The real broker keeps one statistics row per (partition, consumer group) and refreshes it in the
background; the embedded broker computes the same numbers from its state whenever asked, so they
are always fresh (what the real broker shows after ``POST /api/v1/stats/refresh``). For one
(partition, group) row (a partition nobody has read yet gets one row with everything pending):

- ``pending``: the stored messages past the group's cursor;
- ``processing``: while the group holds a live lease, the leased batch minus what it acked so far
  (at most ``pending``);
- ``deadLetter``: the group's DLQ rows of that partition;
- ``total``: the partition's stored messages (or more, when the group consumed more than that);
- ``completed``: ``total - pending - deadLetter``.

A partition reports the largest of each count over its groups (the slowest group's view); a queue
sums its partitions; a namespace or task sums its queues; the system sums every queue.
Lock held by the caller for every function that reads the store.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ._records import QUEUE_MODE, Msg, Partition, Queue, Row

Reply = Tuple[int, Any]
COUNTS = ("total", "pending", "processing", "completed", "deadLetter")


def pg_int(x: float) -> int:
    """PostgreSQL's ``numeric::integer``: round half away from zero."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def live_lease_expiry(st: Any, row: Optional[Row], now: int) -> Optional[int]:
    """Expiry (epoch us) of the row's lease while it is live, else None."""
    if row is None or row.lease_id is None:
        return None
    lease = st.leases.get(row.lease_id)
    if lease is None or lease.expires <= now:
        return None
    return lease.expires


def pending_after(p: Partition, row: Optional[Row]) -> List[Msg]:
    """The stored messages of ``p`` past the row's cursor (all of them without a row)."""
    start = row.cursor if row is not None else 0
    return [m for m in p.messages[start:] if not m.deleted]


def bus_rows(p: Partition) -> Dict[str, Row]:
    """The consumer-group rows of ``p`` (queue mode left out)."""
    return {g: r for g, r in p.rows.items() if g != QUEUE_MODE}


def dlq_counts(st: Any) -> "Counter[Tuple[int, str]]":
    """DLQ rows per (id of partition, consumer group)."""
    return Counter((id(d["partition"]), d["group"]) for d in st.dlq)


def _newest(p: Partition) -> Optional[int]:
    for m in reversed(p.messages):
        if not m.deleted:
            return m.created
    return None


def row_stats(st: Any, p: Partition, group: str, row: Optional[Row], now: int,
              dlq: "Counter[Tuple[int, str]]") -> Dict[str, Any]:
    """The statistics row of (``p``, ``group``); ``row`` None = nobody has read ``p`` yet."""
    live = p.live_count()
    if row is None:
        dead = sum(n for (pid, _), n in dlq.items() if pid == id(p))
        return {"total": live, "pending": max(0, live - dead), "processing": 0, "completed": 0,
                "deadLetter": dead, "oldest": _newest(p), "newest": _newest(p)}
    pending = len(pending_after(p, row))
    processing = 0
    if live_lease_expiry(st, row, now) is not None:
        processing = min(max(0, row.batch_size - row.acked), pending)
    dead = dlq.get((id(p), group), 0)
    total = max(live, row.total_consumed + pending)
    oldest = None
    if pending and row.cursor > 0:
        oldest = p.messages[row.cursor - 1].created  # the real broker's "oldest pending": the cursor
    return {"total": total, "pending": pending, "processing": processing,
            "completed": max(0, total - pending - dead), "deadLetter": dead, "oldest": oldest,
            "newest": _newest(p)}


def partition_stats(st: Any, p: Partition, now: int, dlq: "Counter[Tuple[int, str]]") -> Dict[str, Any]:
    """One partition's counts: the largest over its consumer groups."""
    rows = [row_stats(st, p, g, r, now, dlq) for g, r in p.rows.items()] or \
        [row_stats(st, p, QUEUE_MODE, None, now, dlq)]
    out: Dict[str, Any] = {k: max(r[k] for r in rows) for k in COUNTS}
    olds = [r["oldest"] for r in rows if r["oldest"] is not None]
    out["oldest"] = max(olds) if olds else None
    out["newest"] = rows[0]["newest"]
    return out


def queue_stats(st: Any, q: Queue, now: int, dlq: "Counter[Tuple[int, str]]") -> Dict[str, Any]:
    """A queue's counts (sums over its partitions), partition count and lag figures."""
    parts = [partition_stats(st, p, now, dlq) for p in q.partitions.values()]
    out: Dict[str, Any] = {k: sum(s[k] for s in parts) for k in COUNTS}
    out["partitions"] = len(parts)
    lags = [(now - s["oldest"]) / 1e6 for s in parts if s["oldest"] is not None]
    out["avgLagSeconds"] = pg_int(sum(lags) / len(lags)) if lags else 0
    out["maxLagSeconds"] = pg_int(max(lags)) if lags else 0
    out["avgOffsetLag"] = pg_int(sum(s["pending"] for s in parts) / len(parts)) if parts else 0
    out["maxOffsetLag"] = max((s["pending"] for s in parts), default=0)
    return out


def all_queue_stats(st: Any, now: int) -> Dict[str, Dict[str, Any]]:
    """``queue_stats`` of every queue, by queue name."""
    dlq = dlq_counts(st)
    return {q.name: queue_stats(st, q, now, dlq) for q in st.queues.values()}


def sum_stats(stats: Iterable[Dict[str, Any]]) -> Dict[str, int]:
    """Counts summed over queue statistics."""
    rows = list(stats)
    return {k: sum(s[k] for s in rows) for k in COUNTS}


def median(values: List[int]) -> float:
    """PostgreSQL's ``PERCENTILE_CONT(0.5)`` (0 for no values)."""
    if not values:
        return 0
    v = sorted(values)
    mid = (len(v) - 1) / 2.0
    lo, hi = int(mid), min(int(mid) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (mid - lo)


def system_stats(st: Any, per_queue: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The system row: sums over the queues, lag and offset figures over the queues."""
    qs = list(per_queue.values())
    out: Dict[str, Any] = sum_stats(qs)
    out["partitions"] = sum(len(q.partitions) for q in st.queues.values())
    out["avgLagSeconds"] = pg_int(sum(s["avgLagSeconds"] for s in qs) / len(qs)) if qs else 0
    out["maxLagSeconds"] = max((s["maxLagSeconds"] for s in qs), default=0)
    out["medianLagSeconds"] = pg_int(median([s["maxLagSeconds"] for s in qs]))
    out["avgOffsetLag"] = pg_int(sum(s["pending"] for s in qs) / len(qs)) if qs else 0
    out["maxOffsetLag"] = max((s["pending"] for s in qs), default=0)
    return out
