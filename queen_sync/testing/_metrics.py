"""The embedded broker's request and message counters: its stand-in for the real broker's worker
metrics (``queen.worker_metrics``, ``queue_lag_metrics`` and ``worker_metrics_summary``).

The real broker counts in its event loop, from the replies of its stored procedures, and flushes
one row per minute; ``/api/v1/status``, ``/api/v1/resources/overview`` and
``/api/v1/analytics/worker-metrics`` read those rows. :class:`BrokerMetrics` counts the same
things from the same replies (the router hands it every reply) into per-minute buckets, kept for
a day, and running totals; here the current minute is visible at once, where the real broker
shows it after its minute flush.

What counts (as in the real broker): a push request and its items (duplicates included); a pop
request, every message it hands out and its age at delivery (lag); an ack request (``/ack`` and
``/ack/batch``), its items and how many of them answered ``success`` (a nack that was accepted is
a success: "failed" means the ack itself was refused); a DLQ move reported by an ack, a
transaction or a Streams cycle; a pop with ``autoAck`` counts as an ack of its messages, a Streams
cycle's ack and sink pushes count as ack and push. Transaction ops count as neither.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ._util import now_us, parse_ts_us

MINUTE_US = 60 * 1_000_000
KEEP_MINUTES = 24 * 60

#: Counter names of one bucket (global and per queue share them).
FIELDS = ("push_req", "push_msg", "pop_req", "pop_msg", "ack_req", "ack_msg", "ack_ok", "ack_fail", "dlq",
          "lag_sum_ms", "lag_max_ms")


def _new() -> Dict[str, int]:
    return dict.fromkeys(FIELDS, 0)


class BrokerMetrics(object):
    """Thread-safe counters; see the module docstring. Times are epoch microseconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals = _new()
        # minute start -> (global bucket, {queue name: bucket})
        self._buckets: "OrderedDict[int, Tuple[Dict[str, int], Dict[str, Dict[str, int]]]]" = OrderedDict()

    # ------------------------------------------------------------------ recording
    def _bucket(self, now: int) -> Tuple[Dict[str, int], Dict[str, Dict[str, int]]]:
        minute = now - now % MINUTE_US
        b = self._buckets.get(minute)
        if b is None:
            b = (_new(), {})
            self._buckets[minute] = b
            while len(self._buckets) > KEEP_MINUTES:
                self._buckets.popitem(last=False)
        return b

    def _add(self, now: int, queue: Optional[str], **counts: int) -> None:
        glob, per_queue = self._bucket(now)
        q = None
        if queue:
            q = per_queue.get(queue)
            if q is None:
                q = per_queue[queue] = _new()
        for k, v in counts.items():
            if k == "lag_max_ms":
                glob[k] = max(glob[k], v)
                self.totals[k] = max(self.totals[k], v)
                if q is not None:
                    q[k] = max(q[k], v)
                continue
            glob[k] += v
            self.totals[k] += v
            if q is not None:
                q[k] += v

    def observe(self, method: str, path: str, status: int, reply: Any) -> None:
        """Count one answered request from its reply (called by the router for every request)."""
        if status != 200:
            return  # 400s, the 201 of an empty push, the 204 of pop maintenance: never counted
        now = now_us()
        with self._lock:
            if method == "POST" and path == "/api/v1/push" and isinstance(reply, list):
                if any(isinstance(r, dict) and r.get("status") in ("queued", "duplicate") for r in reply):
                    self._push(now, reply)
            elif method == "GET" and path.startswith("/api/v1/pop/") and isinstance(reply, dict):
                self._pop(now, path, reply)
            elif method == "POST" and path in ("/api/v1/ack", "/api/v1/ack/batch") and isinstance(reply, list):
                self._ack(now, reply)
            elif method == "POST" and path == "/api/v1/transaction" and isinstance(reply, dict):
                for r in reply.get("results") or ():
                    if isinstance(r, dict) and r.get("dlq") is True:
                        self._add(now, None, dlq=1)
            elif method == "POST" and path == "/streams/v1/cycle" and isinstance(reply, dict):
                self._cycle(now, reply)

    def _push(self, now: int, results: List[Any]) -> None:
        self._add(now, None, push_req=1, push_msg=len(results))
        by_queue: Dict[str, int] = {}
        for r in results:
            if isinstance(r, dict) and isinstance(r.get("queueName"), str):
                by_queue[r["queueName"]] = by_queue.get(r["queueName"], 0) + 1
        for qn, n in by_queue.items():
            q = self._bucket(now)[1].setdefault(qn, _new())
            q["push_req"] += 1
            q["push_msg"] += n

    def _pop(self, now: int, path: str, reply: Dict[str, Any]) -> None:
        queue = reply.get("queue")
        if not isinstance(queue, str):
            queue = path[len("/api/v1/pop/queue/"):].split("/")[0]
        self._add(now, None, pop_req=1)
        msgs = reply.get("messages") or []
        lag_sum = lag_max = 0
        seen: Dict[Any, int] = {}  # one batch's messages mostly share a createdAt: parse it once
        for m in msgs:
            text = m.get("createdAt") if isinstance(m, dict) else None
            lag = seen.get(text)
            if lag is None:
                created = parse_ts_us(text)
                lag = seen[text] = max(0, (now - created) // 1000) if created is not None else 0
            lag_sum += lag
            lag_max = max(lag_max, lag)
        if msgs:
            self._add(now, queue, pop_msg=len(msgs), lag_sum_ms=lag_sum, lag_max_ms=lag_max)
        if msgs and reply.get("leaseId") == "":  # autoAck: the pop is its own ack
            self._add(now, queue, ack_req=1, ack_msg=len(msgs), ack_ok=len(msgs))

    def _ack(self, now: int, results: List[Any]) -> None:
        ok = sum(1 for r in results if isinstance(r, dict) and r.get("success") is True)
        dlq = sum(1 for r in results if isinstance(r, dict) and r.get("dlq") is True)
        self._add(now, None, ack_req=1, ack_msg=len(results), ack_ok=ok, ack_fail=len(results) - ok, dlq=dlq)
        by_queue: Dict[str, List[int]] = {}
        for r in results:
            if isinstance(r, dict) and isinstance(r.get("queueName"), str):
                e = by_queue.setdefault(r["queueName"], [0, 0])
                e[0 if r.get("success") is True else 1] += 1
        for qn, (s, f) in by_queue.items():
            q = self._bucket(now)[1].setdefault(qn, _new())
            q["ack_req"] += 1
            q["ack_ok"] += s
            q["ack_fail"] += f

    def _cycle(self, now: int, reply: Dict[str, Any]) -> None:
        ack = reply.get("ack_result")
        queue = reply.get("queueName") if isinstance(reply.get("queueName"), str) else None
        if isinstance(ack, dict) and ack.get("success") is True:
            count = ack.get("count")
            n = count if isinstance(count, int) else 1
            self._add(now, queue, ack_req=1, ack_msg=n, ack_ok=n, dlq=1 if ack.get("dlq") is True else 0)
        pushes = reply.get("push_results")
        if isinstance(pushes, list) and pushes:
            self._push(now, pushes)

    # ------------------------------------------------------------------ reading
    def snapshot(self) -> Dict[str, int]:
        """The running totals (``worker_metrics_summary``)."""
        with self._lock:
            return dict(self.totals)

    def buckets(self, frm: int, to: int) -> List[Tuple[int, Dict[str, int], Dict[str, Dict[str, int]]]]:
        """Copies of the minute buckets starting within ``[frm, to]``, oldest first."""
        with self._lock:
            return [(t, dict(g), {k: dict(v) for k, v in qs.items()})
                    for t, (g, qs) in self._buckets.items() if frm <= t <= to]

    def recent(self, minutes: int) -> Dict[str, int]:
        """Global counters summed over the buckets of the last ``minutes`` minutes."""
        now = now_us()
        out = _new()
        for _, g, _ in self.buckets(now - minutes * MINUTE_US, now):
            for k in FIELDS:
                out[k] = max(out[k], g[k]) if k == "lag_max_ms" else out[k] + g[k]
        return out


def bucket_minutes(frm: int, to: int) -> int:
    """The real broker's time-series bucket width (minutes) for a window ``[frm, to]``."""
    minutes = (to - frm) / MINUTE_US
    for limit, width in ((60, 1), (360, 5), (1440, 15), (10080, 60)):
        if minutes <= limit:
            return width
    return 360


def regroup(rows: Iterable[Tuple[int, Dict[str, int]]], width: int) -> List[Tuple[int, Dict[str, int]]]:
    """Sum minute buckets into ``width``-minute buckets (aligned like the real broker: the minute
    of the hour modulo ``width``), newest first."""
    acc: Dict[int, Dict[str, int]] = {}
    for t, b in rows:
        minute_of_hour = (t // MINUTE_US) % 60
        start = t - (minute_of_hour % width) * MINUTE_US
        e = acc.get(start)
        if e is None:
            e = acc[start] = _new()
        for k in FIELDS:
            e[k] = max(e[k], b[k]) if k == "lag_max_ms" else e[k] + b[k]
    return sorted(acc.items(), key=lambda kv: kv[0], reverse=True)
