"""Which failed attempts are retried: the retry policies (``RETRY_*``, one per kind of
call), :class:`_Attempt` (one failed attempt: was it sent, may it fail over, its status),
:func:`_may_retry` (the policy table of :mod:`queen_sync.transport`, row by row) and
``Retry-After`` parsing. The loop that acts on them is :meth:`Transport.request`.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Optional

from ..errors import QueenConnectionError

__all__ = [
    "RETRY_ALWAYS",
    "RETRY_IF_ANSWERED",
    "RETRY_IF_UNSENT",
    "RETRY_PUSH",
    "DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS",
]

#: Retry policy of idempotent calls (push, GET reads, configure, delete, lease extend).
RETRY_ALWAYS = "always"
#: Retry policy of pop: retried before sending and after a refusal reply (5xx but 504, 429),
#: never after a lost reply.
RETRY_IF_ANSWERED = "answered"
#: Retry policy of ack / transaction / seek to end: retried only before sending or after 429 / 503.
RETRY_IF_UNSENT = "unsent"
#: Retry policy of push: as :data:`RETRY_ALWAYS`, plus a reply the ``accept`` check refuses
#: (an empty or garbled 200 body), and retried for ``push_retry_timeout_millis`` rather than
#: ``retry_attempts`` times (see :mod:`queen_sync.transport`).
RETRY_PUSH = "push"
_POLICIES = (RETRY_ALWAYS, RETRY_IF_ANSWERED, RETRY_IF_UNSENT, RETRY_PUSH)

#: Default push retry budget, in milliseconds (see :mod:`queen_sync.transport`, "Push retry budget").
DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS = 15000

_REFUSED_STATUSES = (429, 503)


class _Attempt(Exception):
    """Internal: one failed attempt, with what the retry loop needs to know."""

    def __init__(
        self,
        error: Exception,
        *,
        sent: bool,
        failover: bool,
        status: Optional[int] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent
        self.failover = failover
        self.status = status
        if isinstance(error, QueenConnectionError):
            error.sent = sent
        self.retry_after = retry_after


def _may_retry(policy: str, failed: _Attempt) -> bool:
    if not failed.sent:
        return True
    st = failed.status
    if st is not None:
        if st in _REFUSED_STATUSES:
            return True
        if policy in (RETRY_ALWAYS, RETRY_PUSH):
            return st >= 500
        if policy == RETRY_IF_ANSWERED:
            return st >= 500 and st != 504
        return False
    return policy in (RETRY_ALWAYS, RETRY_PUSH)


def _parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds (delta-seconds, a decimal, or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        s = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        s = when.timestamp() - time.time()
    if s != s:  # NaN
        return None
    return max(0.0, s)
