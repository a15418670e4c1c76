"""The thread-pool consume loop behind :meth:`QueueBuilder.consume`.

How it works
------------
A :class:`Consumer` runs three kinds of threads:

* ``concurrency`` **fetchers** pop from the broker (``GET /api/v1/pop/...``). Before a pop a
  fetcher reserves room for ``batch`` messages, so at most ``concurrency × batch`` popped
  messages are held in memory; with ``limit(n)`` it also reserves its share of the limit
  (the limit never overshoots). Long polls are capped at :data:`POLL_CAP_MILLIS` (and at
  the idle time left) so that a stop is prompt. Fetcher 0 always polls; the others rest
  after an empty pop until some pop brings messages again, so an idle consumer sends one
  long poll at a time.
* ``concurrency`` **workers** (a thread pool) run the handler. A pop is split per
  partition (a pop with ``partitions(n)`` can span several) into a per-partition *lane*;
  a lane is run by one worker at a time, in pop order, so within one partition handling
  order equals push order and two messages of one partition are never handled at the
  same time, while different partitions run in parallel.
* with ``renew_lease(True)``, a **renewer** extends every lease that still has unfinished
  messages (queued or in a handler) (``POST /api/v1/lease/{leaseId}/extend``
  ``{"seconds": N}``, N = max(5, 3 × interval) seconds; the broker keeps the later of the
  current expiry and now + N). The pop reply does not tell the queue's ``leaseTime``, which
  may be shorter than the interval, so the **first** renewal of a pop's lease is sent
  min(interval, 500 ms) after the pop; each next one at half the time the reply's
  ``expiresAt`` leaves, never later than ``interval_millis``. A renewal the broker refuses
  (``Lease not found`` / ``Lease already expired``) is logged with the message ids and
  counted; the lease's messages are then **lost to this consumer**: the queued ones are
  not handled, and the ones in a handler are not acked (the broker redelivers them, and an
  ack with a dead lease could only be refused). A lease already expired at its first
  renewal also logs one WARNING per consumer: use a shorter interval or a longer
  ``leaseTime``.

Acks
----
With auto-ack (the default) a handler that returns acks ``completed`` and a handler that
raises nacks ``failed`` with the exception text (the broker redelivers until the queue's
``retryLimit``, then moves the message to the dead-letter queue); in ``each()`` mode the
later messages of a nacked partition in the same pop are skipped (the broker redelivers
them). Every ack verdict is read: one the broker refuses (``Invalid or expired lease``,
``Message not found``) is logged with the message ids and counted as an ack failure, never
as success. Every handler failure is logged at WARNING with its traceback and the message
ids (queue, partition, transactionId; never payloads). ``auto_ack(False)`` leaves acks to
the handler (a handler exception then stops the consumer and is re-raised);
``on_success(cb)`` / ``on_error(cb)`` also turn auto-ack off and let the callbacks ack.

Lost ack replies: the broker releases a partition's lease once it has counted as many acks
as the pop delivered messages of that partition, and it counts a resent copy twice. So in
``each()`` mode an ack whose reply was lost while later messages of the same partition and
pop are still to be acked is **not** resent (a copy that did land would free the lease while
the batch is still being handled); it counts in ``ack_uncertain`` until a later ack of the
partition moves its cursor past it (then in ``acked``). If the reply to the last ack of the
batch says the lease is still held (a lost ack never arrived), the last message is acked
again, at most once per such ack, until the broker releases the lease (an earlier ack is not
resent: it would move the partition's cursor back). Any other ack, nack or release whose
reply was lost is resent; a resent copy refused with ``Invalid or expired lease`` means the
first copy landed (it released the lease) and counts as done.

Outages
-------
Connection errors, timeouts, 5xx and 429 replies (broker restarts) are retried forever with
capped, jittered exponential backoff (:data:`BACKOFF_BASE_SECONDS` doubling up to
:data:`BACKOFF_CAP_SECONDS`), for pops, acks and renewals alike. An outage is logged once: a
WARNING when it starts and an INFO when the broker answers again. Authentication errors and
other refusals of a pop stop the consumer with that exception. When ``idle_millis`` passes
while an outage is in progress (no call got an answer since it began), the consumer stops
with reason ``"unreachable"`` and the last connection error as its :attr:`Consumer.error`
(the blocking form raises it, :meth:`Consumer.join` re-raises it): "no work" and "broker
down" are told apart.

Stopping
--------
A consumer stops on ``limit``, ``idle_millis`` without messages, a ``stop_event``,
:meth:`Queen.close` (which stops the client's consumers gracefully before closing, with its
close timeout as drain timeout), :meth:`Consumer.stop`, ``KeyboardInterrupt`` (blocking
``consume()``) or, with ``handle_signals=True``, SIGTERM / SIGINT. Stopping means: no new
pop is started; messages of a pop that comes back after the stop request are released at once (ack status
``retry``: the broker redelivers them without counting a retry); messages popped before it
are handled and acked, up to the drain timeout (seconds); at the drain timeout the messages
not yet given to a handler are released the same way, **except** those of a partition whose
handler is still running: releasing them would free the partition (the lease is per
partition) while its handler runs, so they are released only once that handler has
returned and been acked. Handlers still running are left to finish (their acks still go
out; :attr:`Consumer.is_running` stays True until then). ``released`` counts only releases
the broker confirmed. Every wait of a stop is bounded (in-flight pops and releases
included). :meth:`Queen.close` shares its one close deadline with the consumers: their
drain ends a little before it (to leave time for the releases), and a handler still running
at the deadline is abandoned: its ack fails once the transport is closed and the broker
redelivers its message (and the ones queued behind it) when the lease expires.

Fork
----
A process forked from one running a consumer gets a copy without threads: there
:attr:`Consumer.is_running` is False, :meth:`Consumer.stop` / :meth:`Consumer.join` /
``with consumer:`` / :meth:`Queen.close` return at once, and nothing is acked or released
(the leases belong to the parent, whose consumer goes on).

Logging goes to the ``queen_sync.consumer`` logger.
"""

from __future__ import annotations

import collections
import datetime
import logging
import math
import os
import random
import signal
import threading
import time
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Set

from .builders import PopSpec, execute_pop
from .tracing import bind_messages
from .errors import (
    AckError,
    AuthenticationError,
    ClientClosedError,
    InvalidInputError,
    LeaseError,
    QueenConnectionError,
    QueenHTTPError,
    RouteNotFoundError,
)

if TYPE_CHECKING:  # pragma: no cover
    from .builders import QueueBuilder
    from .client import Queen

__all__ = [
    "Consumer",
    "ConsumeResult",
    "DEFAULT_RENEW_INTERVAL_MILLIS",
    "DEFAULT_DRAIN_TIMEOUT_SECONDS",
    "POLL_CAP_MILLIS",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
]

log = logging.getLogger("queen_sync.consumer")

Message = Dict[str, Any]

#: Default lease-renewal interval of ``renew_lease(True)``, in milliseconds.
DEFAULT_RENEW_INTERVAL_MILLIS = 10_000
#: Default drain timeout of a stop, in seconds.
DEFAULT_DRAIN_TIMEOUT_SECONDS = 30.0
#: Longest long poll a consumer sends, in milliseconds (keeps stop() prompt).
POLL_CAP_MILLIS = 1000
#: First retry delay after a connection error, in seconds (doubles per failure, with jitter).
BACKOFF_BASE_SECONDS = 0.2
#: Longest retry delay after connection errors, in seconds.
BACKOFF_CAP_SECONDS = 5.0

