#!/usr/bin/env python
"""Streams throughput: queen_sync's blocking runner against the official async runtime of
``queen-mq`` (0.15.0), in the same run, against the same broker, on the same events.

Usage::

    python benchmarks/bench_streams.py                  # starts `python -m queen_sync.testing`
    QUEEN_URL=http://host:6632 python benchmarks/bench_streams.py
    python benchmarks/bench_streams.py --events 2000    # quicker (default 6000 per cell)

Two pipelines, each run by both clients on its own fresh source queue holding ``--events``
events over ``--partitions`` partitions (default 8), with ``batch_size=200`` and
``max_partitions=4`` for both:

- (a) tumbling aggregate: ``window_tumbling(seconds=1, event_time=..., idle_flush_ms=0)``
  + ``aggregate(count, sum, max)`` + ``.to(sink)`` (state read + upserts every cycle);
- (b) token-bucket gate: ``gate(token_bucket_gate(capacity=1e9, refill_per_sec=1e9))`` +
  ``.to(sink)`` (a bucket that never denies: the gate's cost, not the rate limit).

The time runs from ``run()`` until the runner's own ``metrics()["messagesTotal"]`` reaches
the event count (registration included for both). events/s is wall clock; CPU is this
process's CPU time (``time.process_time``: all its threads) per event, in microseconds: the
broker runs in another process and is not counted. Ratios are queen_sync / queen-mq for
events/s (higher is better) and queen-mq / queen_sync for CPU (higher is better). The
embedded broker is Python, so absolute numbers are bounded by it; the ratios are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import sys
import time
import uuid
from typing import Any, Callable, Dict, Tuple

from _common import print_header, queen_mq, start_broker, stop_broker  # puts the checkout on sys.path

import urllib3

from queen_sync import Queen, Stream
from queen_sync.streams import token_bucket_gate

T0 = 1796115000000
TIMEOUT_S = 300.0


def _fill(q: Queen, src: str, events: int, partitions: int) -> None:
    per = events // partitions
    for p in range(partitions):
        items = [{"data": {"ts": T0 + i * 10, "x": i % 7}} for i in range(per)]
        for off in range(0, per, 1000):
            q.queue(src).partition("p%02d" % p).push(items[off:off + 1000])


def _build(kind: str, stream: Any, sink: Any, gate_factory: Callable[..., Any]) -> Any:
    if kind == "tumbling":
        return (stream.window_tumbling(seconds=1, event_time=lambda m: m["data"]["ts"], idle_flush_ms=0)
                .aggregate({"count": lambda v: 1, "sum": lambda v: v["x"], "max": lambda v: v["x"]})
                .to(sink))
    return stream.gate(gate_factory(capacity=1e9, refill_per_sec=1e9)).to(sink)


def run_ours(url: str, kind: str, src: str, events: int) -> Tuple[float, float]:
    with Queen(url) as q:
        cpu0, t0 = time.process_time(), time.perf_counter()
        runner = _build(kind, Stream.from_(q.queue(src)), q.queue(src + "-out-ours"), token_bucket_gate).run(
            "bench-ours-" + src, batch_size=200, max_partitions=4, max_wait_millis=500)
        deadline = time.monotonic() + TIMEOUT_S
        while runner.metrics()["messagesTotal"] < events and time.monotonic() < deadline:
            time.sleep(0.002)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        runner.stop()
        if runner.metrics()["messagesTotal"] < events:
            raise SystemExit("queen_sync runner timed out: %s" % runner.metrics())
    return wall, cpu


def run_official(url: str, kind: str, src: str, events: int) -> Tuple[float, float]:
    from queen.streams import Stream as OStream
    from queen.streams import token_bucket_gate as o_gate

    async def main() -> Tuple[float, float]:
        q = queen_mq.Queen(url=url)
        try:
            cpu0, t0 = time.process_time(), time.perf_counter()
            runner = await _build(kind, OStream.from_(q.queue(src)), q.queue(src + "-out-official"), o_gate).run(
                query_id="bench-official-" + src, url=url, batch_size=200, max_partitions=4, max_wait_millis=500)
            deadline = time.monotonic() + TIMEOUT_S
            while runner.metrics()["messagesTotal"] < events and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            await runner.stop()
            if runner.metrics()["messagesTotal"] < events:
                raise SystemExit("queen-mq runner timed out: %s" % runner.metrics())
            return wall, cpu
        finally:
            with contextlib.redirect_stdout(io.StringIO()):  # its close() prints
                await q.close()

    return asyncio.run(main())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=6000, help="events per cell (default 6000)")
    ap.add_argument("--partitions", type=int, default=8, help="source partitions (default 8)")
    args = ap.parse_args()
    logging.getLogger("queen").setLevel(logging.CRITICAL)
    if queen_mq is None:
        print("queen-mq is not installed: pip install 'queen-mq==0.15.0' (the bench extra)")
        return 2
    url, proc = start_broker()
    try:
        r = urllib3.request("POST", url + "/streams/v1/queries", body=b"{}", timeout=5.0, retries=False)
        if r.status == 404:
            print("the broker at %s has no /streams/v1 routes" % url)
            return 2
        events = (args.events // args.partitions) * args.partitions
        print("broker %s, %d events over %d partitions per cell, batch_size=200, max_partitions=4\n"
              % (url, events, args.partitions))
        header = "%-10s %-11s %10s %10s %12s" % ("pipeline", "client", "events/s", "wall s", "CPU us/event")
        print_header(header)
        ratios: Dict[str, Tuple[float, float]] = {}
        with Queen(url) as q:
            for kind in ("tumbling", "gate"):
                res = {}
                for who, fn in (("queen_sync", run_ours), ("queen-mq", run_official)):
                    src = "bench-streams-%s-%s-%s" % (kind, who.replace("_", ""), uuid.uuid4().hex[:8])
                    _fill(q, src, events, args.partitions)
                    wall, cpu = fn(url, kind, src, events)
                    res[who] = (events / wall, cpu * 1e6 / events)
                    print("%-10s %-11s %10.0f %10.2f %12.1f" % (kind, who, events / wall, wall, cpu * 1e6 / events))
                ratios[kind] = (res["queen_sync"][0] / res["queen-mq"][0], res["queen-mq"][1] / res["queen_sync"][1])
        print()
        for kind, (speed, cpu) in ratios.items():
            print("%-10s queen_sync vs queen-mq: %.2fx events/s, %.2fx less CPU per event" % (kind, speed, cpu))
    finally:
        stop_broker(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
