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
from typing import Optional, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

try:
    import queen as queen_mq  # the official async client
except ImportError:  # pragma: no cover
    queen_mq = None

__all__ = ["ROOT", "queen_mq", "start_broker", "stop_broker", "print_header"]


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


def print_header(header: str) -> None:
    """Print a table's header line and a dashed rule as wide as it."""
    print(header)
    print("-" * len(header))
