#!/usr/bin/env python
"""Push throughput, client CPU per message and single-push latency: queen_sync against the
official async client ``queen-mq`` (0.15.0) and the floor (a minimal urllib3 + orjson client,
``benchmarks/_floor.py``), in the same run, against the same broker.

Usage::

    python benchmarks/bench_push.py              # starts `python -m queen_sync.testing` as a subprocess
    QUEEN_URL=http://host:6632 python benchmarks/bench_push.py
    python benchmarks/bench_push.py --scale 0.2 --repeats 1  # quicker; --repeats 15 for steadier numbers

What is measured:

- ``push batch=N``: each call pushes a list of N items; the same total number of messages is
  pushed from 1 and from 8 threads (queen_sync: 8 OS threads sharing one ``Queen``;
  queen-mq: 8 concurrent asyncio tasks sharing one client, its intended concurrency model).
- ``buffered 1-item``: single-item pushes into a client-side buffer (1000 messages / 50 ms),
  then a flush.
- msg/s is wall-clock; CPU us/msg is ``time.process_time()`` of this process (the client
  side only: the broker runs in another process) divided by the messages pushed.
- every cell runs ``--repeats`` rounds (default 7): one run of each client per round, the
  order rotating from round to round (so that a busy spell of the machine hits them alike and
  none is always run right after another), and the table shows medians over the rounds:
  each client's median msg/s and CPU per message, and the median of the rounds' ratios, as
  ``bench_consume.py`` does. Not the best run: on two cores shared with the broker a
  client's CPU per message varies by ±20% from run to run, the floor's as much as ours, and
  the best of three is a lucky draw of each (best of 3 printed 1.36x for a batch-100 cell
  whose 12-round median was 1.10x).
- ``gc.collect()`` runs before every client's clock starts (floor, queen_sync, queen-mq alike):
  a full collection of this process costs some 20-50 ms, i.e. up to 1.5 us/msg of a
  30000-message cell, and without it the run that happens to cross the collector's threshold
  pays for the garbage every earlier run left (mostly queen-mq's). Collections a client's own
  allocations cause within its run are still counted.
- latency: one single-item push made from plain synchronous code, as a Flask / Django view
  would: queen_sync directly on a shared client; queen-mq through ``asyncio.run(...)``, which
  needs a client created inside that event loop (an httpx AsyncClient cannot be shared
  across loops), so the client is created and closed per call.

- floor: the same requests from a minimal urllib3 + orjson client, bodies built before the
  clock, replies decoded and verdicts counted (for ``buffered 1-item``: the 1000-item bodies
  the buffer ends up sending). ``xfl`` is the median over the rounds of a client's CPU per
  message divided by the floor's in the same round, for queen_sync (``ours``) and queen-mq
  (``mq``); lower is better, 1.00 is the floor; ``spread`` the lowest and highest of
  queen_sync's per-round ``xfl``.
- ``fe`` (floor + encode), a reference beside the floor: the floor's client, its documents
  built and ids minted before the clock as the floor's, but each encoded with
  ``orjson.dumps`` right before its request, inside the clock. Every client that is handed
  Python objects pays that serialisation; ``fe xfl`` shows what it costs on its own (at
  batch 1000, with the payloads cold in cache by then, a good part of the floor's own CPU),
  and ``xfe`` divides queen_sync's CPU per message by it.

Ratios ``x msg/s`` / ``x CPU`` are medians of queen_sync / queen-mq per round (throughput: higher is better; CPU
and latency: lower is better). The broker is the embedded Python one unless ``QUEEN_URL`` is set, so absolute
throughput is bounded by it; the CPU column is the client's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import logging
import os
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Tuple

from _common import median, print_header, queen_mq, run_rounds, start_broker, stop_broker  # puts the checkout on sys.path
from _floor import FloorClient

import queen_sync
from queen_sync import Queen


def payloads(batch: int) -> List[Dict[str, Any]]:
    return [{"data": {"i": i, "order": "ord-%06d" % i, "amount": 12.5, "tags": ["a", "b"]}} for i in range(batch)]


def split(total: int, parts: int) -> List[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


# --------------------------------------------------------------------------- queen_sync


def ours_push(url: str, queue: str, batch: int, threads: int, total: int, buffered: bool) -> Tuple[float, float]:
    q = Queen(url, pool_maxsize=max(8, threads))
    items = payloads(batch)
    calls = split(total // batch, threads)
    barrier = threading.Barrier(threads + 1)

    def work(n: int) -> None:
        qb = q.queue(queue)
        if buffered:
            qb = qb.buffer(1000, 50)
        barrier.wait()
        if buffered:
            for _ in range(n):
                qb.push(items[0])
        else:
            for _ in range(n):
                qb.push(items)

    ths = [threading.Thread(target=work, args=(n,)) for n in calls]
    for t in ths:
        t.start()
    gc.collect()  # every client starts its clock from the same collector state (module docstring)
    barrier.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    for t in ths:
        t.join()
    if buffered:
        assert q.flush_all_buffers(120000) == 0
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    q.close()
    return wall, cpu


def ours_latency(url: str, queue: str, n: int) -> List[float]:
    out = []
    with Queen(url) as q:
        qb = q.queue(queue)
        qb.push({"data": -1})  # warm the connection
        for i in range(n):
            t = time.perf_counter()
            qb.push({"data": {"i": i}})
            out.append(time.perf_counter() - t)
    return out


# --------------------------------------------------------------------------- queen-mq


def theirs_push(url: str, queue: str, batch: int, conc: int, total: int, buffered: bool) -> Tuple[float, float]:
    items = payloads(batch)
    calls = split(total // batch, conc)
    res: Dict[str, float] = {}

    async def main() -> None:
        q = queen_mq.Queen(url)

        async def work(n: int) -> None:
            if buffered:
                for _ in range(n):
                    await q.queue(queue).buffer({"message_count": 1000, "time_millis": 50}).push(items[0])
            else:
                for _ in range(n):
                    await q.queue(queue).push(items)

        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(work(n) for n in calls))
        if buffered:
            await q.flush_all_buffers()
        res["wall"], res["cpu"] = time.perf_counter() - t0, time.process_time() - c0
        await q.close()

    with contextlib.redirect_stdout(io.StringIO()):  # queen-mq prints on flush and close
        asyncio.run(main())
    return res["wall"], res["cpu"]


def theirs_latency(url: str, queue: str, n: int) -> List[float]:
    async def one(i: int) -> None:
        q = queen_mq.Queen(url)
        try:
            await q.queue(queue).push({"data": {"i": i}})
        finally:
            await q.close()

    out = []
    with contextlib.redirect_stdout(io.StringIO()):
        asyncio.run(one(-1))
        for i in range(n):
            t = time.perf_counter()
            asyncio.run(one(i))  # what a synchronous view function has to do
            out.append(time.perf_counter() - t)
    return out


# --------------------------------------------------------------------------- floor


def floor_push(url: str, queue: str, batch: int, threads: int, total: int, buffered: bool,
               encode: bool = False) -> Tuple[float, float]:
    """The floor's run (bodies built and encoded before the clock); ``encode``: the ``fe``
    reference, whose documents (ids minted) are built before the clock and encoded with
    ``orjson.dumps`` inside it, request by request."""
    if buffered:  # what the buffer sends: bodies of up to 1000 items
        batch = min(1000, total)
    items = payloads(batch)
    calls = split(total // batch, threads)
    floor = FloorClient(url, maxsize=max(8, threads))
    try:
        build = FloorClient.push_documents if encode else FloorClient.push_bodies
        bodies: List[List[Any]] = [build(queue, items, n) for n in calls]  # before the clock
        return floor.push_run(bodies, batch)
    finally:
        floor.close()


def floor_encode_push(url: str, queue: str, batch: int, threads: int, total: int, buffered: bool) -> Tuple[float, float]:
    return floor_push(url, queue, batch, threads, total, buffered, encode=True)


def floor_latency(url: str, queue: str, n: int) -> List[float]:
    floor = FloorClient(url, maxsize=1)
    bodies = [FloorClient.push_bodies(queue, [{"data": {"i": i}}], 1)[0] for i in range(n + 1)]
    out = []
    try:
        floor.push(bodies[-1], 1)  # warm the connection
        for body in bodies[:n]:
            t = time.perf_counter()
            floor.push(body, 1)
            out.append(time.perf_counter() - t)
    finally:
        floor.close()
    return out


# --------------------------------------------------------------------------- driver


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply message counts (default 1.0)")
    ap.add_argument("--latency-samples", type=int, default=300, help="single pushes per client (default 300)")
    ap.add_argument("--repeats", type=int, default=7,
                    help="rounds per cell (one run of each client); medians are shown (default 7)")
    opts = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if queen_mq is None:
        print("queen-mq is not installed: pip install queen-mq==0.15.0", file=sys.stderr)
        return 2
    url, proc = start_broker()
    run_id = uuid.uuid4().hex[:6]
    admin = Queen(url)
    try:
        print("broker: %s (%s)" % (url, "QUEEN_URL" if proc is None else "embedded, subprocess"))
        print(
            "queen_sync %s (codec: %s) vs queen-mq %s; python %s; %d CPUs"
            % (queen_sync.__version__, queen_sync.codec_backend, queen_mq.__version__, sys.version.split()[0], os.cpu_count() or 0)
        )
        print("each cell: medians of %d rounds, one run of each client per round (--repeats)" % opts.repeats)
        s = opts.scale
        workloads = [
            ("push batch=1", 1, int(1500 * s), False),
            ("push batch=100", 100, int(30000 * s), False),
            ("push batch=1000", 1000, int(60000 * s), False),
            ("buffered 1-item", 1, int(20000 * s), True),
        ]
        rows = []
        for name, batch, total, buffered in workloads:
            total = max(batch, total - total % batch)
            for threads in (1, 8):
                r: Dict[str, Any] = {"name": name, "threads": threads, "total": total}
                runs: Dict[str, List[Tuple[float, float]]] = {"floor": [], "flenc": [], "ours": [], "theirs": []}

                def client(who: str, fn: Callable[..., Tuple[float, float]]) -> Callable[[int], None]:
                    def run(rnd: int) -> None:
                        queue = "bench-%s-%s-%d-%d-%s-%d" % (run_id, who, batch, threads, "b" if buffered else "u", rnd)
                        wall, cpu = fn(url, queue, batch, threads, total, buffered)
                        runs[who].append((total / wall, cpu / total * 1e6))
                        admin.queue(queue).delete()
                    return run

                run_rounds([client("floor", floor_push), client("flenc", floor_encode_push),
                            client("ours", ours_push), client("theirs", theirs_push)], opts.repeats)
                for who, rs in runs.items():
                    r[who] = (median([x[0] for x in rs]), median([x[1] for x in rs]))

                def per_round(a: str, b: str, k: int) -> List[float]:
                    return [x[k] / y[k] for x, y in zip(runs[a], runs[b])]

                xfl = per_round("ours", "floor", 1)
                r["ratios"] = {
                    "fe_xfl": median(per_round("flenc", "floor", 1)),
                    "xfl": median(xfl), "lo": min(xfl), "hi": max(xfl),
                    "xfe": median(per_round("ours", "flenc", 1)),
                    "mq_xfl": median(per_round("theirs", "floor", 1)),
                    "x_rate": median(per_round("ours", "theirs", 0)),
                    "x_cpu": median(per_round("ours", "theirs", 1)),
                }
                rows.append(r)
                print(
                    "  done: %-16s threads=%d  floor %.0f msg/s, ours %.0f msg/s, queen-mq %.0f msg/s"
                    % (name, threads, r["floor"][0], r["ours"][0], r["theirs"][0]),
                    flush=True,
                )

        lq = "bench-%s-lat" % run_id
        lo = ours_latency(url, lq + "-ours", opts.latency_samples)
        lt = theirs_latency(url, lq + "-theirs", max(50, opts.latency_samples // 2))
        lf = floor_latency(url, lq + "-floor", opts.latency_samples)
        for suffix in ("-ours", "-theirs", "-floor"):
            admin.queue(lq + suffix).delete()

        print()
        print("Throughput and client CPU per message (us); xfl = CPU per message / the floor's; x = queen_sync / queen-mq")
        hdr = "%-16s %3s %6s | %8s %6s | %6s %5s | %8s %6s %6s %11s %6s | %8s %6s %6s | %7s %6s" % (
            "workload", "thr", "msgs", "fl msg/s", "fl us", "fe us", "xfl",
            "ours/s", "us", "xfl", "spread", "xfe", "mq/s", "us", "xfl", "x msg/s", "x CPU",
        )
        print_header(hdr)
        for r in rows:
            f, e, o, t, x = r["floor"], r["flenc"], r["ours"], r["theirs"], r["ratios"]
            print(
                "%-16s %3s %6d | %8.0f %6.1f | %6.1f %4.2fx | %8.0f %6.1f %5.2fx %5.2f-%4.2fx %5.2fx | %8.0f %6.1f %5.2fx | %6.2fx %5.2fx"
                % (
                    r["name"], r["threads"], r["total"],
                    f[0], f[1],
                    e[1], x["fe_xfl"],
                    o[0], o[1], x["xfl"], x["lo"], x["hi"], x["xfe"],
                    t[0], t[1], x["mq_xfl"],
                    x["x_rate"], x["x_cpu"],
                )
            )
        print("(threads=8: queen_sync uses 8 OS threads on one Queen; queen-mq 8 asyncio tasks on one client)")
        print("(fe: the floor encoding its bodies inside the clock, orjson.dumps per request; xfe = ours / fe)")
        print()
        print("Single push from synchronous code, latency in ms")
        hdr2 = "%-44s %8s %8s %8s %8s" % ("client", "samples", "p50", "p99", "mean")
        print_header(hdr2)
        for label, xs in (
            ("floor: urllib3 POST of a pre-built body", lf),
            ("queen_sync: q.queue(..).push(...)", lo),
            ("queen-mq: asyncio.run(new client + push)", lt),
        ):
            print(
                "%-44s %8d %8.2f %8.2f %8.2f"
                % (label, len(xs), pct(xs, 50) * 1e3, pct(xs, 99) * 1e3, statistics.mean(xs) * 1e3)
            )
        print(
            "ratio p50 %.2fx, p99 %.2fx (queen_sync / queen-mq); p50 %.2fx (queen_sync / floor); lower is better"
            % (pct(lo, 50) / pct(lt, 50), pct(lo, 99) / pct(lt, 99), pct(lo, 50) / pct(lf, 50))
        )
    finally:
        admin.close()
        stop_broker(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