_MIN_RENEW_SECONDS = 5
#: Longest delay between a pop and the first renewal of its lease, in seconds.
_FIRST_RENEW_S = 0.5
_MAX_ERROR_TEXT = 1000
_NO_WAIT_PAUSE_S = 0.1
_TICK_S = 0.1
_MAX_IDS_LOGGED = 10
_INVALID_LEASE = "Invalid or expired lease"
#: How long a stop waits for in-flight pops past the drain deadline, in seconds (a pop's
#: long poll is capped at POLL_CAP_MILLIS); after that the stop goes on without them.
_FETCH_GRACE_S = POLL_CAP_MILLIS / 1000.0 + 1.0
#: How long stop() waits past the drain deadline for the stop phase (the fetcher grace plus
#: the release of the messages not handled), in seconds.
_STOP_GRACE_S = _FETCH_GRACE_S + 3.0
#: Part of Queen.close()'s timeout kept for the final releases after the consumers' drain
#: deadline, in seconds (at most a quarter of the timeout).
_CLOSE_RELEASE_RESERVE_S = 1.0

# Consumers started in this process, for Queen.close() (see stop_consumers_for_close).
_registry: "weakref.WeakSet[Consumer]" = weakref.WeakSet()
_registry_lock = threading.Lock()


def _reinit_after_fork() -> None:
    # a parent thread may have held the lock at fork time: the child gets a fresh one
    global _registry_lock
    _registry_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


@dataclass
class ConsumeResult:
    """What a consume() run did (also the live counters of a :class:`Consumer`).

    Attributes:
        handled: messages delivered to the handler (failures included).
        failed: messages whose handler call raised.
        acked: messages the consumer acked ``completed`` and the broker accepted (auto-ack).
        nacked: messages the consumer nacked ``failed`` and the broker accepted (auto-ack).
        ack_failures: acks / nacks / releases the broker refused or that could not be sent
            (each logged with the message ids).
        ack_uncertain: ``completed`` acks whose reply was lost and that were not resent (see
            "Acks" in :mod:`queen_sync.consumer`), not yet confirmed by a later ack of the same
            partition; once confirmed they move to ``acked``. Those left at the end may or
            may not have been applied (if not, the broker redelivers the message).
        skipped: messages not delivered because an earlier message of the same partition in
            the same pop was nacked (the broker redelivers them).
        renewals: lease renewals the broker accepted.
        renew_failures: lease renewals that were refused or could not be sent.
        lost: messages given up because their lease was lost (refused renewal or an ack
            refused with ``Invalid or expired lease``): not handled, or handled but not acked.
        released: popped messages handed back unhandled (ack status ``retry``) because the
            consumer was stopping, counted only when the broker confirmed the release (a
            release that failed counts in ``ack_failures``: the broker redelivers those
            messages once their lease expires).
        reason: why it stopped: ``"limit"``, ``"idle"``, ``"stopped"`` (stop_event or
            :meth:`Consumer.stop`), ``"signal"``, ``"interrupted"`` (KeyboardInterrupt),
            ``"closed"`` (client closed), ``"unreachable"`` (``idle_millis`` passed while the
            broker could not be reached: see :attr:`Consumer.error`) or ``"error"``; ``""``
            while running.
    """

    handled: int = 0
    failed: int = 0
    acked: int = 0
    nacked: int = 0
    ack_failures: int = 0
    ack_uncertain: int = 0
    skipped: int = 0
    renewals: int = 0
    renew_failures: int = 0
    lost: int = 0
    released: int = 0
    reason: str = ""


class _Lease:
    """Bookkeeping of one pop's lease (shared by every partition of that pop)."""

    __slots__ = ("lease_id", "outstanding", "released", "acks_in_flight", "lost", "txids", "next_renew",
                 "renewed", "renew_attempt", "popped_at")

    def __init__(self, lease_id: str) -> None:
        self.lease_id = lease_id
        self.outstanding: Dict[Any, int] = {}  # partitionId -> unfinished messages
        self.released: Set[Any] = set()  # partitions this consumer released (nack / retry)
        self.acks_in_flight = 0
        self.lost = False
        self.txids: List[str] = []
        self.popped_at = time.monotonic()
        self.next_renew = math.inf  # time.monotonic() of the next renewal (renew_lease(True))
        self.renewed = False  # a renewal of this lease was accepted
        self.renew_attempt = 0  # failed renewals in a row (backoff)

    def live(self) -> bool:
        return any(n > 0 and pid not in self.released for pid, n in self.outstanding.items())


class _Unit:
    """The messages of one partition from one pop, handled in order."""

    __slots__ = ("pid", "msgs", "lease", "pos", "unsure", "unconfirmed")

    def __init__(self, pid: Any, msgs: List[Message], lease: Optional[_Lease]) -> None:
        self.pid = pid
        self.msgs = msgs
        self.lease = lease
        self.pos = 0  # index of the first message not yet given to the handler
        # acks of this unit whose reply was lost and that were not resent: ``unsure`` may be
        # missing from the broker's count of the partition's batch (its lease stays held
        # until the count is complete); ``unconfirmed`` are not yet covered by a later ack
        self.unsure = 0
        self.unconfirmed = 0


class _Lane:
    """The units of one partition; run by one worker at a time."""

    __slots__ = ("pid", "units", "running", "queued")

    def __init__(self, pid: Any) -> None:
        self.pid = pid
        self.units: Deque[_Unit] = collections.deque()
        self.running = False
        self.queued = False


class _Outage:
    """Logs a broker outage once: WARNING when it starts, INFO when it ends."""

    def __init__(self, queue: str) -> None:
        self._queue = queue
        self._lock = threading.Lock()
        self.active = False
        self._since = 0.0
        self._failures = 0
        self.last_error: Optional[BaseException] = None

    def failure(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            self.last_error = exc
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
            took = time.monotonic() - self._since
            n = self._failures
        log.info("the Queen broker answers again (queue %r): outage of %.1f s, %d failed calls", self._queue, took, n)


def _transient(exc: BaseException) -> bool:
    """Connection problems, timeouts, 5xx and 429: worth retrying (a broker restart)."""
    if isinstance(exc, ClientClosedError):
        return False
    if isinstance(exc, QueenConnectionError):
        return True
    if isinstance(exc, QueenHTTPError) and not isinstance(exc, (AuthenticationError, RouteNotFoundError)):
        status = exc.status or 0
        return status == 429 or status >= 500
    return False


def _maybe_sent(exc: BaseException) -> bool:
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


def _moved_cursor(results: Optional[List[Dict[str, Any]]], ok: bool) -> bool:
    """Whether an ack's results show it moved the partition's cursor: every item accepted and
    applied (not an unresent ack whose reply was lost), as ``completed`` or as a nack that
    moved the message to the dead-letter queue."""
    if not results or any(r.get("success") is not True or r.get("uncertain") for r in results):
        return False
    return ok or all(r.get("dlq") is True for r in results)


def _backoff(attempt: int) -> float:
    """Capped exponential backoff with equal jitter, in seconds: in [d/2, d]."""
    d: float = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * (2 ** min(attempt, 20)))
    return d / 2.0 + random.random() * d / 2.0


def _ids(msgs: List[Message]) -> str:
    shown = ", ".join(
        "%s (partition %s, lease %s)" % (m.get("transactionId"), m.get("partition") or m.get("partitionId"), m.get("leaseId"))
        for m in msgs[:_MAX_IDS_LOGGED]
    )
    if len(msgs) > _MAX_IDS_LOGGED:
        shown += " and %d more" % (len(msgs) - _MAX_IDS_LOGGED)
    return shown


def _consumers_of(client: "Queen") -> List["Consumer"]:
    """The consumers of ``client`` running in this process (started, not ended, not a
    forked child's copy)."""
    with _registry_lock:
        found = [c for c in _registry if c._client is client]
    return [c for c in found if c._started and not c._done.is_set() and not c._forked()]


def in_consumer_thread(client: "Queen") -> bool:
    """True when the calling thread is a thread of a consumer of ``client`` (a handler or
    callback runs in one): such a thread must not wait for that consumer to end."""
    me = threading.get_ident()
    return any(me in c._thread_ids for c in _consumers_of(client))


