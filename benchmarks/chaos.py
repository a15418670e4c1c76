"""Chaos run: producers (buffered and not) and consumers on one client against the embedded
broker under a seeded random schedule of lost replies, 503s, dropped connections, slow replies
and broker restarts; then checks that every message is stored exactly once, handled at least
once, first deliveries keep each partition's order and every redelivery is explained by an
injected fault or an expired lease (see ``tests/_chaos.py``, shared with
``tests/test_chaos.py``).

    python benchmarks/chaos.py --seconds 60 --seed 7          # one long run
    python benchmarks/chaos.py --seconds 15 --seeds 1-20      # a table of seeds
    python benchmarks/chaos.py --seed 7 --schedule            # also print the fault schedule

Prints the figures of each run (and its failures, each marked with the open issue-11 item
that explains it, when one does) and a pass/fail table; exits 1 if any run failed. Not a
speed benchmark: no ratio is printed. Runs in-process (fault injection needs the embedded
broker); ``QUEEN_URL`` is ignored.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List

import _common  # noqa: F401  (puts the source checkout first on sys.path)

sys.path.insert(0, os.path.join(_common.ROOT, "tests"))

from _chaos import ChaosConfig, run_chaos  # noqa: E402


def _seeds(text: str) -> List[int]:
    out: List[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b) + 1) if b else [int(a)])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="chaos phase per run, seconds (default 60)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default 1)")
    ap.add_argument("--seeds", help="several seeds, e.g. 1-20 or 3,5,9 (overrides --seed)")
    ap.add_argument("--schedule", action="store_true", help="print each run's fault schedule")
    ap.add_argument("-v", "--verbose", action="store_true", help="client logs at INFO on stderr")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL, stream=sys.stderr,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    seeds = _seeds(args.seeds) if args.seeds else [args.seed]
    table = []
    for seed in seeds:
        report = run_chaos(ChaosConfig(seed=seed, seconds=args.seconds))
        print(report.text(schedule=args.schedule), flush=True)
        print(flush=True)
        verdict = "pass" if report.ok else ("fail (known: %s)" % ", ".join(
            sorted({"issue " + f.known for f in report.failures if f.known})) if report.only_known else "FAIL")
        table.append((seed, verdict, "; ".join(sorted({f.check for f in report.failures})),
                      report.figures.get("messages", "")))
    print("%-6s %-24s %-28s %s" % ("seed", "verdict", "failed checks", "messages"))
    for seed, verdict, checks, msgs in table:
        print("%-6d %-24s %-28s %s" % (seed, verdict, checks or "-", msgs))
    print("%d of %d runs passed" % (sum(1 for t in table if t[1] == "pass"), len(table)))
    return 0 if all(t[1] == "pass" for t in table) else 1


if __name__ == "__main__":
    sys.exit(main())
