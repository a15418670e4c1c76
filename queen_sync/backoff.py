"""Retry delay policies (redis-py style): ``compute(failures)`` returns seconds.

The transport and the consumers wait :meth:`Backoff.compute` seconds between retry rounds;
:class:`ExponentialBackoff` (capped, with "equal jitter") is the default, built from the
client's ``retry_delay_millis`` / ``retry_max_delay_millis``. Also importable from
:mod:`queen_sync.transport`, where they were first documented.
"""

from __future__ import annotations

import random

from ._validate import timeout_arg
from .errors import InvalidInputError

__all__ = ["Backoff", "NoBackoff", "ConstantBackoff", "ExponentialBackoff"]


class Backoff:
    """Retry delay policy (redis-py style). Subclass and override :meth:`compute`.

    ``compute(failures)`` gets the number of failed rounds so far (0 for the first retry)
    and returns the delay in **seconds**. Implementations must be thread-safe (one
    instance is shared by every thread of a client).
    """

    def compute(self, failures: int) -> float:
        """Return the delay in seconds before retry number ``failures + 1``."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any state (called by nobody in queen_sync; kept for redis-py parity)."""


class NoBackoff(Backoff):
    """Retry at once."""

    def compute(self, failures: int) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "NoBackoff()"


class ConstantBackoff(Backoff):
    """Always wait ``delay_millis`` milliseconds."""

    def __init__(self, delay_millis: float) -> None:
        self._s = float(timeout_arg("delay_millis", delay_millis)) / 1000.0

    def compute(self, failures: int) -> float:
        return self._s

    def __repr__(self) -> str:
        return "ConstantBackoff(%g)" % (self._s * 1000.0)


class ExponentialBackoff(Backoff):
    """Capped exponential backoff: ``d = min(cap, base * 2**failures)``, then jitter.

    Args:
        base_millis: first delay in milliseconds.
        cap_millis: largest delay in milliseconds.
        jitter: ``"equal"`` (default: uniform in ``[d/2, d]``), ``"full"`` (uniform in
            ``[0, d]``) or ``"none"``.
    """

    def __init__(self, base_millis: float = 500, cap_millis: float = 10000, jitter: str = "equal") -> None:
        if jitter not in ("equal", "full", "none"):
            raise InvalidInputError("jitter must be 'equal', 'full' or 'none', got %r" % (jitter,))
        self._base = float(timeout_arg("base_millis", base_millis)) / 1000.0
        self._cap = float(timeout_arg("cap_millis", cap_millis)) / 1000.0
        self._jitter = jitter

    def compute(self, failures: int) -> float:
        d: float = min(self._cap, self._base * (2 ** min(max(0, failures), 30)))
        if self._jitter == "equal":
            return d / 2.0 + random.random() * d / 2.0
        if self._jitter == "full":
            return random.random() * d
        return d

    def __repr__(self) -> str:
        return "ExponentialBackoff(base_millis=%g, cap_millis=%g, jitter=%r)" % (
            self._base * 1000.0,
            self._cap * 1000.0,
            self._jitter,
        )


# --------------------------------------------------------------------------- fork hooks
