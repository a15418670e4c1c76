"""Small helpers shared by several test modules (import as ``from _helpers import ...``; pytest
puts this folder on ``sys.path`` like it does for ``_broker_http``)."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_until(cond: Callable[[], Any], timeout: float = 15.0, interval: float = 0.01) -> bool:
    """Poll ``cond`` every ``interval`` seconds; True once it is truthy, False after ``timeout``
    seconds without it (the caller asserts)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_for(pred: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll ``pred`` until true or the deadline (``timeout_s`` seconds) passes, then fail with
    ``AssertionError("timed out waiting for <what>")``."""
    if not wait_until(pred, timeout_s, 0.002):
        raise AssertionError("timed out waiting for %s" % what)