def stop_consumers_for_close(
    client: "Queen", timeout_millis: int, deadline: Optional[float] = None
) -> Callable[[], None]:
    """Used by :meth:`Queen.close`: ask every consumer of ``client`` running in this process
    to stop gracefully now (reason ``"closed"``: no new pop, popped messages are handled and
    acked, the ones not given to a handler by the drain deadline are released).

    The drain deadline is the close deadline minus a reserve for those final releases
    (:data:`_CLOSE_RELEASE_RESERVE_S`, at most a quarter of the timeout), so they are sent
    while the transport is still open.

    Args:
        client: the :class:`~queen_sync.Queen` being closed.
        timeout_millis: the close timeout, in milliseconds.
        deadline: the close deadline (a ``time.monotonic()`` value); default: now +
            ``timeout_millis``.

    Returns:
        a function that waits until those consumers ended or the deadline passed, whichever
        comes first (a handler still running then is abandoned: its ack fails once the
        transport is closed, and the broker redelivers its message when the lease expires);
        it never waits for the consumer whose thread calls it (a handler calling close()).
        Sends nothing itself.
    """
    timeout_s = timeout_millis / 1000.0
    if deadline is None:
        deadline = time.monotonic() + timeout_s
    left = max(0.0, deadline - time.monotonic())
    drain_s = max(0.0, left - min(_CLOSE_RELEASE_RESERVE_S, left / 4.0))
    consumers = _consumers_of(client)
    for c in consumers:
        c._request_stop("closed", drain_s)

    def wait() -> None:
        me = threading.get_ident()
        for c in consumers:
            if me in c._thread_ids:
                continue
            if not c._done.wait(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "closing the client: the consumer of queue %r still has a handler running at the close "
                    "deadline (%d ms); it is abandoned: its ack will fail and the broker redelivers its "
                    "message(s) once their lease expires",
                    c._queue,
                    timeout_millis,
                )

    return wait


