"""Fetching: the pop loop, room reservation, outage backoff, splitting a pop into lanes.

``concurrency`` **fetchers** pop from the broker (``GET /api/v1/pop/...``). Before a pop a
fetcher reserves room for ``batch`` messages, so at most ``concurrency × batch`` popped
messages are held in memory; with ``limit(n)`` it also reserves its share of the limit
(the limit never overshoots). **Prefetch**: while the workers are busy (handlers
running), a fetcher does not wait for a whole batch of room but pops for the room
there is as soon as that is at least half a batch, so a pop is in flight ahead of the
workers and they do not wait on its round trip (within the same memory bound). Long polls are capped at :data:`POLL_CAP_MILLIS` (and at the
idle time left) so that a stop is prompt. Fetcher 0 always polls; the others rest after an
empty pop until some pop brings messages again, so an idle consumer sends one long poll at
a time.

**Standing by through a backlog**: while the workers pop for themselves (below), the
fetchers wait on ``ConsumerState.standby`` and one pops only when it is wanted
(:meth:`Fetchers._wanted_locked`): for a lane worker waiting for work that no fetcher's pop
is on its way to yet (one pop per idle worker), or ahead of the workers (prefetch) when they
are all in a handler, or some are and handler calls take about as long as a worker's pop or
longer (running averages). A worker that starts waiting wakes one, the end of the backlog all.

A transient pop failure (connection, timeout, 5xx, 429) is retried forever with backoff and
logged once as an outage (``_outage``); any other refusal of a pop (authentication, a
broker error) stops the consumer with that exception. Messages of a pop that comes back
after a stop request are released at once (ack status ``retry``, ``_acks``).

**A worker's own pop** (:meth:`Fetchers.pop_for_worker`): a worker that has finished its
unit and finds no lane queued pops itself while the queue has a backlog (a pop brought all
it asked for since the last empty one) and no fetcher's pop is in flight that no idle worker
waits for (none at all, once a worker's pop came back empty beside fetchers' pops in flight:
their long polls hold every partition with messages, as when there are more workers than
such partitions, until a worker's pop with none in flight brings messages), under the same room and limit
rules, without a long poll, and runs the first lane it brings. The room its unit freed
wakes no fetcher meanwhile (``ConsumerState.room_deferred``); if the worker does not pop,
it passes that wake on. A hand-off between threads is a context switch and a GIL
hand-over, and a fetcher's pop costs two (fetcher → worker, freed room → fetcher): more
client CPU per batch than decoding the pop (``benchmarks/bench_consume.py``).
"""

from __future__ import annotations

import collections
import functools
import math
import operator
import time
from dataclasses import replace
from typing import Any, List, Optional, Tuple, cast

from ..errors import ClientClosedError
from ._acks import Acks
from ._calls import Broker, PopSpec
from ._lanes import Lanes
from ._leases import Renewer
from ._log import log
from ._outage import backoff, transient
from ._state import EWMA_WEIGHT, TICK_S, ConsumerState, Lease, Message, Unit

__all__ = ["Fetchers", "POLL_CAP_MILLIS"]

#: Longest long poll a consumer sends, in milliseconds (keeps stop() prompt).
POLL_CAP_MILLIS = 1000
_PARTITION_ID = operator.itemgetter("partitionId")

#: Most pop settings :func:`_derived` keeps.
_MAX_SPECS = 64

#: Pause between two pops without long poll (``wait(False)``) that came back empty, in seconds.
NO_WAIT_PAUSE_S = 0.1


@functools.lru_cache(maxsize=_MAX_SPECS)
def _derived(spec: PopSpec, batch: int, wait: bool, timeout_millis: int,
             read_timeout_millis: Optional[int]) -> PopSpec:
    """``spec`` with these settings, made once and kept: a few sizes and timeouts recur, and
    ``dataclasses.replace`` per pop costs more than the pop's own bookkeeping."""
    return replace(spec, batch=batch, wait=wait, timeout_millis=timeout_millis, read_timeout_millis=read_timeout_millis)


