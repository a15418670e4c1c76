"""Broker outages: which failures are retried, the backoff between tries, logging an outage once.

Connection errors, timeouts, 5xx and 429 replies (broker restarts) are retried forever with
capped, jittered exponential backoff (:data:`BACKOFF_BASE_SECONDS` doubling up to
:data:`BACKOFF_CAP_SECONDS`), for pops, acks and renewals alike (:func:`transient`,
:func:`backoff`). An outage is logged once (:class:`Outage`): a WARNING when it starts and
an INFO when the broker answers again. Authentication errors and other refusals are not
transient: a refused pop stops the consumer with that exception (see ``_fetching``), and so
does an authentication refusal (401/403) of an ack, a release or a renewal (``_acks``,
``_leases``). While
an outage is active, ``idle_millis`` passing stops the consumer with reason
``"unreachable"`` rather than ``"idle"`` (see ``_stopping``).

:func:`maybe_sent` tells a failure whose request may have reached the broker (a lost reply:
resending could apply it twice) from one that surely did not (see ``_acks``).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Optional

from ..errors import AuthenticationError, ClientClosedError, QueenConnectionError, QueenHTTPError, RouteNotFoundError
from ._log import log

#: First retry delay after a connection error, in seconds (doubles per failure, with jitter).
BACKOFF_BASE_SECONDS = 0.2
#: Longest retry delay after connection errors, in seconds.
BACKOFF_CAP_SECONDS = 5.0


class Outage:
    """Logs a broker outage once: WARNING when it starts, INFO when it ends.

    ``active`` is True from the first failure until a call sent after it got an answer;
    ``last_error`` is the last failure seen. Thread-safe.
    """

    def __init__(self, queue: str) -> None:
        self._queue = queue
        self._lock = threading.Lock()
        self.active = False
        self._since = 0.0
        self._ended = 0.0  # when the last outage ended (time.monotonic())
        self._failures = 0
        self.last_error: Optional[BaseException] = None

    def for_seconds(self) -> float:
        """How long the outage has been going on, in seconds (0.0 when none is)."""
        with self._lock:
            return time.monotonic() - self._since if self.active else 0.0

    def failure(self, what: str, exc: BaseException, started: Optional[float] = None) -> None:
        """A ``what`` call (``"pop"``, ``"ack"``, ``"lease renewal"``...) sent at ``started``
        (time.monotonic(), when known) failed with a transient ``exc``. A call sent before
        the last outage ended does not start a new one: its failure belongs to that outage
        (it was in flight while the broker was away), so an outage is logged once."""
        with self._lock:
            self._failures += 1
            self.last_error = exc
            if not self.active and started is not None and started < self._ended:
                log.debug("%s for queue %r sent during the last outage failed: %s", what, self._queue, exc)
                return
            if self.active:
                log.debug("%s for queue %r failed again: %s", what, self._queue, exc)
                return
            self.active = True
            self._since = time.monotonic()
            self._failures = 1
        log.warning(
            "cannot reach the Queen broker (%s for queue %r failed: %s); retrying with backoff until it answers",
            what,
            self._queue,
            exc,
        )

    def success(self, started: float) -> None:
        """A call that was sent at ``started`` (time.monotonic()) got an answer. Only a call
        sent after the outage began ends it (an answer to an older call says nothing)."""
        if not self.active:
            return
        with self._lock:
            if not self.active or started < self._since:
                return
            self.active = False
            self._ended = time.monotonic()
            took = self._ended - self._since
            n = self._failures
        log.info("the Queen broker answers again (queue %r): outage of %.1f s, %d failed calls", self._queue, took, n)


def transient(exc: BaseException) -> bool:
    """Connection problems, timeouts, 5xx and 429: worth retrying (a broker restart)."""
    if isinstance(exc, ClientClosedError):
        return False
    if isinstance(exc, QueenConnectionError):
        return True
    if isinstance(exc, QueenHTTPError) and not isinstance(exc, (AuthenticationError, RouteNotFoundError)):
        status = exc.status or 0
        return status == 429 or status >= 500
    return False


def maybe_sent(exc: BaseException) -> bool:
    """Whether a failed call may have reached the broker (a lost reply) rather than surely not
    (connection refused, connect timeout, 429 / 502 / 503 from a proxy or the broker)."""
    sent = getattr(exc, "sent", None)
    if isinstance(sent, bool):
        return sent
    if isinstance(exc, QueenHTTPError):
        return exc.status not in (429, 502, 503)
    text = str(exc)
    return not (
        text.startswith("cannot connect")
        or text.startswith("connect to the Queen broker")
        or text.endswith("the connection pool was closed")
    )


def backoff(attempt: int) -> float:
    """Capped exponential backoff with equal jitter, in seconds: in [d/2, d]."""
    d: float = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * (2 ** min(attempt, 20)))
    return d / 2.0 + random.random() * d / 2.0
