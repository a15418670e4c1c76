"""Lanes: per-partition order, the worker pool, handler delivery.

A pop is split per partition (a pop with ``partitions(n)`` can span several) into
:class:`~queen_sync.consumer._state.Unit` s, each queued on its partition's :class:`Lane`.
``concurrency`` **workers** (a thread pool, :meth:`Lanes.run`) take lanes off one run queue;
a lane is run by one worker at a time, in pop order, so within one partition handling order
equals push order and two messages of one partition are never handled at the same time,
while different partitions run in parallel (a lane with more work goes back to the tail of
the run queue: partitions take turns).

Handler delivery: the handler gets one message dict (``each()`` or ``batch == 1``), else
the list of one partition's messages of one pop. With auto-ack (the default) a handler that
returns is acked ``completed`` and one that raises is nacked ``failed`` with the exception
text (the ack itself: ``_acks``); in ``each()`` mode the later messages of a nacked
partition in the same pop are skipped (the broker redelivers them). Every handler failure is
logged at WARNING with its traceback and the message ids (queue, partition, transactionId;
never payloads). ``auto_ack(False)`` leaves acks to the handler (a handler exception then
stops the consumer and is re-raised). Under auto-ack, a message the handler acked or nacked
itself (the broker accepted it) is not acked again, and counts as acked / nacked; if that
released the partition (a nack) the rest of the handler's messages count as lost and the
rest of the unit is skipped, as after the consumer's own nack. The handler gets copies
(``Unit.given``); acks are made from the pop reply's dicts, so what the handler does to its
message cannot change them. Callbacks: ``on_success(cb)`` runs after the handler
returns, ``on_error(cb)`` when the handler (or on_success) raises. Without an explicit
``auto_ack()`` they turn auto-ack off (the callbacks ack); with ``auto_ack(True)`` both hold:
the callback runs, then the consumer acks (``completed`` after on_success) or nacks
(``failed`` after on_error) — an explicit setting is never switched off. Messages of a lost lease are not handled (see
``_leases``); after the drain timeout (``abort``) a worker releases its unit's rest instead.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional

from ._acks import Acks
from ._calls import settled_count, settled_status
from ._log import MAX_IDS_LOGGED, ids, log, more
from ._state import EWMA_WEIGHT, TICK_S, ConsumerState, Message, Unit

__all__ = ["Lane", "Lanes", "MAX_ERROR_TEXT"]

#: Longest exception text sent with a nack, in characters.
MAX_ERROR_TEXT = 1000


class Lane:
    """The units of one partition; run by one worker at a time."""

    __slots__ = ("pid", "units", "running", "queued")

    def __init__(self, pid: Any) -> None:
        self.pid = pid
        self.units: Deque[Unit] = collections.deque()
        self.running = False
        self.queued = False


class Lanes:
    """The lanes and the worker loop of one consumer.

    Args:
        state: the consumer's shared state.
        acks: its ack path (acks after a handler, releases when aborting).
        handler: the user's handler.
        each: one message per handler call (``each()`` or ``batch == 1``).
        single_when_one: pass a lone message as a dict, not a list (``batch == 1``).
        auto_ack: ack / nack after the handler (and callbacks): ``auto_ack()`` as set, else
            True without callbacks, False with them.
        on_success, on_error: the builder's callbacks, or None.
        group: the consumer group (for log lines), None in queue mode.

    The fetchers add work with :meth:`put_locked`; the stop phase takes back what no worker
    started with :meth:`take_waiting_locked`. Both with the state's lock held.
    """

    def __init__(
        self,
        state: ConsumerState,
        acks: Acks,
        handler: Callable[[Any], Any],
        *,
        each: bool,
        single_when_one: bool,
        auto_ack: bool,
        on_success: Optional[Callable[[Any, Any], Any]],
        on_error: Optional[Callable[[Any, BaseException], Any]],
        group: Optional[str],
    ) -> None:
        self._st = state
        self._acks = acks
        self._handler = handler
        self._each = each
        self._single_when_one = single_when_one
        self._auto_ack = auto_ack
        self._on_success = on_success
        self._on_error = on_error
        self._group = group
        self._lanes: Dict[Any, Lane] = {}
        self._runq: Deque[Lane] = collections.deque()
        self._warned_own_ack = False  # the INFO line about a handler acking itself, once
        #: a worker with nothing queued after its unit pops itself (Fetchers.pop_for_worker)
        self.pop_for_worker: Optional[Callable[[], bool]] = None

    def put_locked(self, units: List[Unit], runner: bool = False) -> None:
        """Queue each unit on its partition's lane, behind the ones already there (wakes one
        idle worker per lane queued, but for one when the caller is a worker that runs a lane
        next: ``runner``)."""
        queued = 0
        for unit in units:
            lane = self._lanes.get(unit.pid)
            if lane is None:
                lane = self._lanes[unit.pid] = Lane(unit.pid)
            lane.units.append(unit)
            if not lane.running and not lane.queued:
                lane.queued = True
                self._runq.append(lane)
                queued += 1
        if runner:
            queued -= 1
        if queued > 0:
            self._st.work.notify(queued)

    def queued_locked(self) -> int:
        """How many lanes wait in the run queue for a worker (lock held)."""
        return len(self._runq)

    def take_waiting_locked(self) -> List[Unit]:
        """Take back the units of every lane whose handler is not running (to release them).
        A running lane keeps its units: releasing them would free the partition (the lease is
        per partition) while its handler runs; its worker releases them once the handler has
        returned and been acked (``abort`` is set)."""
        units: List[Unit] = []
        for lane in list(self._lanes.values()):
            if not lane.running:
                units.extend(lane.units)
                lane.units.clear()
                self._drop_lane_locked(lane)
        return units

    def _drop_lane_locked(self, lane: Lane) -> None:
        if lane.queued:
            try:
                self._runq.remove(lane)
            except ValueError:
                pass
            lane.queued = False
        if self._lanes.get(lane.pid) is lane and not lane.units and not lane.running:
            del self._lanes[lane.pid]


    def run(self) -> None:
        """The loop of one worker: run the next lane's first unit, then put the lane back at the
        tail of the run queue if it has more; ends once stopping with no fetcher left and
        nothing queued."""
        me = threading.get_ident()
        while True:
            with self._st.lock:
                if not self._runq:
                    st = self._st
                    st.idle_workers += 1
                    if st.free_slots > 0:
                        st.standby.notify()  # a fetcher standing by through a backlog pops for this worker
                    try:
                        while not self._runq:
                            if st.stopping and st.fetchers_alive == 0:
                                return
                            st.work.wait(TICK_S)
                    finally:
                        st.idle_workers -= 1
                lane = self._runq.popleft()
                lane.queued = False
                if not lane.units:
                    self._drop_lane_locked(lane)
                    continue
                lane.running = True
                unit = lane.units.popleft()
            finished = False
            try:
                self._run_unit(unit)
                finished = True
            finally:
                with self._st.lock:
                    self._st.room_deferred.discard(me)
                    lane.running = False
                    if lane.units:
                        lane.queued = True
                        self._runq.append(lane)  # at the tail: partitions take turns
                        self._st.work.notify()
                    else:
                        self._drop_lane_locked(lane)
                    own_pop = self.pop_for_worker if finished and not self._runq and not self._st.stopping else None
                    if own_pop is None and self._st.free_slots > 0:
                        self._st.room.notify()  # the wake its resolve deferred
            if own_pop is not None:
                own_pop()  # nothing queued: pop here rather than wait for a fetcher

    def _run_unit(self, unit: Unit) -> None:
        lease = unit.lease
        if self._each:
            while unit.pos < len(unit.msgs):
                if self._st.abort:
                    self._acks.release_units([unit])
                    return
                if lease is not None and lease.lost:
                    self._st.resolve(unit.msgs[unit.pos:], unit, handled=False, lost=True)
                    unit.pos = len(unit.msgs)
                    return
                i = unit.pos
                unit.pos += 1
                if not self._deliver(unit.given[i], [unit.msgs[i]], unit, i):
                    if lease is not None and lease.lost:
                        continue  # the rest is lost (resolved at the top of the loop)
                    rest = unit.msgs[unit.pos:]
                    unit.pos = len(unit.msgs)
                    if rest:
                        self._st.resolve(rest, unit, skipped=True)
                    return
        else:
            if self._st.abort:
                self._acks.release_units([unit])
                return
            if lease is not None and lease.lost:
                self._st.resolve(unit.msgs, unit, handled=False, lost=True)
                unit.pos = len(unit.msgs)
                return
            given = unit.given
            unit.pos = len(given)
            arg: Any = given[0] if (self._single_when_one and len(given) == 1) else list(given)
            self._deliver(arg, unit.msgs, unit, 0)


    def _deliver(self, arg: Any, msgs: List[Message], unit: Unit, first: int) -> bool:
        """Call the handler (and callbacks) with ``arg`` (made of the handler's copies of
        ``msgs``, ``unit.given[first:first + len(msgs)]``), then ack ``msgs``. False when the
        partition's lease was released by a nack (the rest of the unit must be skipped)."""
        with self._st.lock:
            self._st.stats.handled += len(msgs)
            self._st.handlers_running += 1
            running = self._st.handlers_running
            if self._st.free_slots > 0:
                if running == 1:
                    self._st.room.notify()  # a fetcher may pop ahead now (prefetch: while handlers run)
                if running == self._st.workers or (running == 1 and self._st.slow_handlers_locked()):
                    # the same through a backlog: all workers in a handler, or slow handlers
                    # (the cases of Fetchers._wanted_locked that a handler starting creates)
                    self._st.standby.notify()
            if first + len(msgs) >= len(unit.msgs):
                # the unit's last call: the room its ack frees wakes no fetcher until this
                # worker has seen whether it pops itself (run); an earlier message's (each())
                # wakes one at once, as a fetcher may pop ahead with it while this unit goes on
                self._st.room_deferred.add(threading.get_ident())
            started = self._st.last_activity = time.monotonic()
        settled_before = settled_count()
        raiser = "handler"  # what the log line names if this raises
        try:
            try:
                result = self._handler(arg)
                if self._on_success is not None:
                    raiser = "on_success callback"
                    self._on_success(arg, result)
            finally:
                with self._st.lock:
                    # the idle clock (and "unreachable" while acks are pending) runs from here
                    self._st.handlers_running -= 1
                    self._st.last_activity = ended = time.monotonic()
                    self._st.handler_time_s += EWMA_WEIGHT * (ended - started - self._st.handler_time_s)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # SystemExit & co end the thread (and the consumer); this call's messages and
                # the rest of the unit go back to the broker now, not at their lease's expiry
                rest = unit.msgs[first:]
                unit.pos = first
                try:
                    self._acks.release_units([unit])
                except Exception as exc2:  # e.g. the client closed meanwhile: the lease expires
                    log.warning("could not release %d message(s) of queue %r after %s in the handler: %s",
                                len(rest), self._st.queue, type(exc).__name__, exc2)
                    self._st.resolve(rest, unit, handled=False, lost=True)
                raise
            with self._st.lock:
                self._st.stats.failed += len(msgs)
            text = ("%s: %s" % (type(exc).__name__, exc))[:MAX_ERROR_TEXT]
            if self._on_error is not None:
                self._log_handler_failure(
                    raiser, exc, msgs, "calling on_error" + (", then nacking them" if self._auto_ack else ""))
                try:
                    self._on_error(arg, exc)
                except Exception as exc2:
                    log.error(
                        "on_error callback of the consumer of queue %r raised; stopping the consumer",
                        self._st.queue,
                        exc_info=exc2,
                    )
                    if self._auto_ack:
                        self._settle(first, msgs, unit, False, text, settled_before)
                    else:
                        self._st.resolve(msgs, unit)
                    self._st.fail(exc2)
                    return True
                if self._auto_ack:
                    return self._settle(first, msgs, unit, False, text, settled_before)
                self._st.resolve(msgs, unit)
                return True
            if not self._auto_ack:
                self._log_handler_failure(raiser, exc, msgs, "auto_ack is off: stopping the consumer, the error is re-raised")
                self._st.resolve(msgs, unit)
                self._st.fail(exc)
                return True
            self._log_handler_failure(raiser, exc, msgs, "nacking them (the broker retries, then dead-letters)")
            return self._settle(first, msgs, unit, False, text, settled_before)
        if self._auto_ack:
            # False only when the handler released the partition itself (a lost lease is
            # read from the lease at the top of the each() loop)
            return self._settle(first, msgs, unit, True, None, settled_before)
        else:
            self._st.resolve(msgs, unit)
        return True

    def _settle(
        self, first: int, msgs: List[Message], unit: Unit, ok: bool, error: Optional[str], settled_before: int
    ) -> bool:
        """The auto-ack after a handler call: ack (``ok``) or nack ``msgs``, except those the
        handler acked or nacked itself (``msg.ack()``, ``Queen.ack(msg)``, a committed
        transaction's ack: the broker accepted it, see :func:`queen_sync.message.note_settled`).
        Those are not acked again (a second ack is refused, or counted twice against the
        partition's batch), and count in ``acked`` (status ``completed``) or ``nacked`` (any
        other). If the handler's own ack released the partition (a nack, ``retry``), the
        others cannot be acked any more: they count as ``lost`` (the broker redelivers them)
        and False is returned, as after a nack. Returns what :meth:`Acks.ack` returns."""
        if settled_count() == settled_before:  # no ack of a Message anywhere meanwhile: the common case
            return self._acks.ack(msgs, unit, ok, error)
        own = [settled_status(g) for g in unit.given[first:first + len(msgs)]]
        if not any(own):
            return self._acks.ack(msgs, unit, ok, error)
        done = [m for m, st in zip(msgs, own) if st]
        rest = [m for m, st in zip(msgs, own) if not st]
        completed = sum(1 for st in own if st == "completed")
        released = any(st in ("failed", "retry") for st in own)
        if not self._warned_own_ack:
            self._warned_own_ack = True
            log.info(
                "the handler of the consumer of queue %r acks messages itself while auto-ack is on: the consumer "
                "does not ack those again (use .auto_ack(False) to leave every ack to the handler): %s",
                self._st.queue,
                ids(done),
            )
        with self._st.lock:
            self._st.stats.acked += completed
            self._st.stats.nacked += len(done) - completed
            if released and unit.lease is not None:
                unit.lease.released.add(unit.pid)
            self._st.resolve_locked(done, unit)
            if rest and released:
                self._st.resolve_locked(rest, unit, lost=True)
        if rest and released:
            log.warning(
                "the handler nacked or released some messages of its call itself (which releases the partition's "
                "lease): the %d other(s) cannot be %sed, the broker redelivers them: %s",
                len(rest),
                "ack" if ok else "nack",
                ids(rest),
            )
            return False
        if rest:
            return self._acks.ack(rest, unit, ok, error)
        return not released

    def _log_handler_failure(self, raiser: str, exc: BaseException, msgs: List[Message], then: str) -> None:
        """One WARNING per failed handler call, with the traceback; ``raiser`` names what
        raised (``"handler"`` or ``"on_success callback"``, which runs after the handler
        returned); message ids only (queue, partition, transactionId), never payloads."""
        log.warning(
            "%s raised %s on %d message(s) of queue %r%s; %s: %s",
            raiser,
            type(exc).__name__,
            len(msgs),
            self._st.queue,
            "" if self._group is None else " (consumer group %r)" % (self._group,),
            then,
            ", ".join(
                "%s (partition %s)" % (m.get("transactionId"), m.get("partition") or m.get("partitionId"))
                for m in msgs[:MAX_IDS_LOGGED]
            )
            + more(len(msgs)),
            exc_info=exc,
        )

