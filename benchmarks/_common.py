"""Shared helpers of the client benchmarks (not a benchmark itself).

Importing it puts the source checkout first on ``sys.path`` (so the benchmarks measure the
tree they sit in) and imports the official async client as ``queen_mq`` (``None`` when
``queen-mq`` is not installed). Python puts the script's folder (``benchmarks/``) on
``sys.path``, so ``python benchmarks/<name>.py`` finds this module from any working directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import statistics
from typing import Callable, List, Optional, Sequence, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

try:
    import queen as queen_mq  # the official async client
except ImportError:  # pragma: no cover
    queen_mq = None

__all__ = ["ROOT", "queen_mq", "start_broker", "stop_broker", "pin_apart", "print_header", "run_rounds", "median"]


def start_broker() -> Tuple[str, Optional[subprocess.Popen]]:
    """Return ``(url, proc)``: ``QUEEN_URL`` and ``None`` when it is set, else the URL of a
    ``python -m queen_sync.testing`` subprocess on a free loopback port (started here; stop it
    with :func:`stop_broker`)."""
    url = os.environ.get("QUEEN_URL")
    if url:
        return url.rstrip("/"), None
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "queen_sync.testing", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "... listening on ..."
    return "http://127.0.0.1:%d" % port, proc


def stop_broker(proc: Optional[subprocess.Popen]) -> None:
    """Terminate a broker subprocess from :func:`start_broker` (waits up to 10 seconds);
    ``None`` (an external ``QUEEN_URL`` broker) is left alone."""
    if proc is not None:
        proc.terminate()
        proc.wait(10)


def pin_apart(proc: Optional[subprocess.Popen]) -> str:
    """Pin the broker subprocess ``proc`` to the last CPU this process may use and this
    process to the others, so that the two stop trading cores under the scheduler; returns
    what was done, for the report line. Exits with a message where that cannot be done (an
    external ``QUEEN_URL`` broker, fewer than 2 CPUs, no ``os.sched_setaffinity``)."""
    if proc is None:
        raise SystemExit("--pin needs the embedded broker (unset QUEEN_URL)")
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--pin needs os.sched_setaffinity (Linux)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs, this process may use %d" % len(cpus))
    for pid, mask in ((proc.pid, {cpus[-1]}), (os.getpid(), set(cpus[:-1]))):
        # every thread running now (the broker's server threads are up); threads started
        # later inherit their creator's mask
        for tid in os.listdir("/proc/%d/task" % pid):
            os.sched_setaffinity(int(tid), mask)
    return "pinned: broker on CPU %d, client on CPU %s" % (cpus[-1], ",".join(map(str, cpus[:-1])))


def print_header(header: str) -> None:
    """Print a table's header line and a dashed rule as wide as it."""
    print(header)
    print("-" * len(header))


def run_rounds(clients: Sequence[Callable[[int], None]], repeats: int) -> None:
    """Call every client once per round, ``repeats`` rounds, passing the round number; the
    order rotates from round to round (a client run right after another costs a few per cent
    more CPU than one run first, so no client is always second)."""
    for r in range(repeats):
        for run in list(clients[r % len(clients):]) + list(clients[:r % len(clients)]):
            run(r)


def median(xs: List[float]) -> float:
    """The median of ``xs``, NaN when it is empty (a client that did not run)."""
    return statistics.median(xs) if xs else float("nan")