class Consumer:
    """A consume loop over one queue builder's settings; see :meth:`QueueBuilder.consume`.

    Made by ``consume(handler)`` (blocking: :meth:`run`) or ``consume(handler,
    background=True)`` (started, returned to the caller).

    Args:
        client: the :class:`~queen_sync.Queen` client.
        builder: the :class:`~queen_sync.builders.QueueBuilder` with the pop / consume settings
            (``concurrency``, ``batch``, ``partitions``, ``each``, ``limit``, ``idle_millis``,
            ``auto_ack``, ``renew_lease``, ``on_success``, ``on_error``, ...).
        handler: called with one message dict (``each()`` or ``batch == 1``), else with the
            list of one partition's messages of one pop.
        stop_event: optional ``threading.Event``; setting it stops the consumer (checked at
            least every 100 ms).
        handle_signals: turn SIGTERM / SIGINT into a graceful stop while the consumer runs
            (a second signal goes to the previous handler); the previous handlers are
            restored when it ends. Main thread only.
        drain_timeout: seconds a stop waits for popped messages to be handled and acked
            (default 30.0).

    Raises:
        InvalidInputError: handler not callable, ``handle_signals`` outside the main
            thread, or a negative drain timeout.

    Live counters (ints): :attr:`handled`, :attr:`acked`, :attr:`nacked`, :attr:`failed`,
    :attr:`skipped`, :attr:`renewals`, :attr:`ack_failures`, :attr:`ack_uncertain`,
    :attr:`renew_failures`, :attr:`lost`, :attr:`released`; :attr:`result` is a snapshot :class:`ConsumeResult`.
    """

    def __init__(
        self,
        client: "Queen",
        builder: "QueueBuilder",
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[threading.Event] = None,
        handle_signals: bool = False,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT_SECONDS,
    ) -> None:
        if not callable(handler):
            raise InvalidInputError("consume() needs a callable handler, got %r" % (handler,))
        if isinstance(drain_timeout, bool) or not isinstance(drain_timeout, (int, float)) or drain_timeout < 0:
            raise InvalidInputError("drain_timeout must be a number of seconds >= 0, got %r" % (drain_timeout,))
        if not isinstance(handle_signals, bool):
            raise InvalidInputError("handle_signals must be True or False, got %r" % (handle_signals,))
        if handle_signals and threading.current_thread() is not threading.main_thread():
            raise InvalidInputError("handle_signals=True works only in the main thread (Python signal rules)")
        self._client = client
        self._handler = handler
        self._spec: PopSpec = builder.pop_spec(for_consume=True)
        self._queue = self._spec.queue
        self._each: bool = bool(builder._each) or self._spec.batch == 1
        self._single_when_one = self._spec.batch == 1
        self._on_success: Optional[Callable[[Any, Any], Any]] = getattr(builder, "_on_success", None)
        self._on_error: Optional[Callable[[Any, BaseException], Any]] = getattr(builder, "_on_error", None)
        has_callbacks = self._on_success is not None or self._on_error is not None
        self._auto_ack: bool = False if has_callbacks else (True if builder._auto_ack is None else builder._auto_ack)
        renew_ms: Optional[int] = getattr(builder, "_renew_interval", None) if getattr(builder, "_renew", False) else None
        self._renew_s: Optional[float] = None if renew_ms is None else renew_ms / 1000.0
        self._renew_seconds: int = (
            max(_MIN_RENEW_SECONDS, int(math.ceil(3 * renew_ms / 1000.0))) if renew_ms is not None else 0
        )
        self._limit: Optional[int] = builder._limit
        self._idle_s: Optional[float] = None if builder._idle is None else builder._idle / 1000.0
        self._concurrency: int = builder._concurrency
        self._user_stop = stop_event
        self._handle_signals = handle_signals
        self._drain_timeout = float(drain_timeout)

        self._lock = threading.Condition(threading.Lock())
        self._stats = ConsumeResult()
        self._error: Optional[BaseException] = None
        self._started = False
        self._stopping = False
        self._stop_evt = threading.Event()
        self._abort = False
        self._abort_evt = threading.Event()
        self._drain_deadline = math.inf
        self._finished = threading.Event()  # stop phase over (drained or drain timeout)
        self._done = threading.Event()  # every thread of this consumer ended
        self._threads: List[threading.Thread] = []
        self._threads_alive = 0
        self._thread_ids: Set[int] = set()
        self._fetchers_alive = 0
        self._pops_in_flight = 0
        self._pid = os.getpid()  # the process whose threads run this consumer
        self._free_slots = self._concurrency * self._spec.batch
        self._reserved = 0
        self._outstanding = 0
        self._leases: Dict[str, _Lease] = {}
        self._lanes: Dict[Any, _Lane] = {}
        self._runq: Deque[_Lane] = collections.deque()
        self._work_gen = 0
        self._last_activity = time.monotonic()
        self._outage = _Outage(self._queue)
        self._warned_short_lease = False
        self._signal_flag: Optional[int] = None
        self._prev_handlers: Dict[int, Any] = {}
        self._signals_installed = False

    def __repr__(self) -> str:
        return "Consumer(queue=%r, group=%r, concurrency=%d, %s)" % (
            self._queue,
            self._spec.group,
            self._concurrency,
            "running" if self.is_running else ("stopped: %s" % self._stats.reason if self._started else "not started"),
        )

    # ------------------------------------------------------------------ public API

    def _forked(self) -> bool:
        """True in a process forked from the one running this consumer: its copy here has no
        threads (and its lock may have been held at fork time), so it is left alone."""
        return self._started and os.getpid() != self._pid

    @property
    def is_running(self) -> bool:
        """True from start until every thread of the consumer ended (handlers included).
        False in a forked child (the copy there has no threads)."""
        return self._started and not self._done.is_set() and not self._forked()

    @property
    def result(self) -> ConsumeResult:
        """A snapshot of the counters and the stop reason (``""`` while running)."""
        if self._forked():
            return replace(self._stats)  # no lock: a parent thread may have held it at fork
        with self._lock:
            return replace(self._stats)

    @property
    def error(self) -> Optional[BaseException]:
        """The exception that stopped the consumer, else None: for reason ``"error"`` the
        handler's or pop's exception, for reason ``"unreachable"`` the last connection error
        (a :class:`~queen_sync.errors.QueenConnectionError`, or the
        :class:`~queen_sync.errors.QueenHTTPError` of a 5xx / 429 reply)."""
        return self._error

    @property
    def reason(self) -> str:
        """Why the consumer stopped (see :class:`ConsumeResult`); ``""`` while running."""
        return self._stats.reason

    handled = property(lambda self: self._stats.handled, doc="Messages delivered to the handler.")
    acked = property(lambda self: self._stats.acked, doc="Messages acked completed (auto-ack).")
    nacked = property(lambda self: self._stats.nacked, doc="Messages nacked failed (auto-ack).")
    failed = property(lambda self: self._stats.failed, doc="Messages whose handler raised.")
    skipped = property(lambda self: self._stats.skipped, doc="Messages skipped after a nack.")
    renewals = property(lambda self: self._stats.renewals, doc="Lease renewals accepted.")
    ack_failures = property(lambda self: self._stats.ack_failures, doc="Acks refused or not sent.")
    ack_uncertain = property(
        lambda self: self._stats.ack_uncertain, doc="Acks whose reply was lost, not (yet) confirmed."
    )
    renew_failures = property(lambda self: self._stats.renew_failures, doc="Renewals refused or not sent.")
    lost = property(lambda self: self._stats.lost, doc="Messages given up after their lease was lost.")
    released = property(lambda self: self._stats.released, doc="Messages released unhandled at stop.")

    def run(self) -> ConsumeResult:
        """Run in the calling thread until a stop condition; return the :class:`ConsumeResult`.

        On ``KeyboardInterrupt`` the consumer stops gracefully (drain timeout applies; a
        second interrupt aborts the drain) and the KeyboardInterrupt is re-raised.

        Raises:
            the handler's exception (``auto_ack(False)`` without ``on_error``), a pop error
            that is not a transient connection problem (e.g. AuthenticationError, BrokerError),
            or, when ``idle_millis`` passed while the broker was unreachable (reason
            ``"unreachable"``), the last connection error (QueenConnectionError, or the
            QueenHTTPError of a 5xx / 429 reply).
        """
        self._install_signals()
        try:
            self._start_threads()
            try:
                self._supervise()
            except KeyboardInterrupt:
                if self._stopping:  # interrupted while already stopping: abort the drain
                    log.info("consumer of queue %r interrupted again; releasing what is not handled yet", self._queue)
                    self._request_stop("interrupted", 0.0)
                else:
                    log.info("consumer of queue %r interrupted; stopping gracefully", self._queue)
                    self._request_stop("interrupted")
                self._finish()
                raise
        finally:
            self._restore_signals()
        if self._error is not None:
            raise self._error
        return self.result

    def start(self) -> "Consumer":
        """Start the consumer in background threads and return it (used by
        ``consume(handler, background=True)``)."""
        self._install_signals()
        try:
            self._start_threads()
        except BaseException:
            self._restore_signals()
            raise
        t = threading.Thread(target=self._thread_main, args=(self._supervise,),
                             name="queen-consume-%s-supervisor" % self._queue, daemon=True)
        self._add_thread(t)
        return self

    def stop(self, drain_timeout: Optional[float] = None) -> ConsumeResult:
        """Stop gracefully and return the :class:`ConsumeResult`.

        No new pop is started; in-flight pops finish (at most ~1 s, long polls are capped at
        :data:`POLL_CAP_MILLIS`) and their messages are released unhandled; messages popped
        before are handled and acked until ``drain_timeout`` **seconds** (default: the
        consumer's, 30.0) have passed; then the ones not yet given to a handler are released
        (ack status ``retry``), except those queued behind a handler of the same partition
        that is still running: they are released once that handler has returned (releasing
        them earlier would free the partition while its handler runs). Handlers still running
        are left to finish in the background (see :meth:`join`; :attr:`released` and the
        other counters keep changing until then). Idempotent. Does not raise the consumer's error (see
        :attr:`error`, :meth:`join`). Called from inside a handler, it only requests the stop.

        The wait is bounded: if the stop phase has not ended after the drain timeout (a pop
        or release stuck in the
        network), about 5 s past it, a WARNING is logged and the counters so far are returned.

        In a process forked from the one running the consumer (its copy there has no
        threads) it returns the counters at once and sends nothing: the leases belong to
        the parent.
        """
        if drain_timeout is not None and (
            isinstance(drain_timeout, bool) or not isinstance(drain_timeout, (int, float)) or drain_timeout < 0
        ):
            raise InvalidInputError("drain_timeout must be a number of seconds >= 0, got %r" % (drain_timeout,))
        if self._forked():
            self._restore_signals()
            return self.result
        self._request_stop("stopped", drain_timeout)
        if not self._started:
            self._stats.reason = self._stats.reason or "stopped"
            return self.result
        if threading.get_ident() not in self._thread_ids:
            if not self._wait_finished():
                log.warning(
                    "stop() of the consumer of queue %r gave up waiting %.1f s after the drain timeout; "
                    "it goes on stopping in the background",
                    self._queue,
                    _STOP_GRACE_S,
                )
            if self._done.is_set():
                self._restore_signals()
        return self.result

    def _wait_finished(self, extra: float = _STOP_GRACE_S) -> bool:
        """Wait until the stop phase is over, at most ``extra`` seconds past the drain
        deadline (which a later stop may move earlier). True when it is over."""
        while not self._finished.wait(_TICK_S):
            if time.monotonic() > self._drain_deadline + extra:
                return self._finished.is_set()
        return True

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` **seconds** (None: forever) until every thread of the consumer
        ended. Returns True when it has ended, False on timeout.

        In a process forked from the one running the consumer it returns True at once (the
        copy there has no threads).

        Raises:
            the exception that stopped the consumer (reason ``"error"`` or
            ``"unreachable"``, see :attr:`error`), once it has ended.
        """
        if not self._started or self._forked():
            return True
        ended = self._done.wait(timeout)
        if ended:
            self._restore_signals()
            if self._error is not None:
                raise self._error
        return ended

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ threads

    def _add_thread(self, t: threading.Thread) -> None:
        with self._lock:
            self._threads.append(t)
            self._threads_alive += 1
        t.start()

    def _thread_main(self, target: Callable[[], None]) -> None:
        self._thread_ids.add(threading.get_ident())
        try:
            target()
        except BaseException as exc:  # never let a consumer thread die silently
            log.exception("consumer thread of queue %r failed", self._queue)
            self._fail(exc)
        finally:
            with self._lock:
                self._threads_alive -= 1
                last = self._threads_alive == 0
                self._lock.notify_all()
            if last:
                with _registry_lock:
                    _registry.discard(self)
                self._done.set()

    def _start_threads(self) -> None:
        if self._started:
            raise InvalidInputError("this consumer was already started")
        self._pid = os.getpid()
        self._started = True
        self._last_activity = time.monotonic()
        with _registry_lock:
            _registry.add(self)
        name = "queen-consume-%s" % self._queue
        with self._lock:
            self._fetchers_alive = self._concurrency
        for i in range(self._concurrency):
            self._add_thread(threading.Thread(target=self._thread_main, args=(self._worker,),
                                              name="%s-worker-%d" % (name, i), daemon=True))
        for i in range(self._concurrency):
            self._add_thread(threading.Thread(target=self._thread_main, args=(lambda i=i: self._fetcher(i),),
                                              name="%s-fetch-%d" % (name, i), daemon=True))
        if self._renew_s is not None:
            self._add_thread(threading.Thread(target=self._thread_main, args=(self._renewer,),
                                              name="%s-renew" % name, daemon=True))

    # ------------------------------------------------------------------ stop control

    def _request_stop(self, reason: str, drain_timeout: Optional[float] = None) -> None:
        with self._lock:
            self._request_stop_locked(reason, drain_timeout)

    def _request_stop_locked(self, reason: str, drain_timeout: Optional[float] = None) -> None:
        if not self._stats.reason:
            self._stats.reason = reason
        t = self._drain_timeout if drain_timeout is None else float(drain_timeout)
        self._drain_deadline = min(self._drain_deadline, time.monotonic() + t)
        if not self._stopping:
            self._stopping = True
            self._stop_evt.set()
        self._lock.notify_all()

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = exc
            self._request_stop_locked("error", 0.0)
            self._stats.reason = "error"

    def _supervise(self) -> None:
        """Watch the stop conditions, then run the stop phase."""
        with self._lock:
            while not self._stopping:
                if self._user_stop is not None and self._user_stop.is_set():
                    self._request_stop_locked("stopped")
                    break
                if self._signal_flag is not None:
                    log.info("consumer of queue %r got signal %d; stopping gracefully", self._queue, self._signal_flag)
                    self._request_stop_locked("signal")
                    break
                if self._client.closed:
                    self._request_stop_locked("closed")
                    break
                if self._idle_s is not None and self._outstanding == 0 and self._pops_in_flight == 0:
                    # (an in-flight pop is awaited: its long poll ends by the idle deadline,
                    # and when the broker is down, its failure tells "unreachable" from "idle")
                    if time.monotonic() - self._last_activity >= self._idle_s:
                        if self._outage.active:
                            # no call got through since the outage began: not "no work"
                            err = self._outage.last_error
                            log.warning(
                                "consumer of queue %r: no message for %d ms while the broker is unreachable "
                                "(%s); stopping with reason 'unreachable'",
                                self._queue,
                                int(self._idle_s * 1000),
                                err,
                            )
                            self._request_stop_locked("unreachable")
                            if self._error is None and err is not None:
                                self._error = err
                        else:
                            self._request_stop_locked("idle")
                        break
                self._lock.wait(_TICK_S)
        self._finish()

    def _finish(self) -> None:
        """The stop phase: drain until the deadline, release what no handler got by then,
        then wait (bounded) for the in-flight pops, whose messages are released as they come."""
        with self._lock:
            # In-flight pops end within a long poll (POLL_CAP_MILLIS) in the normal case; the
            # wait for them is bounded anyway (a pop or a release stuck in an outage).
            fetch_deadline = max(self._drain_deadline, time.monotonic() + _FETCH_GRACE_S)
            while self._outstanding > 0 or self._fetchers_alive > 0:
                left = self._drain_deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(_TICK_S, left))
            units: List[_Unit] = []
            if self._outstanding > 0:
                self._abort = True  # no more retries of acks / releases
                self._abort_evt.set()
                for lane in list(self._lanes.values()):
                    if not lane.running:
                        units.extend(lane.units)
                        lane.units.clear()
                        self._drop_lane_locked(lane)
            self._lock.notify_all()
        if units:
            log.info(
                "drain timeout of the consumer of queue %r: releasing %d message(s) not yet handled",
                self._queue,
                sum(len(u.msgs) - u.pos for u in units),
            )
            self._release_units(units)
        with self._lock:
            while self._fetchers_alive > 0:
                left = fetch_deadline - time.monotonic()
                if left <= 0:
                    log.info(
                        "consumer of queue %r: %d fetcher(s) still busy at the stop deadline; not waiting for them",
                        self._queue,
                        self._fetchers_alive,
                    )
                    self._abort = True
                    self._abort_evt.set()
                    break
                self._lock.wait(min(_TICK_S, left))
            self._lock.notify_all()
        self._finished.set()

    def _drop_lane_locked(self, lane: _Lane) -> None:
        if lane.queued:
            try:
                self._runq.remove(lane)
            except ValueError:
                pass
            lane.queued = False
        if self._lanes.get(lane.pid) is lane and not lane.units and not lane.running:
            del self._lanes[lane.pid]

    # ------------------------------------------------------------------ signals

    def _install_signals(self) -> None:
        if not self._handle_signals or self._signals_installed:
            return
        if threading.current_thread() is not threading.main_thread():
            raise InvalidInputError("handle_signals=True works only in the main thread (Python signal rules)")
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._prev_handlers[sig] = signal.signal(sig, self._on_signal)
        self._signals_installed = True

    def _restore_signals(self) -> None:
        if not self._signals_installed or threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev_handlers.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._signals_installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Runs in the main thread between bytecodes: take no lock here, only set a flag.
        # In a forked child nobody reads the flag: behave like the previous handler.
        # Only a running consumer takes the signal; once it is stopping (for any reason) or
        # done, the previous behaviour applies (a stale handler must never swallow Ctrl-C).
        if self._signal_flag is None and not self._stopping and not self._done.is_set() and not self._forked():
            self._signal_flag = signum
            return
        prev = self._prev_handlers.get(signum)  # a second signal: the previous behaviour
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL or prev is None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    # ------------------------------------------------------------------ fetchers

    def _acquire(self) -> int:
        """Reserve room (and limit budget) for one pop; 0 means the fetcher should end."""
        batch = self._spec.batch
        with self._lock:
            while True:
                if self._stopping:
                    return 0
                n = batch
                if self._limit is not None:
                    left = self._limit - self._reserved
                    if left <= 0:
                        if self._stats.handled >= self._limit:
                            self._request_stop_locked("limit")
                            return 0
                        self._lock.wait(_TICK_S)
                        continue
                    n = min(n, left)
                if self._free_slots >= n:
                    self._free_slots -= n
                    self._reserved += n
                    return n
                self._lock.wait(_TICK_S)

    def _give_back_locked(self, slots: int, budget: int) -> None:
        self._free_slots += slots
        self._reserved -= budget
        self._lock.notify_all()

    def _fetcher(self, index: int) -> None:
        try:
            self._fetch_loop(index)
        finally:
            with self._lock:
                self._fetchers_alive -= 1
                self._lock.notify_all()

    def _fetch_loop(self, index: int) -> None:
        spec = self._spec
        attempt = 0
        while True:
            n = self._acquire()
            if n == 0:
                return
            timeout = min(spec.timeout_millis, POLL_CAP_MILLIS)
            with self._lock:
                if self._idle_s is not None:
                    idle_left = self._idle_s - (time.monotonic() - self._last_activity)
                    if idle_left <= 0 and self._outstanding == 0:
                        # idle time is up: no new pop, the supervisor stops the consumer
                        # (unless a handler finishing meanwhile starts a new idle period)
                        self._give_back_locked(n, n)
                        while (
                            not self._stopping
                            and self._outstanding == 0
                            and time.monotonic() - self._last_activity >= self._idle_s
                        ):
                            self._lock.wait(_TICK_S)
                        continue
                    timeout = max(1, min(timeout, int(math.ceil(idle_left * 1000.0))))
                self._pops_in_flight += 1
            pop = replace(spec, batch=n, timeout_millis=timeout)
            t0 = time.monotonic()
            # _pops_in_flight drops only once the outcome is recorded (outage or activity),
            # so the supervisor's idle check never sees a pop's result half-way.
            try:
                messages = execute_pop(self._client, pop)
            except ClientClosedError:
                with self._lock:
                    self._pops_in_flight -= 1
                    self._give_back_locked(n, n)
                    self._request_stop_locked("closed")
                return
            except Exception as exc:
                transient = _transient(exc)
                if transient:
                    self._outage.failure("pop", exc)
                with self._lock:
                    self._pops_in_flight -= 1
                    self._give_back_locked(n, n)
                if not transient:
                    log.error("pop from queue %r failed: %s; stopping the consumer", self._queue, exc)
                    self._fail(exc)
                    return
                self._stop_evt.wait(_backoff(attempt))
                attempt += 1
                continue
            except BaseException:
                with self._lock:
                    self._pops_in_flight -= 1
                    self._give_back_locked(n, n)
                raise
            attempt = 0
            self._outage.success(t0)
            with self._lock:
                self._pops_in_flight -= 1
                self._give_back_locked(n - len(messages), n - len(messages))
                gen = self._work_gen
                if messages:
                    self._work_gen += 1
                    self._last_activity = time.monotonic()
                    self._lock.notify_all()
            if messages:
                self._dispatch(messages)
                continue
            if index > 0:
                # Rest until some pop brings messages again (fetcher 0 keeps polling).
                with self._lock:
                    while not self._stopping and self._work_gen == gen:
                        self._lock.wait(1.0)
            elif not spec.wait:
                self._stop_evt.wait(_NO_WAIT_PAUSE_S)

    def _dispatch(self, popped: List[Message]) -> None:
        """Split one pop per partition into lanes (or release it when stopping)."""
        # handlers get queen_sync.Message objects (dicts that can record traces on themselves)
        messages = bind_messages(self._client, popped)
        by_pid: "collections.OrderedDict[Any, List[Message]]" = collections.OrderedDict()
        for m in messages:
            by_pid.setdefault(m.get("partitionId") or m.get("partition"), []).append(m)
        release: List[_Unit] = []
        with self._lock:
            self._outstanding += len(messages)
            units = []
            for pid, msgs in by_pid.items():
                lid = msgs[0].get("leaseId") or ""
                lease = None
                if lid:
                    lease = self._leases.get(lid)
                    if lease is None:
                        lease = self._leases[lid] = _Lease(lid)
                        if self._renew_s is not None:
                            # first renewal soon: the queue's leaseTime may be shorter than the interval
                            lease.next_renew = lease.popped_at + min(self._renew_s, _FIRST_RENEW_S)
                    lease.outstanding[pid] = lease.outstanding.get(pid, 0) + len(msgs)
                    lease.txids.extend(str(m.get("transactionId")) for m in msgs)
                units.append(_Unit(pid, msgs, lease))
            if self._stopping:
                release = units
            else:
                for unit in units:
                    lane = self._lanes.get(unit.pid)
                    if lane is None:
                        lane = self._lanes[unit.pid] = _Lane(unit.pid)
                    lane.units.append(unit)
                    if not lane.running and not lane.queued:
                        lane.queued = True
                        self._runq.append(lane)
                self._lock.notify_all()
        if release:
            log.debug("consumer of queue %r is stopping: releasing %d message(s) popped meanwhile", self._queue, len(messages))
            self._release_units(release)

    # ------------------------------------------------------------------ workers

    def _worker(self) -> None:
        while True:
            with self._lock:
                while not self._runq:
                    if self._stopping and self._fetchers_alive == 0:
                        return
                    self._lock.wait(_TICK_S)
                lane = self._runq.popleft()
                lane.queued = False
                if not lane.units:
                    self._drop_lane_locked(lane)
                    continue
                lane.running = True
                unit = lane.units.popleft()
            try:
                self._run_unit(unit)
            finally:
                with self._lock:
                    lane.running = False
                    if lane.units:
                        lane.queued = True
                        self._runq.append(lane)  # at the tail: partitions take turns
                    else:
                        self._drop_lane_locked(lane)
                    self._lock.notify_all()

    def _run_unit(self, unit: _Unit) -> None:
        lease = unit.lease
        if self._each:
            while unit.pos < len(unit.msgs):
                if self._abort:
                    self._release_units([unit])
                    return
                if lease is not None and lease.lost:
                    self._resolve(unit.msgs[unit.pos:], unit, handled=False, lost=True)
                    unit.pos = len(unit.msgs)
                    return
                m = unit.msgs[unit.pos]
                unit.pos += 1
                if not self._deliver(m, [m], unit):
                    if lease is not None and lease.lost:
                        continue  # the rest is lost (resolved at the top of the loop)
                    rest = unit.msgs[unit.pos:]
                    unit.pos = len(unit.msgs)
                    if rest:
                        self._resolve(rest, unit, skipped=True)
                    return
        else:
            if self._abort:
                self._release_units([unit])
                return
            if lease is not None and lease.lost:
                self._resolve(unit.msgs, unit, handled=False, lost=True)
                unit.pos = len(unit.msgs)
                return
            msgs = unit.msgs
            unit.pos = len(msgs)
            arg: Any = msgs[0] if (self._single_when_one and len(msgs) == 1) else list(msgs)
            self._deliver(arg, msgs, unit)

    def _resolve(
        self,
        msgs: List[Message],
        unit: _Unit,
        *,
        handled: bool = True,
        skipped: bool = False,
        lost: bool = False,
        released: bool = False,
        confirmed: bool = True,
    ) -> None:
        """Forget finished messages: free their room; give the limit budget back when unhandled.
        ``released`` messages count in ``released`` only when ``confirmed`` by the broker."""
        k = len(msgs)
        with self._lock:
            self._outstanding -= k
            unhandled = skipped or released or (lost and not handled)
            self._give_back_locked(k, k if unhandled else 0)
            if skipped:
                self._stats.skipped += k
            if lost:
                self._stats.lost += k
            if released and confirmed:
                self._stats.released += k
            lease = unit.lease
            if lease is not None:
                left = lease.outstanding.get(unit.pid, 0) - k
                lease.outstanding[unit.pid] = left
                if all(v <= 0 for v in lease.outstanding.values()):
                    self._leases.pop(lease.lease_id, None)
            self._last_activity = time.monotonic()
            if self._limit is not None and self._stats.handled >= self._limit:
                self._request_stop_locked("limit")

    def _deliver(self, arg: Any, msgs: List[Message], unit: _Unit) -> bool:
        """Call the handler (and callbacks), then ack. False when the partition's lease was
        released by a nack (the rest of the unit must be skipped)."""
        with self._lock:
            self._stats.handled += len(msgs)
            self._last_activity = time.monotonic()
        try:
            result = self._handler(arg)
            if self._on_success is not None:
                self._on_success(arg, result)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # SystemExit & co: forget the messages, end the thread
                self._resolve(msgs, unit)
                raise
            with self._lock:
                self._stats.failed += len(msgs)
            if self._on_error is not None:
                self._log_handler_failure(exc, msgs, "calling on_error")
                try:
                    self._on_error(arg, exc)
                except Exception as exc2:
                    log.error(
                        "on_error callback of the consumer of queue %r raised; stopping the consumer",
                        self._queue,
                        exc_info=exc2,
                    )
                    self._resolve(msgs, unit)
                    self._fail(exc2)
                    return True
                self._resolve(msgs, unit)
                return True
            if not self._auto_ack:
                self._log_handler_failure(exc, msgs, "auto_ack is off: stopping the consumer, the error is re-raised")
                self._resolve(msgs, unit)
                self._fail(exc)
                return True
            text = ("%s: %s" % (type(exc).__name__, exc))[:_MAX_ERROR_TEXT]
            self._log_handler_failure(exc, msgs, "nacking them (the broker retries, then dead-letters)")
            return self._ack(msgs, unit, False, text)
        if self._auto_ack:
            self._ack(msgs, unit, True, None)
        else:
            self._resolve(msgs, unit)
        return True

    def _log_handler_failure(self, exc: BaseException, msgs: List[Message], then: str) -> None:
        """One WARNING per failed handler call, with the traceback; message ids only (queue,
        partition, transactionId), never payloads."""
        log.warning(
            "handler raised %s on %d message(s) of queue %r%s; %s: %s",
            type(exc).__name__,
            len(msgs),
            self._queue,
            "" if self._spec.group is None else " (consumer group %r)" % (self._spec.group,),
            then,
            ", ".join(
                "%s (partition %s)" % (m.get("transactionId"), m.get("partition") or m.get("partitionId"))
                for m in msgs[:_MAX_IDS_LOGGED]
            )
            + (" and %d more" % (len(msgs) - _MAX_IDS_LOGGED) if len(msgs) > _MAX_IDS_LOGGED else ""),
            exc_info=exc,
        )

    # ------------------------------------------------------------------ acks

    def _ack(self, msgs: List[Message], unit: _Unit, ok: bool, error: Optional[str]) -> bool:
        """Ack / nack after the handler; resolve the messages. Returns False when the rest of
        the unit must not be handled: a nack released the partition, or the lease is gone."""
        lease = unit.lease
        verb = "ack" if ok else "nack"
        with self._lock:
            lost_now = lease is not None and lease.lost
            if lease is not None and not lost_now:
                lease.acks_in_flight += 1
        if lost_now:
            log.warning(
                "not %sing %d handled message(s) of queue %r: their lease was lost, the broker redelivers them: %s",
                verb,
                len(msgs),
                self._queue,
                _ids(msgs),
            )
            self._resolve(msgs, unit, lost=True)
            return False
        last = unit.pos >= len(unit.msgs)  # no message of this partition's batch after these
        results: Optional[List[Dict[str, Any]]] = None
        try:
            results = self._send_ack(msgs, ok, error, verb, covered_later=ok and not last)
            if (
                last
                and unit.unsure
                and lease is not None
                and _moved_cursor(results, ok)
                and not any(r.get("leaseReleased") is True for r in results or ())
            ):
                self._complete_batch_count(unit, msgs[-1])
        finally:
            refused = None if results is None else [r for r in results if r.get("success") is not True]
            n_refused = len(msgs) if refused is None else len(refused)
            n_unsure = 0 if results is None else sum(1 for r in results if r.get("uncertain"))
            moved = _moved_cursor(results, ok)
            lease_gone = refused is not None and any(r.get("error") == _INVALID_LEASE for r in refused)
            # a nack releases the partition, unless it moved the message to the dead-letter
            # queue (retries exhausted): then the cursor moved on and the lease is still held
            released = not ok and not (results and all(r.get("dlq") is True for r in results))
            with self._lock:
                self._stats.ack_failures += n_refused
                if ok:
                    self._stats.acked += len(msgs) - n_refused - n_unsure
                    self._stats.ack_uncertain += n_unsure
                else:
                    self._stats.nacked += len(msgs) - n_refused
                if n_unsure:
                    unit.unsure += n_unsure
                    unit.unconfirmed += n_unsure
                elif moved and unit.unconfirmed:
                    # this ack moved the partition's cursor past the earlier messages whose
                    # ack is unconfirmed: they count as consumed now
                    self._stats.ack_uncertain -= unit.unconfirmed
                    self._stats.acked += unit.unconfirmed
                    unit.unconfirmed = 0
                if lease is not None:
                    lease.acks_in_flight -= 1
                    if released:
                        lease.released.add(unit.pid)
                    if lease_gone:
                        lease.lost = True
                self._lock.notify_all()
            self._resolve(msgs, unit)
        return not released and not lease_gone

    def _complete_batch_count(self, unit: _Unit, last: Message) -> None:
        """The last message of a partition's batch was acked, but the broker still holds the
        lease: an earlier ack whose reply was lost (not resent, see :meth:`_send_ack`) never
        reached it, so its count of the batch is short and the partition would stay locked
        until the lease expires. Re-ack the last message until the broker releases the lease
        (at most once per such ack). Not a resend of the earlier ack: that would move the
        partition's cursor back (the broker sets it to the acked message) and the messages
        after it would be redelivered. A surplus count can only release the lease, which is
        no longer needed (every message of the batch is handled and acked)."""
        n = unit.unsure
        unit.unsure = 0
        for i in range(n):
            got = self._send_ack([last], True, None, "re-ack", invalid_lease_ok=True)
            if not got or got[0].get("success") is not True:
                break
            if got[0].get("leaseReleased") is True:
                log.info(
                    "lease %s of queue %r released after %d re-ack(s) of %s (an earlier ack whose reply "
                    "was lost had not reached the broker)",
                    got[0].get("leaseId") or (unit.lease.lease_id if unit.lease else None),
                    self._queue,
                    i + 1,
                    _ids([last]),
                )
                return
        log.warning(
            "the broker still holds the lease of partition %s of queue %r after the whole batch was acked "
            "(earlier acks lost their reply); the partition stays locked for this consumer group until "
            "the lease expires",
            last.get("partition") or last.get("partitionId"),
            self._queue,
        )

    def _send_ack(
        self,
        msgs: List[Message],
        status: Any,
        error: Optional[str],
        verb: str,
        covered_later: bool = False,
        invalid_lease_ok: bool = False,
    ) -> Optional[List[Dict[str, Any]]]:
        """Send one ack / batch ack, retrying connection errors with backoff (until the
        consumer is aborted). Returns the broker's per-item results (refused ones have
        ``success`` false, and are logged), or None when it could not be sent at all.

        ``covered_later``: a ``completed`` ack with later messages of the same partition and
        lease still to be acked; after a failure where the request may have reached the
        broker it is not resent (see the comment below) and its result is
        ``{"success": True, "uncertain": True}``.

        A copy resent after a lost reply that the broker refuses with ``Invalid or expired
        lease`` means the first copy was applied (it released the lease): its result is
        ``{"success": True, "landed": True, "leaseReleased": True}``. ``invalid_lease_ok``
        reads that refusal the same way on the first attempt (re-acks of
        :meth:`_complete_batch_count`)."""
        context: Dict[str, Any] = {}
        if self._spec.group is not None:
            context["group"] = self._spec.group
        if error is not None:
            context["error"] = error
        target: Any = msgs[0] if len(msgs) == 1 else msgs
        attempt = 0
        uncertain = False
        while True:
            t0 = time.monotonic()
            try:
                got = self._client.ack(target, status, context or None)
                self._outage.success(t0)
                return [got] if isinstance(got, dict) else list(got)
            except AckError as exc:
                self._outage.success(t0)
                failed = list(exc.failed) or [
                    {"transactionId": m.get("transactionId"), "error": exc.error, "success": False} for m in msgs
                ]
                results = list(exc.results) if len(exc.results) == len(msgs) else failed
                by_tx = {m.get("transactionId"): m for m in msgs}
                if uncertain or invalid_lease_ok:
                    landed = {r.get("transactionId") for r in failed if r.get("error") == _INVALID_LEASE}
                    if landed:
                        results = [
                            dict(r, success=True, error=None, landed=True, leaseReleased=True)
                            if r.get("success") is not True and r.get("transactionId") in landed
                            else r
                            for r in results
                        ]
                        failed = [r for r in failed if r.get("transactionId") not in landed]
                        log.info(
                            "%s of %d message(s) of queue %r refused with %r %s: counted as done (its lease "
                            "is released): %s",
                            verb,
                            len(landed),
                            self._queue,
                            _INVALID_LEASE,
                            "after an earlier attempt whose reply was lost (that one was applied)"
                            if uncertain
                            else "(the lease is no longer held)",
                            _ids([by_tx.get(t, {"transactionId": t}) for t in landed]),
                        )
                        if not failed:
                            return results
                refused_msgs = [by_tx.get(r.get("transactionId"), {"transactionId": r.get("transactionId")}) for r in failed]
                log.warning(
                    "%s of %d of %d message(s) of queue %r refused by the broker (%s)%s: %s",
                    verb,
                    len(failed),
                    len(msgs),
                    self._queue,
                    ", ".join(sorted({str(r.get("error")) for r in failed})),
                    " after an earlier attempt whose reply was lost (it may have been applied)" if uncertain else "",
                    _ids(refused_msgs),
                )
                return results
            except ClientClosedError:
                log.warning("client closed before the %s of %d message(s) of queue %r: %s", verb, len(msgs), self._queue, _ids(msgs))
                self._request_stop("closed")
                return None
            except Exception as exc:
                if not _transient(exc) or self._abort_evt.is_set():
                    log.warning(
                        "%s of %d message(s) of queue %r failed: %s (the broker redelivers them after the lease): %s",
                        verb,
                        len(msgs),
                        self._queue,
                        exc,
                        _ids(msgs),
                    )
                    return None
                if _maybe_sent(exc):
                    if covered_later:
                        # The broker may have applied it: a second copy would be counted twice
                        # against the partition's batch and release its lease too early. The
                        # next ack of this partition moves the cursor past this message anyway,
                        # and after the last one the batch count is completed if it is short
                        # (see _complete_batch_count).
                        log.info(
                            "reply to the ack of %s lost (%s); not resending it: the later acks of its partition cover it",
                            _ids(msgs),
                            exc,
                        )
                        self._outage.failure(verb, exc)
                        return [{"transactionId": m.get("transactionId"), "success": True, "uncertain": True} for m in msgs]
                    uncertain = True
                self._outage.failure(verb, exc)
                self._abort_evt.wait(_backoff(attempt))
                attempt += 1

    def _release_units(self, units: List[_Unit]) -> None:
        """Hand unhandled messages back to the broker (ack status ``retry``) and forget them.
        Only releases the broker confirmed count as ``released``; the others count as ack
        failures (the broker redelivers them once their lease expires)."""
        todo = []
        for unit in units:
            rest = unit.msgs[unit.pos:]
            unit.pos = len(unit.msgs)
            if rest:
                todo.append((unit, rest))
        if not todo:
            return
        send: List[Message] = []
        sent_units: List[_Unit] = []
        with self._lock:
            for unit, rest in todo:
                lease = unit.lease
                if lease is None or not lease.lost:
                    send.extend(rest)
                    sent_units.append(unit)
                    if lease is not None:
                        lease.acks_in_flight += 1
        results: Optional[List[Dict[str, Any]]] = []
        refused_tx: Set[Any] = set()
        if send:
            try:
                results = self._send_ack(send, "retry", None, "release")
            finally:
                if results is not None:
                    refused_tx = {r.get("transactionId") for r in results if r.get("success") is not True}
                with self._lock:
                    for unit in sent_units:
                        if unit.lease is not None:
                            unit.lease.acks_in_flight -= 1
                            unit.lease.released.add(unit.pid)
                    self._stats.ack_failures += len(send) if results is None else len(refused_tx)
                    self._lock.notify_all()
        for unit, rest in todo:
            if not any(unit is u for u in sent_units):
                self._resolve(rest, unit, handled=False, lost=True)
                continue
            if results is None:
                done, failed = [], rest
            else:
                done = [m for m in rest if m.get("transactionId") not in refused_tx]
                failed = [m for m in rest if m.get("transactionId") in refused_tx]
            if done:
                self._resolve(done, unit, released=True)
            if failed:
                self._resolve(failed, unit, released=True, confirmed=False)

    # ------------------------------------------------------------------ renewals

    def _renewer(self) -> None:
        """Renew every lease with unfinished messages on its own schedule: the first renewal
        soon after the pop (the queue's leaseTime is not in the pop reply and may be shorter
        than the interval), the next ones at about half the time the broker's ``expiresAt``
        leaves, never later than the interval."""
        assert self._renew_s is not None
        while True:
            with self._lock:
                while True:
                    if self._stopping and self._fetchers_alive == 0 and self._outstanding == 0:
                        return
                    now = time.monotonic()
                    live = [le for le in self._leases.values() if not le.lost and le.live()]
                    due = [le for le in live if le.next_renew <= now]
                    if due:
                        break
                    nxt = min((le.next_renew for le in live), default=math.inf)
                    self._lock.wait(max(0.01, min(nxt - now, 0.5)))
            for lease in due:
                t0 = time.monotonic()
                try:
                    got = self._client.renew(lease.lease_id, self._renew_seconds)
                except LeaseError as exc:
                    self._outage.success(t0)
                    self._lease_refused(lease, exc)
                    continue
                except ClientClosedError:
                    self._request_stop("closed")
                    return
                except Exception as exc:
                    with self._lock:
                        self._stats.renew_failures += 1
                    if _transient(exc):
                        self._outage.failure("lease renewal", exc)
                        # retry sooner than the interval, with backoff
                        lease.next_renew = time.monotonic() + min(self._renew_s, _backoff(lease.renew_attempt))
                        lease.renew_attempt += 1
                    else:
                        log.warning("renewal of lease %s (queue %r) failed: %s", lease.lease_id, self._queue, exc)
                        lease.next_renew = time.monotonic() + self._renew_s
                    continue
                self._outage.success(t0)
                lease.renew_attempt = 0
                lease.renewed = True
                lease.next_renew = time.monotonic() + self._next_renewal_delay(got)
                with self._lock:
                    self._stats.renewals += 1

    def _next_renewal_delay(self, reply: Any) -> float:
        """Seconds until the next renewal of a lease just renewed: half the time the reply's
        ``expiresAt`` leaves (read with the local clock), at most the interval. A reply
        leaving less than half the seconds asked for can only come from clock skew (the
        broker keeps the later of the current expiry and now + seconds): then the interval."""
        assert self._renew_s is not None
        expires = reply.get("expiresAt") if isinstance(reply, dict) else None
        if not isinstance(expires, str):
            return self._renew_s
        try:
            when = datetime.datetime.fromisoformat(expires.replace("Z", "+00:00"))
        except ValueError:
            return self._renew_s
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        remaining = when.timestamp() - time.time()
        if remaining < self._renew_seconds / 2.0:
            return self._renew_s
        return min(self._renew_s, remaining / 2.0)

    def _lease_refused(self, lease: _Lease, exc: LeaseError) -> None:
        with self._lock:
            # An ack of ours may have released the lease meanwhile: let it finish first.
            deadline = time.monotonic() + 5.0
            while lease.acks_in_flight > 0 and time.monotonic() < deadline:
                self._lock.wait(0.05)
            if not lease.live():
                return  # released by our own acks / nacks: nothing lost
            if not self._auto_ack and exc.error == "Lease not found":
                # The handler owns acks: it probably acked (and so released) the lease itself.
                lease.lost = True
                quiet = True
            else:
                lease.lost = True
                quiet = False
                self._stats.renew_failures += 1
            ids = list(lease.txids)
            first = not lease.renewed and not self._warned_short_lease
            if first:
                self._warned_short_lease = True
        if quiet:
            log.info("lease %s of queue %r is no longer held (acked by the handler?); not renewing it", lease.lease_id, self._queue)
            return
        if first:
            log.warning(
                "the lease of a pop from queue %r had already expired at its first renewal, %d ms after the pop "
                "(%s): the queue's leaseTime is shorter than that; use a shorter renew_lease() interval "
                "(now %d ms) or a longer leaseTime for the queue (logged once per consumer)",
                self._queue,
                int((time.monotonic() - lease.popped_at) * 1000),
                exc.error,
                int((self._renew_s or 0) * 1000),
            )
        shown = ", ".join(ids[:_MAX_IDS_LOGGED]) + (" and %d more" % (len(ids) - _MAX_IDS_LOGGED) if len(ids) > _MAX_IDS_LOGGED else "")
        log.warning(
            "renewal of lease %s (queue %r) refused by the broker (%s): its messages are lost to this consumer "
            "and will not be acked (the broker redelivers them); transactionIds: %s",
            lease.lease_id,
            self._queue,
            exc.error,
            shown,
        )
