"""What every part of one consumer shares: one lock, the counters, the room, the stop request.

A consumer's parts (fetchers, lanes, acks, renewer, stop phase) run in different threads and
meet only here, in a :class:`ConsumerState`, under its one mutex. Waiting threads wait on one
of four conditions of that mutex, so that a change wakes only the threads it concerns (every
``notify_all`` on a shared condition woke every thread of the consumer): ``room`` (fetchers
waiting for room or limit budget), ``work`` (lane workers waiting for a queued lane),
``rest`` (fetchers resting after an empty pop, and the idle wait) and ``lock`` (everything
else: the supervisor, the stop phase, the renewer, a refused renewal waiting for acks in
flight). ``with state.lock:`` takes the mutex (any of the four would). A stop request wakes
all four:

* **Room.** At most ``concurrency × batch`` popped messages are held in memory: a fetcher
  reserves room before a pop (``free_slots``) and with ``limit(n)`` its share of the limit
  (``reserved``: the limit never overshoots); :meth:`ConsumerState.resolve` frees the room of
  finished messages, and gives the limit budget back for messages never handled.
* **Leases.** One :class:`Lease` per pop's lease (shared by every partition of the pop) counts
  the unfinished messages per partition; a lease with none left is forgotten.
* **Stopping.** :meth:`ConsumerState.request_stop` records the first reason and moves the drain
  deadline earlier (never later); ``abort`` / ``abort_evt`` (set by the stop phase at the drain
  timeout) end every retry of acks and releases.

The counters are a :class:`ConsumeResult`, also the result handed to the user.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set

from ._outage import Outage

__all__ = ["ConsumeResult", "ConsumerState", "EWMA_WEIGHT", "Lease", "Message", "TICK_S", "Unit"]

Message = Dict[str, Any]

#: Longest a consumer thread sleeps before it looks at the stop conditions again, in seconds.
TICK_S = 0.1

#: Weight of the latest sample in the running averages of handler and pop times.
EWMA_WEIGHT = 0.2


@dataclass
class ConsumeResult:
    """What a consume() run did (also the live counters of a :class:`Consumer`).

    Attributes:
        handled: messages delivered to the handler (failures included).
        failed: messages whose handler call raised.
        acked: messages the consumer acked ``completed`` and the broker accepted (auto-ack),
            and those the handler acked ``completed`` itself under auto-ack (``msg.ack()``,
            ``Queen.ack(msg)``, a committed transaction's ack), which the consumer does not
            ack again.
        nacked: messages the consumer nacked ``failed`` and the broker accepted (auto-ack),
            and those the handler nacked (or acked with another status) itself under auto-ack.
        ack_failures: acks / nacks / releases the broker refused or that could not be sent
            (each logged with the message ids).
        ack_uncertain: ``completed`` acks whose reply was lost and that were not resent (see
            "lost ack replies" in :mod:`queen_sync.consumer._acks`), not yet confirmed by a
            later ack of the same partition; once confirmed they move to ``acked``. Also
            ``completed`` acks resent after a lost reply and refused with ``Invalid or expired
            lease`` (the first copy landed, or the lease expired before it arrived). Those left
            at the end may or may not have been applied (if not, the broker redelivers the
            message).
        uncertain: handled messages whose ack / nack was still pending (being retried
            through a broker outage) when the consumer gave up on it: it stopped with reason
            ``"unreachable"``, or its drain timeout passed while the broker could not be
            reached; and nacks resent after a lost reply and refused with ``Invalid or
            expired lease``. The consumer cannot tell whether the broker applied it (an earlier
            attempt may have landed with its reply lost); if it did not, the broker
            redelivers the message once its lease expires. Logged at WARNING.
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
            while running; ``"forked"`` in a process forked from the one running the
            consumer (the copy there has no threads; the consumer goes on in the parent).
    """

    handled: int = 0
    failed: int = 0
    acked: int = 0
    nacked: int = 0
    ack_failures: int = 0
    ack_uncertain: int = 0
    uncertain: int = 0
    skipped: int = 0
    renewals: int = 0
    renew_failures: int = 0
    lost: int = 0
    released: int = 0
    reason: str = ""


class Lease:
    """Bookkeeping of one pop's lease (shared by every partition of that pop)."""

    __slots__ = ("lease_id", "outstanding", "released", "acks_in_flight", "lost", "popped", "next_renew",
                 "renewed", "renew_attempt", "popped_at")

    def __init__(self, lease_id: str) -> None:
        self.lease_id = lease_id
        self.outstanding: Dict[Any, int] = {}  # partitionId -> unfinished messages
        self.released: Set[Any] = set()  # partitions this consumer released (nack / retry)
        self.acks_in_flight = 0
        self.lost = False
        self.popped: List[List[Message]] = []  # the messages of each partition (for log lines)
        self.popped_at = time.monotonic()
        self.next_renew = math.inf  # time.monotonic() of the next renewal (renew_lease(True))
        self.renewed = False  # a renewal of this lease was accepted
        self.renew_attempt = 0  # failed renewals in a row (backoff)

    def txids(self) -> List[str]:
        """The transactionIds of the lease's messages, in pop order."""
        return [str(m.get("transactionId")) for msgs in self.popped for m in msgs]

    def live(self) -> bool:
        """Some partition of the lease still has unfinished messages and was not released."""
        return any(n > 0 and pid not in self.released for pid, n in self.outstanding.items())


class Unit:
    """The messages of one partition from one pop, handled in order.

    ``msgs`` are the dicts of the pop reply, which the consumer acks, releases and logs;
    ``given`` the same messages as the handler gets them (bound ``queen_sync.Message``
    copies, one per message in the same order). A handler that changes its message
    (``m.clear()``, ``m["leaseId"] = ...``) thus cannot change what its ack sends."""

    __slots__ = ("pid", "msgs", "given", "lease", "pos", "unsure", "unconfirmed")

    def __init__(self, pid: Any, msgs: List[Message], lease: Optional[Lease], given: Optional[List[Message]] = None) -> None:
        self.pid = pid
        self.msgs = msgs
        self.given = msgs if given is None else given
        self.lease = lease
        self.pos = 0  # index of the first message not yet given to the handler
        # acks of this unit whose reply was lost and that were not resent: ``unsure`` may be
        # missing from the broker's count of the partition's batch (its lease stays held
        # until the count is complete); ``unconfirmed`` are not yet covered by a later ack
        self.unsure = 0
        self.unconfirmed = 0


class ConsumerState:
    """The shared state of one consumer (see the module docstring).

    Args:
        queue: the queue name (for log lines).
        room: how many popped messages may be held at once (``concurrency × batch``).
        limit: ``limit(n)``: stop after n handled messages; None: no limit.
        idle_s: ``idle_millis`` in seconds: stop after that long without messages; None: never.
        drain_timeout: the default drain timeout of a stop, in seconds.

    Attributes other than the settings are read and written under ``lock`` only (``abort``,
    ``stopping`` and ``error`` may be read without it).
    """

    def __init__(self, queue: str, room: int, limit: Optional[int], idle_s: Optional[float],
                 drain_timeout: float, workers: int = 1) -> None:
        self.queue = queue
        self.workers = workers
        self.limit = limit
        self.idle_s = idle_s
        self.drain_timeout = drain_timeout
        mutex = threading.Lock()
        self.lock = threading.Condition(mutex)  # supervisor, stop phase, renewer (see the module docstring)
        self.room = threading.Condition(mutex)  # fetchers waiting for room / limit budget
        self.work = threading.Condition(mutex)  # lane workers waiting for a queued lane
        self.rest = threading.Condition(mutex)  # resting fetchers, the idle wait
        self.standby = threading.Condition(mutex)  # fetchers standing by through a backlog
        self.settle_waiters = 0  # threads waiting (on ``lock``) for a lease's acks in flight to end
        self.stats = ConsumeResult()
        self.error: Optional[BaseException] = None
        self.stopping = False
        #: the ``stop_event`` given to ``consume()``: the supervisor watches it, and every
        #: fetcher checks it before a pop (so no pop starts once it is set)
        self.user_stop: Optional[threading.Event] = None
        self.stop_evt = threading.Event()
        self.abort = False
        self.abort_evt = threading.Event()
        self.drain_deadline = math.inf
        self.fetchers_alive = 0
        self.pops_in_flight = 0
        self.handlers_running = 0  # handler / callback calls under way
        self.idle_workers = 0  # lane workers waiting for a queued lane (Lanes.run)
        #: running averages, in seconds, of a handler call (Lanes._deliver) and of a lane
        #: worker's own pop (Fetchers.pop_for_worker): see slow_handlers_locked
        self.handler_time_s = 0.0
        self.pop_time_s = 0.0
        self.free_slots = room
        #: threads of lane workers in their unit's last handler call and its ack: the room they
        #: free wakes no fetcher until the worker has seen whether it pops itself (Lanes.run,
        #: Lanes._deliver, Fetchers.pop_for_worker)
        self.room_deferred: Set[int] = set()
        self.reserved = 0
        self.outstanding = 0
        self.leases: Dict[str, Lease] = {}
        self.last_activity = time.monotonic()
        self.outage = Outage(queue)

    # ------------------------------------------------------------------ stop request

    def request_stop(self, reason: str, drain_timeout: Optional[float] = None) -> None:
        """Ask the consumer to stop (the first reason given is kept); ``drain_timeout``
        seconds (default: the consumer's) may move the drain deadline earlier."""
        with self.lock:
            self.request_stop_locked(reason, drain_timeout)

    def request_stop_locked(self, reason: str, drain_timeout: Optional[float] = None) -> None:
        """:meth:`request_stop` with ``lock`` held."""
        if not self.stats.reason:
            self.stats.reason = reason
        t = self.drain_timeout if drain_timeout is None else float(drain_timeout)
        self.drain_deadline = min(self.drain_deadline, time.monotonic() + t)
        if not self.stopping:
            self.stopping = True
            self.stop_evt.set()
        self.notify_everyone_locked()

    def slow_handlers_locked(self) -> bool:
        """Whether a handler call takes about as long as a pop's round trip, or longer: then
        a pop ahead of the workers (prefetch) spares them a wait, where with quicker handlers
        the worker's own pop after its unit costs less than a fetcher's pop handed over to
        it (two thread hand-offs)."""
        return self.handler_time_s >= self.pop_time_s

    def notify_everyone_locked(self) -> None:
        """Wake every waiting thread (a stop request, a fetcher ending, the stop phase)."""
        self.lock.notify_all()
        self.room.notify_all()
        self.work.notify_all()
        self.rest.notify_all()
        self.standby.notify_all()

    def acks_settled_locked(self) -> None:
        """A lease has no ack in flight any more: wake who waits for that (a refused renewal)."""
        if self.settle_waiters:
            self.lock.notify_all()

    def fail(self, exc: BaseException) -> None:
        """Stop at once with reason ``"error"``; the first ``exc`` becomes the consumer's error."""
        with self.lock:
            if self.error is None:
                self.error = exc
            self.request_stop_locked("error", 0.0)
            self.stats.reason = "error"

    def abort_locked(self) -> None:
        """End every retry of acks and releases (the drain time is over)."""
        self.abort = True
        self.abort_evt.set()

    # ------------------------------------------------------------------ room

    def give_back_locked(self, slots: int, budget: int) -> None:
        """Free ``slots`` of room and give ``budget`` of the limit back (wakes the fetchers
        waiting for room)."""
        if slots or budget:
            self.free_slots += slots
            self.reserved -= budget
            if threading.get_ident() not in self.room_deferred:
                self.room.notify()  # one fetcher; it passes the wake on while room is left (Fetchers._acquire)

    def resolve(self, msgs: List[Message], unit: Unit, **outcome: bool) -> None:
        """:meth:`resolve_locked`, taking ``lock``."""
        with self.lock:
            self.resolve_locked(msgs, unit, **outcome)

    def resolve_locked(
        self,
        msgs: List[Message],
        unit: Unit,
        *,
        handled: bool = True,
        skipped: bool = False,
        lost: bool = False,
        released: bool = False,
        confirmed: bool = True,
    ) -> None:
        """Forget finished messages (``lock`` held): free their room; give the limit budget
        back when unhandled. ``released`` messages count in ``released`` only when
        ``confirmed`` by the broker."""
        k = len(msgs)
        self.outstanding -= k
        unhandled = skipped or released or (lost and not handled)
        self.give_back_locked(k, k if unhandled else 0)
        if skipped:
            self.stats.skipped += k
        if lost:
            self.stats.lost += k
        if released and confirmed:
            self.stats.released += k
        lease = unit.lease
        if lease is not None:
            left = lease.outstanding.get(unit.pid, 0) - k
            lease.outstanding[unit.pid] = left
            if all(v <= 0 for v in lease.outstanding.values()):
                self.leases.pop(lease.lease_id, None)
        self.last_activity = time.monotonic()
        if self.stopping:
            self.lock.notify_all()  # the stop phase waits for the outstanding messages
        elif self.limit is not None and self.stats.handled >= self.limit:
            self.request_stop_locked("limit")
