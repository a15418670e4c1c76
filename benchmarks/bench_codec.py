#!/usr/bin/env python
"""Codec benchmark: compiled (Cython) vs pure-Python codec vs the bare JSON floor.

For batches of 1, 100 and 1000 messages with a realistic ~200-byte JSON payload it prints
nanoseconds per message for

- encode: ``encode_push(queue, partition, items)`` (build the wire items, mint UUIDv7
  ``transactionId``s, one JSON call). Floor: ``orjson.dumps`` of the finished body
  ``{"items": [...]}`` with the ids already minted.
- enc/nn: the same with ``nan_as_null=True`` (no NaN / ±Infinity check: shows what the
  strict check, which walks the payloads when the body holds a ``null``, costs).
- decode: ``decode_pop(body)`` of a pop response holding that many messages. Floor:
  ``orjson.loads`` of the same body.

and the ratios to the floor, all measured in the same run. Each figure is the best of
``--repeat`` timeit repeats (~0.05 s each), interleaved across the columns so that
they all see the same machine load.

Usage: ``python benchmarks/bench_codec.py [--repeat 7] [--sizes 1,100,1000]``.
Needs the compiled codec (``python setup.py build_ext --inplace``) for the cython column.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import orjson  # noqa: E402

from queen_sync import codec  # noqa: E402

QUEUE = "orders"
PARTITION = "customer-42"


def payload(i: int) -> Dict[str, Any]:
    """A ~200-byte order event (exact size printed at start)."""
    return {
        "orderId": 100000 + i,
        "customer": {"id": "cus_%08d" % (7919 * i % 10**8), "name": "Ada Lovelace", "tier": "gold"},
        "lines": [
            {"sku": "SKU-%04d" % (i % 9973), "qty": 2, "price": 19.99},
            {"sku": "SKU-0042", "qty": 1, "price": 5.5},
        ],
        "currency": "EUR",
        "total": 45.48,
        "paid": True,
        "note": None,
    }


def pop_body(n: int) -> bytes:
    """A pop response as a Queen 0.15 broker sends it, with ``n`` messages."""
    lease = "01938f4e-7c1a-7b2e-9d3f-2a4b5c6d7e8f"
    pid = "01938f4e-0000-7000-8000-00000000002a"
    ids = codec.load_backend("python").new_transaction_ids(2 * n)
    messages = [
        {
            "id": ids[2 * i],
            "transactionId": ids[2 * i + 1],
            "partitionId": pid,
            "partition": PARTITION,
            "data": payload(i),
            "createdAt": "2026-11-30T08:00:%02d.%03dZ" % (i % 60, i % 1000),
            "leaseId": lease,
            "consumerGroup": "billing",
            "traceId": None,
            "producerSub": None,
        }
        for i in range(n)
    ]
    return orjson.dumps(
        {
            "success": True,
            "queue": QUEUE,
            "partition": PARTITION,
            "partitionId": pid,
            "leaseId": lease,
            "consumerGroup": "billing",
            "partitionsClaimed": 1,
            "messages": messages,
        }
    )


def best_ns(fns: Dict[str, Callable[[], Any]], repeat: int) -> Dict[str, float]:
    """Best time of one call of each function, in nanoseconds.

    timeit-style: each function gets a loop count that takes ~0.05 s (``Timer.autorange``),
    then the repeats are interleaved (floor, cython, python, floor, ...) so that every
    column sees the same machine load, and the best repeat counts.
    """
    timers = {name: timeit.Timer(fn) for name, fn in fns.items()}
    numbers = {}
    for name, timer in timers.items():
        number, _ = timer.autorange()  # stops at >= 0.2 s
        numbers[name] = max(1, number // 4)
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, timer in timers.items():
            best[name] = min(best[name], timer.timeit(numbers[name]) / numbers[name] * 1e9)
    return best


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--sizes", default="1,100,1000")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    backends = {"python": codec.load_backend("python")}
    try:
        backends["cython"] = codec.load_backend("cython")
    except ImportError:
        print("compiled codec not built: run `python setup.py build_ext --inplace` (cython column omitted)")
    print(
        "python %s, orjson %s, payload %d bytes, best of %d repeats, ns per message"
        % (sys.version.split()[0], orjson.__version__, len(orjson.dumps(payload(0))), args.repeat)
    )
    header = "%-6s %5s %10s %10s %10s %9s %9s %10s" % (
        "op", "batch", "cython", "python", "floor", "cy/floor", "py/floor", "py/cython",
    )
    print(header)
    print("-" * len(header))
    results: Dict[Any, Dict[str, float]] = {}
    for n in sizes:
        items = [{"data": payload(i)} for i in range(n)]
        body_bytes = pop_body(n)
        finished = {"items": backends["python"].build_push_items(QUEUE, PARTITION, items)}
        enc_fns: Dict[str, Callable[[], Any]] = {"floor": lambda: orjson.dumps(finished)}
        dec_fns: Dict[str, Callable[[], Any]] = {"floor": lambda: orjson.loads(body_bytes)}
        nn_fns: Dict[str, Callable[[], Any]] = {"floor": lambda: orjson.dumps(finished)}
        for name, mod in backends.items():
            enc_fns[name] = (lambda enc: lambda: enc(QUEUE, PARTITION, items))(mod.encode_push)
            nn_fns[name] = (lambda enc: lambda: enc(QUEUE, PARTITION, items, None, True))(mod.encode_push)
            dec_fns[name] = (lambda dec: lambda: dec(body_bytes))(mod.decode_pop)
        row_enc = {k: v / n for k, v in best_ns(enc_fns, args.repeat).items()}
        row_nn = {k: v / n for k, v in best_ns(nn_fns, args.repeat).items()}
        row_dec = {k: v / n for k, v in best_ns(dec_fns, args.repeat).items()}
        for op, row in (("encode", row_enc), ("enc/nn", row_nn), ("decode", row_dec)):
            results[(op, n)] = row
            cy = row.get("cython")
            py = row["python"]
            fl = row["floor"]
            print(
                "%-6s %5d %10s %10.0f %10.0f %9s %9.2f %10s"
                % (
                    op,
                    n,
                    "%.0f" % cy if cy is not None else "-",
                    py,
                    fl,
                    "%.2f" % (cy / fl) if cy is not None else "-",
                    py / fl,
                    "%.2f" % (py / cy) if cy is not None else "-",
                )
            )
    if "cython" in backends:
        print()
        for n in [m for m in sizes if m >= 100]:
            enc = results[("encode", n)]
            dec = results[("decode", n)]
            checks = [
                ("compiled encode within 1.5x of floor", enc["cython"] / enc["floor"] <= 1.5),
                ("compiled encode >= 3x faster than pure", enc["python"] / enc["cython"] >= 3.0),
                ("compiled decode within 1.3x of floor", dec["cython"] / dec["floor"] <= 1.3),
            ]
            for text, ok in checks:
                print("target (%d-message batch): %-40s %s" % (n, text, "PASS" if ok else "FAIL"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
