"""Several runners of one rate-limiting query share the tenants between them.

Three runners of the same ``query_id`` (so the same consumer group and state) pop the
same source: each tenant partition is leased to one of them at a time, its token bucket
lives in the broker, so a tenant keeps one bucket whichever runner holds it. Every request
is approved exactly once, in order per tenant.

Blocking port of the official SDK's ``examples/08_rate_limiter_stress.py`` (small scale).
Run with ``QUEEN_URL=... python examples/streams/multi_runner_rate_limiter.py``.
"""

from __future__ import annotations

import sys
from typing import Dict, List

from _common import Checks, Queen, drain, run_example, wait_until

from queen_sync import Stream
from queen_sync.streams import token_bucket_gate

TENANTS = ["t%d" % i for i in range(6)]
PER_TENANT = 10


def run(q: Queen, checks: Checks, suffix: str) -> None:
    src, approved = "burst-%s" % suffix, "burst-ok-%s" % suffix
    q.queue(src).config({"leaseTime": 1, "retryLimit": 1000}).create()
    for t in TENANTS:
        q.queue(src).partition(t).push([{"data": {"tenant": t, "seq": i}} for i in range(PER_TENANT)])
    stream = Stream.from_(q.queue(src)).gate(token_bucket_gate(capacity=4, refill_per_sec=8)).to(q.queue(approved))
    runners = [stream.run("burst-%s" % suffix, batch_size=20, max_partitions=2, max_wait_millis=300)
               for _ in range(3)]
    seen: Dict[str, List[int]] = {t: [] for t in TENANTS}

    def collect() -> bool:
        for m in drain(q, approved):
            seen[m["data"]["tenant"]].append(m["data"]["seq"])
        return sum(len(v) for v in seen.values()) >= len(TENANTS) * PER_TENANT

    try:
        wait_until(collect, timeout_s=90)
    finally:
        for r in runners:
            r.stop()
    checks.check(all(seen[t] == list(range(PER_TENANT)) for t in TENANTS),
                 "every tenant's requests approved once, in order", seen)
    allows = [r.metrics()["gateAllowsTotal"] for r in runners]
    checks.check(sum(allows) == len(TENANTS) * PER_TENANT, "60 allows over the three runners", allows)
    checks.check(sum(r.metrics()["gateDenialsTotal"] for r in runners) > 0, "bursts above the bucket were held back")
    checks.check(all(r.metrics()["errorsTotal"] == 0 for r in runners), "no errors",
                 [r.metrics()["lastError"] for r in runners])
    checks.check(all(not r.is_running for r in runners), "all runners stopped")


if __name__ == "__main__":
    sys.exit(run_example(run))
