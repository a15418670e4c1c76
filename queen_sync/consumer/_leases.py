"""Leases: the renewer of ``renew_lease(True)``.

With ``renew_lease(True)`` a **renewer** thread extends every lease that still has
unfinished messages (queued or in a handler) (``POST /api/v1/lease/{leaseId}/extend``
``{"seconds": N}``, N = max(5, 3 × interval) seconds; the broker keeps the later of the
current expiry and now + N). The pop reply does not tell the queue's ``leaseTime``, which
may be shorter than the interval, so the **first** renewal of a pop's lease is sent
min(interval, 500 ms) after the pop (:meth:`Renewer.schedule_first`); each next one at half
the time the reply's ``expiresAt`` leaves, never later than ``interval_millis``.

A renewal the broker refuses (``Lease not found`` / ``Lease already expired``) is logged with
the message ids and counted; the lease's messages are then **lost to this consumer**: the
queued ones are not handled, and the ones in a handler are not acked (the broker redelivers
them, and an ack with a dead lease could only be refused); the lanes and acks read
``Lease.lost`` for that. A lease already expired at its first renewal also logs one WARNING
per consumer: use a shorter interval or a longer ``leaseTime``. Transient failures are
retried sooner than the interval, with backoff (``_outage``). An authentication refusal
(401/403) of a renewal stops the consumer with that error (reason ``"error"``), as one of a
pop or an ack does.
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Any, Optional

from .._validate import bool_arg, int_arg
from ..errors import AuthenticationError, ClientClosedError, InvalidInputError, LeaseError
from ._calls import Broker
from ._log import MAX_IDS_LOGGED, log, more
from ._outage import backoff, transient
from ._state import ConsumerState, Lease

__all__ = ["DEFAULT_RENEW_INTERVAL_MILLIS", "MIN_RENEW_INTERVAL_MILLIS", "MIN_RENEW_SECONDS", "Renewer", "renew_interval"]

#: Default lease-renewal interval of ``renew_lease(True)``, in milliseconds.
DEFAULT_RENEW_INTERVAL_MILLIS = 10_000
#: Fewest seconds one renewal asks for.
MIN_RENEW_SECONDS = 5
#: Longest delay between a pop and the first renewal of its lease, in seconds.
FIRST_RENEW_S = 0.5
#: Shortest ``renew_lease()`` interval, in milliseconds. A shorter one adds requests and no
#: safety: the broker counts leases in whole seconds (``leaseTime`` >= 1 s), the first
#: renewal is sent at most ``FIRST_RENEW_S`` after the pop whatever the interval, and every
#: renewal asks for at least ``MIN_RENEW_SECONDS``.
MIN_RENEW_INTERVAL_MILLIS = int(FIRST_RENEW_S * 1000)


def renew_interval(enabled: Any, interval_millis: Optional[int], default_millis: int) -> Optional[int]:
    """The renewal interval of ``renew_lease(enabled, interval_millis)``, in milliseconds
    (``None`` when renewal is off; ``default_millis`` when no interval is given).

    Raises:
        InvalidInputError: ``enabled`` not a bool, or ``interval_millis`` not an int of
            ``MIN_RENEW_INTERVAL_MILLIS``..31536000000 milliseconds.
    """
    bool_arg("renew_lease enabled", enabled)
    if interval_millis is not None:
        if isinstance(interval_millis, int) and not isinstance(interval_millis, bool) and interval_millis < MIN_RENEW_INTERVAL_MILLIS:
            raise InvalidInputError(
                "renew_lease interval_millis is in milliseconds and must be >= %d, got %d ms: a shorter "
                "interval only adds requests (the first renewal is sent within %d ms of the pop anyway, and "
                "each renewal extends the lease by at least %d s)"
                % (MIN_RENEW_INTERVAL_MILLIS, interval_millis, MIN_RENEW_INTERVAL_MILLIS, MIN_RENEW_SECONDS)
            )
        int_arg("interval_millis", interval_millis, MIN_RENEW_INTERVAL_MILLIS)
    if not enabled:
        return None
    return default_millis if interval_millis is None else interval_millis


class Renewer:
    """Renews the leases of one consumer (run by its own thread: :meth:`run`).

    Args:
        state: the consumer's shared state (its ``leases``, counters, stop request).
        broker: its broker calls (``renew`` only).
        interval_millis: the ``renew_lease()`` interval, in milliseconds.
        auto_ack: whether the consumer acks (else a ``Lease not found`` refusal most likely
            means the handler acked the lease itself: logged at INFO, not counted).
    """

    def __init__(self, state: ConsumerState, broker: Broker, interval_millis: int, auto_ack: bool) -> None:
        self._st = state
        self._broker = broker
        self._interval_s: float = interval_millis / 1000.0
        #: seconds asked for by each renewal: max(MIN_RENEW_SECONDS, 3 × interval)
        self.seconds: int = max(MIN_RENEW_SECONDS, int(math.ceil(3 * interval_millis / 1000.0)))
        self._auto_ack = auto_ack
        self._warned_short_lease = False

    def schedule_first(self, lease: Lease) -> None:
        """Set the first renewal of a lease just popped: soon, as the queue's leaseTime may be
        shorter than the interval. Called with the state's lock held."""
        lease.next_renew = lease.popped_at + min(self._interval_s, FIRST_RENEW_S)

    def run(self) -> None:
        """Renew every lease with unfinished messages on its own schedule: the first renewal
        soon after the pop (the queue's leaseTime is not in the pop reply and may be shorter
        than the interval), the next ones at about half the time the broker's ``expiresAt``
        leaves, never later than the interval."""
        while True:
            with self._st.lock:
                while True:
                    if self._st.stopping and self._st.fetchers_alive == 0 and self._st.outstanding == 0:
                        return
                    now = time.monotonic()
                    live = [le for le in self._st.leases.values() if not le.lost and le.live()]
                    due = [le for le in live if le.next_renew <= now]
                    if due:
                        break
                    nxt = min((le.next_renew for le in live), default=math.inf)
                    self._st.lock.wait(max(0.01, min(nxt - now, 0.5)))
            for lease in due:
                t0 = time.monotonic()
                try:
                    got = self._broker.renew(lease.lease_id, self.seconds)
                except LeaseError as exc:
                    self._st.outage.success(t0)
                    self._lease_refused(lease, exc)
                    continue
                except ClientClosedError:
                    self._st.request_stop("closed")
                    return
                except Exception as exc:
                    with self._st.lock:
                        self._st.stats.renew_failures += 1
                    if transient(exc):
                        self._st.outage.failure("lease renewal", exc, t0)
                        # retry sooner than the interval, with backoff
                        lease.next_renew = time.monotonic() + min(self._interval_s, backoff(lease.renew_attempt))
                        lease.renew_attempt += 1
                    else:
                        log.warning("renewal of lease %s (queue %r) failed: %s", lease.lease_id, self._st.queue, exc)
                        lease.next_renew = time.monotonic() + self._interval_s
                        if isinstance(exc, AuthenticationError):  # as for a pop or an ack
                            log.error("lease renewal refused (%s); stopping the consumer of queue %r", exc, self._st.queue)
                            self._st.fail(exc)
                    continue
                self._st.outage.success(t0)
                lease.renew_attempt = 0
                lease.renewed = True
                lease.next_renew = time.monotonic() + self._next_renewal_delay(got)
                with self._st.lock:
                    self._st.stats.renewals += 1

    def _next_renewal_delay(self, reply: Any) -> float:
        """Seconds until the next renewal of a lease just renewed: half the time the reply's
        ``expiresAt`` leaves (read with the local clock), at most the interval. A reply
        leaving less than half the seconds asked for can only come from clock skew (the
        broker keeps the later of the current expiry and now + seconds): then the interval."""
        expires = reply.get("expiresAt") if isinstance(reply, dict) else None
        if not isinstance(expires, str):
            return self._interval_s
        try:
            when = datetime.datetime.fromisoformat(expires.replace("Z", "+00:00"))
        except ValueError:
            return self._interval_s
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        remaining = when.timestamp() - time.time()
        if remaining < self.seconds / 2.0:
            return self._interval_s
        return min(self._interval_s, remaining / 2.0)

    def _lease_refused(self, lease: Lease, exc: LeaseError) -> None:
        with self._st.lock:
            # An ack of ours may have released the lease meanwhile: let it finish first.
            deadline = time.monotonic() + 5.0
            self._st.settle_waiters += 1
            try:
                while lease.acks_in_flight > 0 and time.monotonic() < deadline:
                    self._st.lock.wait(0.05)
            finally:
                self._st.settle_waiters -= 1
            if not lease.live():
                return  # released by our own acks / nacks: nothing lost
            if not self._auto_ack and exc.error == "Lease not found":
                # The handler owns acks: it probably acked (and so released) the lease itself.
                lease.lost = True
                quiet = True
            else:
                lease.lost = True
                quiet = False
                self._st.stats.renew_failures += 1
            txids = lease.txids()
            first = not lease.renewed and not self._warned_short_lease
            if first:
                self._warned_short_lease = True
        if quiet:
            log.info("lease %s of queue %r is no longer held (acked by the handler?); not renewing it", lease.lease_id, self._st.queue)
            return
        if first:
            log.warning(
                "the lease of a pop from queue %r had already expired at its first renewal, %d ms after the pop "
                "(%s): the queue's leaseTime is shorter than that; use a shorter renew_lease() interval "
                "(now %d ms) or a longer leaseTime for the queue (logged once per consumer)",
                self._st.queue,
                int((time.monotonic() - lease.popped_at) * 1000),
                exc.error,
                int(self._interval_s * 1000),
            )
        shown = ", ".join(txids[:MAX_IDS_LOGGED]) + more(len(txids))
        log.warning(
            "renewal of lease %s (queue %r) refused by the broker (%s): its messages are lost to this consumer "
            "and will not be acked (the broker redelivers them); transactionIds: %s",
            lease.lease_id,
            self._st.queue,
            exc.error,
            shown,
        )
