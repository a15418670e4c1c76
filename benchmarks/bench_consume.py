#!/usr/bin/env python
"""Consume throughput and client CPU: queen_sync's thread-pool consumer against the official
async client ``queen-mq`` (0.15.0) and the floor (a minimal urllib3 + orjson client,
``benchmarks/_floor.py``), in the same run, against the same broker, on the same messages.

Usage::

    python benchmarks/bench_consume.py                  # starts `python -m queen_sync.testing`
    QUEEN_URL=http://host:6632 python benchmarks/bench_consume.py
    python benchmarks/bench_consume.py --messages 500 --repeats 1   # quicker
    python benchmarks/bench_consume.py --concurrency 4 --batch 100     # one cell

For every cell (concurrency 1 / 4 / 16 × batch 1 / 100) a fresh queue gets ``--messages``
messages (default: 200 × batch, at least 2000: 20000 at batch 100, so that even the floor
runs for about a second) spread over ``--partitions`` partitions (default 16). Each client
then consumes all of them in its own consumer group (so all see the same messages), with a
no-op handler and auto-ack, and the long-poll wait on. This is done ``--repeats`` times
(default 9; a fresh consumer group each time, the three clients taking turns so that a busy
spell of the machine hits them alike: one round is one run of each, and the order of the
three rotates from round to round, because a client run right after another costs a few per
cent more CPU than one run first) and the table shows medians over the rounds: each
client's median msg/s and CPU per message, and the median of the rounds' ratios. Not the best run: on two cores shared with the broker a consumer's CPU
per message varies by ±25% from one run to the next, the floor's as much as ours, while
the instructions it runs do not (``valgrind --tool=callgrind`` counts the same each run): the
spread is thread wake-ups and GIL hand-overs meeting the broker's work differently, not noise
that only adds. The best of a few such runs is a lucky draw of each client; the median of
paired rounds is the steadier ratio. ``--pin`` takes much of that interplay out: the
broker subprocess runs on the last CPU and this process on the others (Linux; measure the
client with it, then without, as users run it). The clients:

- queen_sync: ``queue(q).group(g).concurrency(c).batch(b).limit(N).consume(handler)``; the
  time is the whole call (it returns once the last message is acked);
- queen-mq: ``await queue(q).group(g).concurrency(c).batch(b).timeout_millis(1000)
  .consume(handler, signal=ev)`` (its ``limit`` counts per worker, so the handler sets the
  signal at the N-th message); the time runs until that N-th handler call (the last acks
  are not included, which favours queen-mq slightly).

- floor: ``concurrency`` threads looping pop (same long poll, batch and its own group) →
  no-op handler → one ack request for what was popped, replies decoded with orjson and
  verdicts counted; the time runs until the N-th ack.

msg/s is wall clock; ``us/msg`` is this process's CPU time (``time.process_time()``: the
broker runs in another process) per message; ``xfl`` is the median over the rounds of a
client's CPU per message divided by the floor's in the same round (lower is better, 1.00 is
the floor); ``ratio`` the median of queen_sync / queen-mq msg/s per round (higher is
better); ``spread`` the lowest and highest of queen_sync's per-round ``xfl``. The embedded
broker is Python, so absolute numbers are bounded by it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import logging
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from _common import median, pin_apart, print_header, queen_mq, run_rounds, start_broker, stop_broker  # puts the checkout on sys.path
from _floor import FloorClient

import queen_sync
from queen_sync import Queen


def fill(q: Queen, queue: str, messages: int, partitions: int) -> None:
    q.queue(queue).create()
    per = [messages // partitions + (1 if p < messages % partitions else 0) for p in range(partitions)]
    for p, n in enumerate(per):
        for start in range(0, n, 500):
            chunk = [{"data": {"p": p, "i": i, "order": "ord-%06d" % i}} for i in range(start, min(n, start + 500))]
            q.queue(queue).partition("p%02d" % p).push(chunk)


def run_ours(q: Queen, queue: str, concurrency: int, batch: int, messages: int, group: str) -> Tuple[float, float]:
    count = [0]
    lock = threading.Lock()

    def handler(m: Any) -> None:
        with lock:
            count[0] += len(m) if isinstance(m, list) else 1

    gc.collect()  # the same collector state at every client's start (as bench_push.py)
    t0, c0 = time.perf_counter(), time.process_time()
    res = (
        q.queue(queue).group(group).concurrency(concurrency).batch(batch).limit(messages)
        .idle_millis(30000).consume(handler)
    )
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    if res.handled != messages or res.acked != messages or count[0] != messages:
        raise SystemExit("queen_sync consumed %r (handler saw %d), expected %d" % (res, count[0], messages))
    return messages / took, cpu / messages * 1e6


async def _official(url: str, queue: str, concurrency: int, batch: int, messages: int, group: str) -> Tuple[float, float]:
    done = asyncio.Event()
    count = [0]
    t_end = [0.0]

    async def handler(m: Any) -> None:
        count[0] += len(m) if isinstance(m, list) else 1
        if count[0] >= messages and not done.is_set():
            t_end[0] = time.perf_counter()
            done.set()

    c_end = [0.0]

    async def handler_cpu(m: Any) -> None:
        await handler(m)
        if done.is_set() and not c_end[0]:
            c_end[0] = time.process_time()

    async with queen_mq.Queen(url) as q:
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        task = asyncio.ensure_future(
            q.queue(queue).group(group).concurrency(concurrency).batch(batch).timeout_millis(1000)
            .consume(handler_cpu, signal=done)
        )
        await asyncio.wait_for(done.wait(), timeout=600)
        await asyncio.wait_for(task, timeout=60)
    if count[0] < messages:
        raise SystemExit("queen-mq consumed %d, expected %d" % (count[0], messages))
    return messages / (t_end[0] - t0), (c_end[0] - c0) / messages * 1e6


def run_official(url: str, queue: str, concurrency: int, batch: int, messages: int, group: str) -> Tuple[float, float]:
    with contextlib.redirect_stdout(io.StringIO()):  # it prints on some paths
        return asyncio.run(_official(url, queue, concurrency, batch, messages, group))


def run_floor(url: str, queue: str, concurrency: int, batch: int, messages: int, group: str) -> Tuple[float, float, int]:
    floor = FloorClient(url, maxsize=max(8, concurrency))
    try:
        wall, cpu, acked = floor.consume(queue, group, concurrency, batch, messages)
    finally:
        floor.close()
    if acked < messages:
        raise SystemExit("floor consumed %d, expected %d" % (acked, messages))
    return wall, cpu, acked


def cell(q: Queen, url: str, queue: str, concurrency: int, batch: int, messages: int,
         repeats: int) -> Dict[str, Tuple[float, ...]]:
    """``repeats`` rounds of floor, queen_sync and queen-mq on ``queue`` (each run in a consumer
    group of its own); returns medians over the rounds (see the module docstring): per client
    ``(msg/s, CPU us/msg)``, and ``xfl`` (ours, theirs), ``spread`` (ours: low, high) and
    ``ratio`` (msg/s ours ÷ theirs) of the per-round ratios."""
    runs: Dict[str, List[Tuple[float, float]]] = {"floor": [], "ours": [], "mq": []}
    def floor(r: int) -> None:
        fwall, fcpu, _ = run_floor(url, queue, concurrency, batch, messages, "floor-%d" % r)
        runs["floor"].append((messages / fwall, fcpu / messages * 1e6))

    def ours(r: int) -> None:
        runs["ours"].append(run_ours(q, queue, concurrency, batch, messages, "ours-%d" % r))

    def mq(r: int) -> None:
        runs["mq"].append(run_official(url, queue, concurrency, batch, messages, "official-%d" % r))

    run_rounds([floor, ours] + ([mq] if queen_mq is not None else []), repeats)
    fl, ours, mq = runs["floor"], runs["ours"], runs["mq"]
    xfl_ours = [o[1] / f[1] for o, f in zip(ours, fl)]
    return {
        "floor": (median([x[0] for x in fl]), median([x[1] for x in fl])),
        "ours": (median([x[0] for x in ours]), median([x[1] for x in ours])),
        "mq": (median([x[0] for x in mq]), median([x[1] for x in mq])),
        "xfl": (median(xfl_ours), median([m[1] / f[1] for m, f in zip(mq, fl)])),
        "spread": (min(xfl_ours), max(xfl_ours)),
        "ratio": (median([o[0] / m[0] for o, m in zip(ours, mq)]),),
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=None,
                    help="messages per cell (default 200 x batch, at least 2000)")
    ap.add_argument("--repeats", type=int, default=9,
                    help="rounds per cell (one run of each client); medians are shown (default 9)")
    ap.add_argument("--partitions", type=int, default=16, help="partitions per queue (default 16)")
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated (default 1,4,16)")
    ap.add_argument("--batch", default="1,100", help="comma-separated (default 1,100)")
    ap.add_argument("--pin", action="store_true",
                    help="run the embedded broker on the last CPU and this process on the others (Linux)")
    opts = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    url, proc = start_broker()
    try:
        pinned = pin_apart(proc) if opts.pin else ""
        print("broker: %s; queen_sync codec %s; %s messages per cell over %d partitions; medians of %d rounds; "
              "no-op handler, auto-ack%s"
              % ("QUEEN_URL " + url if proc is None else "embedded (subprocess) " + url, queen_sync.codec_backend,
                 opts.messages or "200 x batch (at least 2000)", opts.partitions, opts.repeats,
                 "; " + pinned if pinned else ""))
        header = "%-11s %-5s | %8s %7s | %8s %7s %6s %11s | %8s %7s %6s | %7s" % (
            "concurrency", "batch", "floor/s", "us/msg", "ours/s", "us/msg", "xfl", "spread", "mq/s", "us/msg",
            "xfl", "ratio",
        )
        print_header(header)
        with Queen(url) as q:
            for c in [int(x) for x in opts.concurrency.split(",")]:
                for b in [int(x) for x in opts.batch.split(",")]:
                    n = opts.messages or max(2000, 200 * b)
                    queue = "bench-consume-%s" % uuid.uuid4().hex[:8]
                    fill(q, queue, n, opts.partitions)
                    m = cell(q, url, queue, c, b, n, opts.repeats)
                    print(
                        "%-11d %-5d | %8.0f %7.1f | %8.0f %7.1f %5.2fx %5.2f-%4.2fx | %8.0f %7.1f %5.2fx | %6.2fx"
                        % (c, b, m["floor"][0], m["floor"][1], m["ours"][0], m["ours"][1], m["xfl"][0],
                           m["spread"][0], m["spread"][1], m["mq"][0], m["mq"][1], m["xfl"][1], m["ratio"][0]),
                        flush=True,
                    )
                    with contextlib.suppress(Exception):
                        q.queue(queue).delete()
    finally:
        stop_broker(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
