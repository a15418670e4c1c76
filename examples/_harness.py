"""Shared harness of the runnable examples (not an example itself).

Each example defines ``run(q, checks, suffix)`` and ends with
``sys.exit(run_example(run))``. The harness connects to ``QUEEN_URL`` or, when it is not
set, starts the embedded test broker; it prints ``ok: <fact>`` per passed check and
``PASS: N checks`` at the end, or ``FAIL: ...`` and returns 1 on the first failure.

Python puts the script's folder (``examples/``) first on ``sys.path``, so
``python examples/<name>.py`` finds this module from any working directory.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any, Callable

try:
    from queen_sync import Queen
except ImportError:  # running from a source checkout without installing the package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from queen_sync import Queen

__all__ = ["Checks", "Queen", "run_example"]


class Checks:
    """Counts verified facts; ``check`` prints ``ok: <fact>`` or raises ``AssertionError``."""

    def __init__(self) -> None:
        self.passed = 0

    def check(self, condition: bool, fact: str, detail: Any = None) -> None:
        if not condition:
            raise AssertionError("%s (got %r)" % (fact, detail))
        self.passed += 1
        print("ok: %s" % fact, flush=True)


def run_example(run: Callable[[Queen, Checks, str], None]) -> int:
    """Run ``run(q, checks, suffix)`` against a broker; return the process exit status.

    ``q`` is a ``Queen`` on ``QUEEN_URL`` (or on an embedded broker started and stopped
    here), ``suffix`` a random 10-hex-digit string for unique queue/group names. Returns 0
    after printing ``PASS: N checks``, or 1 after printing ``FAIL: <error>``.
    """
    url = os.environ.get("QUEEN_URL")
    broker = None
    if not url:
        from queen_sync.testing import EmbeddedBroker

        broker = EmbeddedBroker().start()
        url = broker.url
    print("broker %s" % url)
    checks = Checks()
    try:
        with Queen(url) as q:
            run(q, checks, uuid.uuid4().hex[:10])
    except Exception as exc:  # report and fail
        print("FAIL: %s: %s" % (type(exc).__name__, exc), flush=True)
        return 1
    finally:
        if broker is not None:
            broker.stop()
    print("PASS: %d checks" % checks.passed)
    return 0
