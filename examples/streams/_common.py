"""Shared part of the streams examples (not an example itself): the examples' harness
(``examples/_harness.py``: broker, ``ok:`` / ``PASS: N checks`` output) and two helpers.

Python puts the script's folder (``examples/streams/``) first on ``sys.path``; the harness
lives one folder up.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _harness import Checks, Queen, run_example  # noqa: E402

__all__ = ["Checks", "Queen", "run_example", "drain", "wait_until", "T0"]

#: a fixed event time (2026-12-01T08:50:00.000Z) for the examples that use event time
T0 = 1796115000000


def drain(q: Queen, queue: str) -> List[Dict[str, Any]]:
    """Pop (queue mode) and ack everything currently in ``queue``; the messages, in order per
    partition."""
    out: List[Dict[str, Any]] = []
    while True:
        msgs = q.queue(queue).batch(500).partitions(50).pop()
        if not msgs:
            return out
        out.extend(msgs)
        q.ack(msgs)


def wait_until(cond: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``cond`` every 20 ms until it is true (True) or ``timeout_s`` seconds pass (False)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
