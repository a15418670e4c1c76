"""Token-bucket rate limiter: at most ``capacity`` requests at once per tenant, refilled at
``refill_per_sec``.

Each tenant is a partition; ``token_bucket_gate`` keeps the bucket in the broker's state (key:
the partition). A cycle lets requests through while tokens last, acks them and keeps the
lease (partial ack); the denied rest stays unacked and comes back, in order, when the lease
expires (``leaseTime`` 1 s here), by when the bucket has refilled.

Blocking port of the official SDK's ``examples/07_rate_limiter.py``. Run with
``QUEEN_URL=... python examples/streams/token_bucket_rate_limiter.py``.
"""

from __future__ import annotations

import sys
from typing import Dict, List

from _common import Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream
from queen_sync.streams import token_bucket_gate

TENANTS = ["tenant-a", "tenant-b"]
REQUESTS = 12
CAPACITY = 5


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, approved = "requests-%s" % suffix, "approved-%s" % suffix
    q.queue(src).config({"leaseTime": 1, "retryLimit": 1000}).create()
    for t in TENANTS:
        q.queue(src).partition(t).push([{"data": {"tenant": t, "seq": i}} for i in range(REQUESTS)])
    runner = (Stream.from_(q.queue(src))
              .gate(token_bucket_gate(capacity=CAPACITY, refill_per_sec=5))
              .to(q.queue(approved))
              .run("rate-limit-%s" % suffix, batch_size=50, max_wait_millis=500))
    seen: Dict[str, List[int]] = {t: [] for t in TENANTS}

    def collect() -> bool:
        for m in drain(q, approved):
            seen[m["data"]["tenant"]].append(m["data"]["seq"])
        return all(len(v) >= REQUESTS for v in seen.values())

    with runner:
        wait_until(collect, timeout_s=60)
    for t in TENANTS:
        checks.check(seen[t] == list(range(REQUESTS)), "%s: all %d requests approved once, in order" % (t, REQUESTS),
                     seen[t])
    m = runner.metrics()
    checks.check(m["gateAllowsTotal"] == 2 * REQUESTS, "24 allows in total", m["gateAllowsTotal"])
    checks.check(m["gateDenialsTotal"] > 0, "denied requests waited for their lease (and the refill)",
                 m["gateDenialsTotal"])
    checks.check(m["cyclesTotal"] >= 2 * 3, "at least three cycles per tenant (5 + 5 + 2 tokens)", m["cyclesTotal"])
    checks.check(m["errorsTotal"] == 0, "no errors", m["lastError"])


if __name__ == "__main__":
    sys.exit(run_example(run))
