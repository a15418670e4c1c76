"""Sliding-window rate limiter: about ``limit`` requests per user in any ``window_sec``.

``key_by`` keys the gate state by user (several users share one partition);
``sliding_window_gate`` estimates the rate from the current and the previous one-second
bucket, and requests over the limit wait (FIFO) for their lease to expire.

Blocking port of the sliding-window model of the official SDK's
``examples/09_rate_limiter_all_models.py``. Run with
``QUEEN_URL=... python examples/streams/sliding_window_rate_limiter.py``.
"""

from __future__ import annotations

import sys
from typing import List, Tuple  # noqa: F401

from _common import Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream
from queen_sync.streams import sliding_window_gate

REQUESTS = [("u1", i) for i in range(6)] + [("u2", i) for i in range(3)]


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, approved = "api-calls-%s" % suffix, "api-allowed-%s" % suffix
    q.queue(src).config({"leaseTime": 1, "retryLimit": 1000}).create()
    q.queue(src).partition("api").push([{"data": {"user": u, "seq": i}} for u, i in REQUESTS])
    runner = (Stream.from_(q.queue(src))
              .key_by(lambda m: m["data"]["user"])
              .gate(sliding_window_gate(limit=4, window_sec=1))
              .map(lambda v, ctx: {**v, "key": ctx["key"]})
              .to(q.queue(approved))
              .run("sliding-limit-%s" % suffix, batch_size=50, max_wait_millis=500))
    got: List[Tuple[str, int, str]] = []
    with runner:
        wait_until(lambda: got.extend((m["data"]["user"], m["data"]["seq"], m["data"]["key"])
                                      for m in drain(q, approved)) or len(got) >= len(REQUESTS), timeout_s=60)
    checks.check([(u, i) for u, i, _ in got] == REQUESTS, "every request approved once, in the source order", got)
    checks.check(all(u == k for u, _, k in got), "the post-gate map saw the gate key (the user)")
    m = runner.metrics()
    checks.check(m["gateDenialsTotal"] > 0, "u1's fifth request had to wait", m["gateDenialsTotal"])
    checks.check(m["gateAllowsTotal"] == len(REQUESTS), "9 allows", m["gateAllowsTotal"])
    checks.check(m["errorsTotal"] == 0, "no errors", m["lastError"])


if __name__ == "__main__":
    sys.exit(run_example(run))