class Fetchers:
    """The fetcher loops of one consumer (each run by its own thread: :meth:`run`).

    Args:
        state: the consumer's shared state (room, limit, idle clock, stop request).
        broker: its broker calls (``pop`` and ``bind``).
        spec: the pop settings (its ``batch`` and ``timeout_millis`` are the most per pop).
        lanes: where popped messages are queued for the workers.
        acks: releases a pop that came back after a stop request.
        renewer: schedules the first renewal of each new lease; None without
            ``renew_lease(True)``.
    """

    def __init__(self, state: ConsumerState, broker: Broker, spec: PopSpec, lanes: Lanes, acks: Acks,
                 renewer: Optional[Renewer]) -> None:
        self._st = state
        self._broker = broker
        self._spec = spec
        self._lanes = lanes
        self._acks = acks
        self._renewer = renewer
        self._work_gen = 0  # pops that brought messages (wakes the resting fetchers)
        self._backlog = False  # a pop brought all it asked for since the last empty one
        # a worker's pop came back empty beside fetchers' pops in flight (they hold every
        # partition with messages: more workers than such partitions); until a worker's pop
        # with no fetcher's in flight brings messages, a worker pops only with none in flight
        self._race_lost = False
        self._fetching = 0  # fetchers' pops in flight (a worker waits for those, it does not pop)

    def _acquire(self) -> int:
        """Reserve room (and limit budget) for one pop, waiting for it, and count the pop as
        a fetcher's (``_fetching``); 0 means the fetcher should end (see
        :meth:`_reserve_locked`)."""
        st = self._st
        with st.lock:
            while True:
                if self._backlog and not st.stopping and not self._wanted_locked():
                    st.standby.wait(TICK_S)
                    continue
                n = self._reserve_locked()
                if n > 0:
                    self._fetching += 1
                    return n
                if n < 0:
                    return 0
                st.room.wait(TICK_S)

    def _wanted_locked(self) -> bool:
        """Whether a fetcher's pop is wanted through a backlog, where the workers pop for
        themselves: for a worker waiting for work that no fetcher's pop is on its way to
        yet, or ahead of the workers (prefetch) when they are all in a handler, or when some
        are and a handler call takes about as long as a worker's pop or longer
        (``ConsumerState.slow_handlers_locked``). One pop per idle worker, not one per
        fetcher: a fetcher's pop in flight makes a worker that finishes meanwhile wait for
        it (pop_for_worker), and more pops for it would hand every batch from a fetcher to a
        worker from then on (two thread hand-offs each, more than quick handlers take)."""
        st = self._st
        return (self._idle_uncovered_locked() > self._fetching or st.handlers_running >= st.workers
                or (st.handlers_running > 0 and st.slow_handlers_locked()))

    def _idle_uncovered_locked(self) -> int:
        """Lane workers waiting for work that no lane queued is waiting for (a worker woken
        for a queued lane counts as idle until it runs: without this, each pop would wake one
        worker and send a fetcher's pop for it too)."""
        return max(0, self._st.idle_workers - self._lanes.queued_locked())

    def _reserve_locked(self) -> int:
        """Reserve room (and limit budget) for one pop if there is enough: its size, ``0``
        (not yet: wait for room) or ``-1`` (stopping: no more pops).

        The pop is for ``batch`` messages (less when the limit has less left) once that much
        room is free; while handlers are running it is for the room there is as soon as half
        of that is free (prefetch: see the module docstring)."""
        if self._st.stopping:
            return -1
        if self._st.user_stop is not None and self._st.user_stop.is_set():
            self._st.request_stop_locked("stopped")  # at once, not at the supervisor's next tick
            return -1
        n = self._spec.batch
        if self._st.limit is not None:
            left = self._st.limit - self._st.reserved
            if left <= 0:
                if self._st.stats.handled >= self._st.limit:
                    self._st.request_stop_locked("limit")
                    return -1
                return 0
            n = min(n, left)
        free = self._st.free_slots
        if free < n and self._st.handlers_running > 0 and 2 * free >= n:
            # prefetch: handlers are running, do not let their workers wait on this pop (not
            # for acks in flight: their worker pops itself next, see pop_for_worker)
            n = free
        if free < n:
            return 0
        self._st.free_slots -= n
        self._st.reserved += n
        if self._st.free_slots > 0:
            self._st.room.notify()  # room is left: the next waiting fetcher may take it
        return n

    def run(self, index: int) -> None:
        """The loop of fetcher ``index`` (0 always polls; see the module docstring)."""
        try:
            self._loop(index)
        finally:
            with self._st.lock:
                self._st.fetchers_alive -= 1
                self._st.notify_everyone_locked()

    def _loop(self, index: int) -> None:
        spec = self._spec
        attempt = 0
        while True:
            n = self._acquire()
            if n == 0:
                return
            timeout = min(spec.timeout_millis, POLL_CAP_MILLIS)
            with self._st.lock:
                if self._st.idle_s is not None:
                    idle_left = self._st.idle_s - (time.monotonic() - self._st.last_activity)
                    if idle_left <= 0 and self._st.outstanding == 0:
                        # idle time is up: no new pop, the supervisor stops the consumer
                        # (unless a handler finishing meanwhile starts a new idle period)
                        self._st.give_back_locked(n, n)
                        self._fetching -= 1
                        while (
                            not self._st.stopping
                            and self._st.outstanding == 0
                            and time.monotonic() - self._st.last_activity >= self._st.idle_s
                        ):
                            self._st.rest.wait(TICK_S)
                        continue
                    timeout = max(1, min(timeout, int(math.ceil(idle_left * 1000.0))))
                self._st.pops_in_flight += 1
            pop = self._pop_spec(n, timeout, False)
            t0 = time.monotonic()
            # _pops_in_flight drops only once the outcome is recorded (outage or activity),
            # so the supervisor's idle check never sees a pop's result half-way.
            try:
                messages = self._broker.pop(pop)
            except BaseException as exc:
                if self._pop_failed(exc, n, t0, fetcher=True):
                    self._st.stop_evt.wait(backoff(attempt))
                    attempt += 1
                    continue
                if not isinstance(exc, Exception):
                    raise
                return
            attempt = 0
            self._st.outage.success(t0)
            with self._st.lock:
                self._st.pops_in_flight -= 1
                self._fetching -= 1
                gen = self._work_gen
                self._pop_done_locked(n, messages)
            if messages:
                self._dispatch(messages)
                continue
            if index > 0:
                # Rest until some pop brings messages again (fetcher 0 keeps polling).
                with self._st.lock:
                    while not self._st.stopping and self._work_gen == gen:
                        self._st.rest.wait(1.0)
            elif not spec.wait:
                self._st.stop_evt.wait(NO_WAIT_PAUSE_S)

    def pop_for_worker(self) -> bool:
        """One pop made by a lane worker that has finished its unit and found no lane queued
        (it would otherwise wait for the next pop); the worker then runs what it brought. Not
        while more fetchers' pops are in flight than idle workers wait for: such a pop was
        made ahead for the workers, and a long poll waiting at the broker takes the next batch
        the moment there is one (a worker's pop racing it would mostly come back empty). A
        pop on its way to an idle worker holds no other worker back (else each such pop would
        idle one more worker, and the fetchers would end up making every pop), unless a
        worker's pop beside fetchers' pops came back empty since a worker's pop with none in
        flight last brought messages (``_race_lost``: the long polls hold every partition).

        In the steady state this saves the two thread hand-offs of a fetcher's pop (the
        fetcher waking a worker, the worker's freed room waking a fetcher), each a context
        switch and a GIL hand-over that cost more CPU than decoding the pop. It asks for the
        room there is (as a fetcher would) without a long poll, and only while the queue has
        a backlog: from a pop that brought all it asked for to one that brought nothing (a
        short pop in between, as when partitions run dry one by one, keeps it). A queue
        with no backlog (an idle consumer, a trickle of messages) is left to the fetchers'
        long polls, one pop per arrival. A failure is
        read as a fetcher's: a refusal stops the consumer with that error, a closed client
        with reason ``"closed"``; a transient one is recorded as an outage (logged once), so
        that ``idle_millis`` passing while it was in flight stops the consumer
        ``"unreachable"``, not ``"idle"``, and is left to the fetchers (their backoff): its
        room goes back and nothing is retried here. Returns True when it
        brought messages (queued on the lanes).

        Wire: ``GET /api/v1/pop/...`` with ``wait=false`` (see :func:`queen_sync.wire.messages.pop`),
        read timeout ``ack_timeout_millis``.
        """
        with self._st.lock:
            beside = self._fetching  # fetchers' pops in flight beside this one
            if not self._backlog or beside > (0 if self._race_lost else self._idle_uncovered_locked()):
                if self._st.free_slots > 0:
                    self._st.room.notify()  # the wake the worker's resolve deferred (Lanes.run)
                return False
            n = self._reserve_locked()
            if n <= 0:
                return False
            self._st.pops_in_flight += 1
        t0 = time.monotonic()
        try:
            # a read timeout as an ack's (ack_timeout_millis), not the client's 30 s: a
            # half-open connection must not hold this worker and its room for long
            pop = self._pop_spec(n, self._spec.timeout_millis, True)
            messages = self._broker.pop(pop)
        except BaseException as exc:
            if self._pop_failed(exc, n, t0, fetcher=False):
                log.debug("a worker's pop from queue %r failed (%s); the fetchers carry on", self._st.queue, exc)
            if not isinstance(exc, Exception):
                raise
            return False
        self._st.outage.success(t0)
        with self._st.lock:
            self._pop_done_locked(n, messages)
            # (a worker's pop, not a fetcher's: a long poll's time is the broker's wait)
            self._st.pop_time_s += EWMA_WEIGHT * (time.monotonic() - t0 - self._st.pop_time_s)
            if not messages:
                self._st.pops_in_flight -= 1
                if beside:
                    self._race_lost = True
            elif not beside:
                self._race_lost = False
        if not messages:
            return False
        # the pop stays in flight until its messages are outstanding (_dispatch): no fetcher
        # is left to hold the stop phase meanwhile, which would end and leave them unreleased
        self._dispatch(messages, runner=True)
        return True

    def _pop_spec(self, n: int, timeout_millis: int, worker: bool) -> PopSpec:
        """The pop of ``n`` messages with long-poll ``timeout_millis`` (a fetcher's), or a
        worker's own (no long poll, read timeout ``ack_timeout_millis``); see :func:`_derived`."""
        if worker:
            return _derived(self._spec, n, False, self._spec.timeout_millis, self._broker.call_timeout_millis())
        return _derived(self._spec, n, self._spec.wait, timeout_millis, self._spec.read_timeout_millis)

    def _pop_failed(self, exc: BaseException, n: int, t0: float, fetcher: bool) -> bool:
        """Record a pop (a fetcher's, or a worker's own) for ``n`` reserved messages that
        raised ``exc``: its room and limit budget go back; a transient failure is an outage
        (logged once); a closed client stops the consumer (``"closed"``) and any other
        refusal stops it with ``exc``. True when transient (worth a pop after backoff)."""
        is_transient = isinstance(exc, Exception) and transient(exc)
        if is_transient:
            self._st.outage.failure("pop", exc, t0)
        with self._st.lock:
            self._st.pops_in_flight -= 1
            if fetcher:
                self._fetching -= 1
            self._st.give_back_locked(n, n)
            if self._backlog:
                self._backlog = False
                self._st.standby.notify_all()  # the fetchers standing by through the backlog take over
            if isinstance(exc, ClientClosedError):
                self._st.request_stop_locked("closed")
        if isinstance(exc, Exception) and not is_transient and not isinstance(exc, ClientClosedError):
            log.error("pop from queue %r failed: %s; stopping the consumer", self._st.queue, exc)
            self._st.fail(exc)
        return is_transient

    def _pop_done_locked(self, n: int, messages: List[Message]) -> None:
        """Record a pop for ``n`` reserved messages that brought ``messages`` (lock held): the
        unused room and budget go back, and whether there is a backlog (see below);
        messages wake the resting fetchers."""
        self._st.give_back_locked(n - len(messages), n - len(messages))
        # A pop that brought all it asked for starts a backlog, an empty one ends it, a
        # short one leaves it as it was. So a draining queue (partitions running dry one by
        # one, each pop bringing their rest) stays with the workers' own pops until a pop
        # finds nothing, while a trickle (pops shorter than asked) never starts one.
        if len(messages) >= n:
            self._backlog = True
        elif not messages and self._backlog:
            self._backlog = False
            self._st.standby.notify_all()  # the fetchers standing by through the backlog poll again
        if messages:
            self._work_gen += 1
            self._st.last_activity = time.monotonic()
            self._st.rest.notify_all()  # the resting fetchers poll again

    def _dispatch(self, popped: List[Message], runner: bool = False) -> None:
        """Split one pop per partition into lanes (or release it when stopping); ``runner``:
        the calling thread is a worker that runs the first lane queued itself, and whose pop
        is still counted in ``pops_in_flight`` (ended here, as its messages are counted)."""
        # handlers get queen_sync.Message objects (copies that can ack and trace themselves);
        # the consumer keeps the pop reply's own dicts to ack from (see Unit)
        given = cast(List[Message], self._broker.bind(popped))
        groups: List[Tuple[Any, List[Message], List[Message]]]
        try:
            pids = set(map(_PARTITION_ID, popped))  # one pass in C (no Python call per message)
        except KeyError:
            pids = set()
        if len(pids) == 1 and next(iter(pids)):
            groups = [(next(iter(pids)), popped, given)]  # a pop of one partition (the common case)
        else:
            by_pid: "collections.OrderedDict[Any, Tuple[List[Message], List[Message]]]" = collections.OrderedDict()
            for m, g in zip(popped, given):
                key = m.get("partitionId") or m.get("partition")
                entry = by_pid.get(key)
                if entry is None:
                    entry = by_pid[key] = ([], [])
                entry[0].append(m)
                entry[1].append(g)
            groups = [(pid, ms, gs) for pid, (ms, gs) in by_pid.items()]
        release: List[Unit] = []
        with self._st.lock:
            self._st.outstanding += len(popped)
            if runner:
                self._st.pops_in_flight -= 1  # the worker's pop (pop_for_worker): its messages count now
            units = []
            for pid, msgs, gvn in groups:
                lid = msgs[0].get("leaseId") or ""
                lease = None
                if lid:
                    lease = self._st.leases.get(lid)
                    if lease is None:
                        lease = self._st.leases[lid] = Lease(lid)
                        if self._renewer is not None:
                            self._renewer.schedule_first(lease)
                            self._st.lock.notify_all()  # the renewer may sleep past its first renewal
                    lease.outstanding[pid] = lease.outstanding.get(pid, 0) + len(msgs)
                    lease.popped.append(msgs)
                units.append(Unit(pid, msgs, lease, gvn))
            if self._st.stopping:
                release = units
            else:
                self._lanes.put_locked(units, runner)
        if release:
            log.debug("consumer of queue %r is stopping: releasing %d message(s) popped meanwhile", self._st.queue, len(popped))
            self._acks.release_units(release)

