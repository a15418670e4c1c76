"""The floor of the client benchmarks: the least a Python client can do for the same requests.

A minimal client on ``urllib3`` + ``orjson`` (the two runtime dependencies of queen_sync):
no validation, no retries, no builders. What it still does is what any client must:

- push: the request bodies are built **before the clock** (ids minted, ``orjson.dumps``), then
  each call is one ``POST /api/v1/push``, its reply decoded with ``orjson.loads`` and its
  verdicts counted (``queued`` / ``duplicate``);
- consume: ``concurrency`` threads, each looping ``GET /api/v1/pop/queue/{q}`` (long poll,
  ``batch``, ``consumerGroup``), ``orjson.loads`` of the reply, the handler (a no-op), and one
  ack request for the messages popped (``POST /api/v1/ack`` for one, ``/ack/batch`` for more)
  whose reply is decoded and its verdicts counted.

The CPU it spends per message is the baseline the benchmarks divide by ("x floor").
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from typing import Any, Dict, List, Tuple
from urllib.parse import urlsplit

import orjson
import urllib3

__all__ = ["FloorClient"]

_JSON = {"Content-Type": "application/json"}


class FloorClient:
    """One connection pool to ``url`` (``maxsize`` connections, blocking when all are busy)."""

    def __init__(self, url: str, maxsize: int = 8) -> None:
        parts = urlsplit(url)
        self.pool = urllib3.HTTPConnectionPool(
            parts.hostname or "127.0.0.1", parts.port or 80, maxsize=maxsize, block=True, retries=False,
            timeout=urllib3.Timeout(connect=5.0, read=60.0),
        )

    def close(self) -> None:
        self.pool.close()

    # ------------------------------------------------------------------ push

    @staticmethod
    def push_documents(queue: str, items: List[Dict[str, Any]], calls: int) -> List[Dict[str, Any]]:
        """``calls`` push bodies of ``items`` (each ``{"data": ...}``) with fresh ids, not yet
        encoded: the same wire items as queen_sync sends for ``queue(queue).push(items)``."""
        return [
            {"items": [{"queue": queue, "payload": it["data"], "transactionId": str(uuid.uuid4())} for it in items]}
            for _ in range(calls)
        ]

    @staticmethod
    def push_bodies(queue: str, items: List[Dict[str, Any]], calls: int) -> List[bytes]:
        """:meth:`push_documents`, encoded (``orjson.dumps``). Build before the clock."""
        return [orjson.dumps(doc) for doc in FloorClient.push_documents(queue, items, calls)]

    def push(self, body: bytes, expected: int) -> int:
        """One push request; returns the number of items stored (queued or duplicate)."""
        resp = self.pool.urlopen("POST", "/api/v1/push", body=body, headers=_JSON)
        if resp.status != 200:
            raise RuntimeError("floor push: HTTP %d %r" % (resp.status, resp.data[:200]))
        results = orjson.loads(resp.data)
        ok = sum(1 for r in results if r.get("status") in ("queued", "duplicate"))
        if ok != expected:
            raise RuntimeError("floor push: %d of %d stored: %r" % (ok, expected, results[:3]))
        return ok

    def push_run(self, bodies_per_thread: List[List[Any]], batch: int) -> Tuple[float, float]:
        """Send every thread's bodies from its own thread; returns ``(wall, cpu)`` seconds.
        A body that is not yet ``bytes`` (a :meth:`push_documents` document) is encoded with
        ``orjson.dumps`` right before its request, inside the clock."""
        barrier = threading.Barrier(len(bodies_per_thread) + 1)

        def work(bodies: List[Any]) -> None:
            barrier.wait()
            for body in bodies:
                self.push(body if isinstance(body, bytes) else orjson.dumps(body), batch)

        threads = [threading.Thread(target=work, args=(b,)) for b in bodies_per_thread]
        for t in threads:
            t.start()
        gc.collect()  # the same collector state at every client's start (bench_push.py docstring)
        barrier.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        for t in threads:
            t.join()
        return time.perf_counter() - t0, time.process_time() - c0

    # ------------------------------------------------------------------ consume

    def consume(self, queue: str, group: str, concurrency: int, batch: int, messages: int) -> Tuple[float, float, int]:
        """Pop and ack until ``messages`` were acked; returns ``(wall, cpu, acked)``, both
        times taken when the last ack was counted (threads still in a long poll then are
        not waited for)."""
        path = "/api/v1/pop/queue/%s" % queue
        fields = {"batch": str(batch), "wait": "true", "timeout": "1000", "consumerGroup": group}
        lock = threading.Lock()
        acked = [0]
        end = [0.0, 0.0]
        errors: List[BaseException] = []

        def work() -> None:
            try:
                while True:
                    with lock:
                        if acked[0] >= messages:
                            return
                    resp = self.pool.request("GET", path, fields=fields)
                    if resp.status == 204 or not resp.data:
                        continue
                    doc = orjson.loads(resp.data)
                    msgs = doc.get("messages") or []
                    if not msgs:
                        continue
                    for _m in msgs:  # the handler: a no-op
                        pass
                    if len(msgs) == 1:
                        m = msgs[0]
                        body = {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                "status": "completed", "consumerGroup": group}
                        if m.get("leaseId"):
                            body["leaseId"] = m["leaseId"]
                        reply = self.pool.urlopen("POST", "/api/v1/ack", body=orjson.dumps(body), headers=_JSON)
                    else:
                        acks = []
                        for m in msgs:
                            a = {"transactionId": m["transactionId"], "partitionId": m["partitionId"], "status": "completed"}
                            if m.get("leaseId"):
                                a["leaseId"] = m["leaseId"]
                            acks.append(a)
                        reply = self.pool.urlopen(
                            "POST", "/api/v1/ack/batch",
                            body=orjson.dumps({"acknowledgments": acks, "consumerGroup": group}), headers=_JSON,
                        )
                    verdicts = orjson.loads(reply.data)
                    if isinstance(verdicts, dict):
                        verdicts = [verdicts]
                    ok = sum(1 for v in verdicts if v.get("success", True))
                    with lock:
                        acked[0] += ok
                        if acked[0] >= messages and not end[0]:
                            end[0], end[1] = time.perf_counter(), time.process_time()
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(concurrency)]
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not end[0]:
            end[0], end[1] = time.perf_counter(), time.process_time()
        wall, cpu = end[0] - t0, end[1] - c0
        if errors:
            raise RuntimeError("floor consume failed: %r" % (errors[0],))
        return wall, cpu, acked[0]
