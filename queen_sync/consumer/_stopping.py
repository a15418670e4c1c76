"""Stopping: watching the stop conditions, then the stop phase (drain, release, bounded waits).

A consumer stops on ``limit``, ``idle_millis`` without messages, a ``stop_event``,
:meth:`Queen.close`, :meth:`Consumer.stop`, ``KeyboardInterrupt`` (blocking ``consume()``) or,
with ``handle_signals=True``, SIGTERM / SIGINT (``_signals``). :meth:`Supervisor.watch` turns
those into a stop request; when ``idle_millis`` passes while an outage is in progress (no call
got an answer since it began) the reason is ``"unreachable"``, with the last connection error
as the consumer's error: "no work" and "broker down" are told apart. A busy consumer whose
acks / releases are retrying through an outage that has lasted ``idle_millis`` (since the
last handler returned, no handler running) stops the same way, with a drain timeout of 0:
its pending acks are given up (counted in ``uncertain``), so a blocking ``consume()``
returns within ``idle_millis`` + the time one call needs to fail + :data:`FETCH_GRACE_S`
and one release attempt.

Stopping means: no new pop is started; messages of a pop that comes back after the stop
request are released at once (``_fetching``); messages popped before it are handled and
acked, up to the drain timeout; at the drain timeout the messages not yet given to a handler
are released (ack status ``retry``), **except** those of a partition whose handler is still
running: releasing them would free the partition (the lease is per partition) while its
handler runs, so they are released only once that handler has returned and been acked
(``_lanes``). Handlers still running are left to finish (their acks still go out;
:attr:`Consumer.is_running` stays True until then). Every wait of a stop is bounded
(in-flight pops and releases included): :data:`FETCH_GRACE_S` for the pops,
:data:`STOP_GRACE_S` for :meth:`Consumer.stop`.
"""

from __future__ import annotations

import threading
import time
from typing import List, Optional

from ._acks import Acks
from ._calls import Broker
from ._fetching import POLL_CAP_MILLIS
from ._lanes import Lanes
from ._log import log
from ._signals import SignalHook
from ._state import TICK_S, ConsumerState, Unit

__all__ = ["FETCH_GRACE_S", "STOP_GRACE_S", "Supervisor"]

#: How long a stop waits for in-flight pops past the drain deadline, in seconds (a pop's
#: long poll is capped at POLL_CAP_MILLIS); after that the stop goes on without them.
FETCH_GRACE_S = POLL_CAP_MILLIS / 1000.0 + 1.0
#: How long stop() waits past the drain deadline for the stop phase (the fetcher grace plus
#: the release of the messages not handled), in seconds.
STOP_GRACE_S = FETCH_GRACE_S + 3.0


class Supervisor:
    """Watches one consumer's stop conditions and runs its stop phase.

    Args:
        state: the consumer's shared state.
        broker: its broker calls (only the client's ``closed`` flag is read).
        lanes: gives back the units no handler got by the drain timeout.
        acks: releases them.
        signals: its signal hook (the flag a signal sets).
        user_stop: the ``stop_event`` given to ``consume()``, or None.

    :attr:`finished` is set once the stop phase is over (drained, or drain timeout and
    releases done).
    """

    def __init__(self, state: ConsumerState, broker: Broker, lanes: Lanes, acks: Acks, signals: SignalHook,
                 user_stop: Optional[threading.Event]) -> None:
        self._st = state
        self._broker = broker
        self._lanes = lanes
        self._acks = acks
        self._signals = signals
        self._user_stop = user_stop
        self.finished = threading.Event()

    def wait_finished(self, extra: float = STOP_GRACE_S) -> bool:
        """Wait until the stop phase is over, at most ``extra`` seconds past the drain
        deadline (which a later stop may move earlier). True when it is over."""
        while not self.finished.wait(TICK_S):
            if time.monotonic() > self._st.drain_deadline + extra:
                return self.finished.is_set()
        return True

    def watch(self) -> None:
        """Watch the stop conditions, then run the stop phase."""
        with self._st.lock:
            while not self._st.stopping:
                if self._user_stop is not None and self._user_stop.is_set():
                    self._st.request_stop_locked("stopped")
                    break
                if self._signals.flag is not None:
                    log.info("consumer of queue %r got signal %d; stopping gracefully", self._st.queue, self._signals.flag)
                    self._st.request_stop_locked("signal")
                    break
                if self._broker.closed:
                    self._st.request_stop_locked("closed")
                    break
                if self._st.idle_s is not None and self._idle_stop_locked():
                    break
                self._st.lock.wait(TICK_S)
        self.finish()

    def _idle_stop_locked(self) -> bool:
        """Stop on ``idle_millis`` when it is due ("idle" or "unreachable"); True if so."""
        idle_s = self._st.idle_s
        assert idle_s is not None
        quiet = time.monotonic() - self._st.last_activity >= idle_s
        if not quiet:
            return False
        if self._st.outstanding == 0 and self._st.pops_in_flight == 0:
            # (an in-flight pop is awaited: its long poll ends by the idle deadline, and when
            # the broker is down, its failure tells "unreachable" from "idle")
            if self._st.outage.active:  # no call got through since the outage began: not "no work"
                self._unreachable_locked("no message for %d ms" % int(idle_s * 1000), None)
            else:
                self._st.request_stop_locked("idle")
            return True
        if (
            self._st.outstanding > 0
            and self._st.handlers_running == 0
            and self._st.outage.for_seconds() >= idle_s
        ):
            # busy, but only with acks / releases retrying through an outage that outlasted
            # idle_millis: waiting for them could take forever. Give up on them at once
            # (drain timeout 0); the acks and nacks left count as uncertain.
            self._unreachable_locked(
                "%d message(s) waiting for acks or handlers, no answer for %d ms" % (self._st.outstanding, int(idle_s * 1000)),
                0.0,
            )
            return True
        return False

    def _unreachable_locked(self, what: str, drain_timeout: "Optional[float]") -> None:
        err = self._st.outage.last_error
        log.warning(
            "consumer of queue %r: %s while the broker is unreachable (%s); stopping with reason 'unreachable'",
            self._st.queue,
            what,
            err,
        )
        self._st.request_stop_locked("unreachable", drain_timeout)
        if self._st.error is None and err is not None:
            self._st.error = err

    def finish(self) -> None:
        """The stop phase: drain until the deadline, release what no handler got by then,
        then wait (bounded) for the in-flight pops, whose messages are released as they come."""
        with self._st.lock:
            # In-flight pops end within a long poll (POLL_CAP_MILLIS) in the normal case; the
            # wait for them is bounded anyway (a pop or a release stuck in an outage).
            fetch_deadline = max(self._st.drain_deadline, time.monotonic() + FETCH_GRACE_S)
            while self._st.outstanding > 0 or self._st.fetchers_alive > 0 or self._st.pops_in_flight > 0:
                left = self._st.drain_deadline - time.monotonic()
                if left <= 0:
                    break
                self._st.lock.wait(min(TICK_S, left))
            units: List[Unit] = []
            if self._st.outstanding > 0:
                self._st.abort_locked()  # no more retries of acks / releases
                units = self._lanes.take_waiting_locked()
            self._st.notify_everyone_locked()
        if units:
            log.info(
                "drain timeout of the consumer of queue %r: releasing %d message(s) not yet handled",
                self._st.queue,
                sum(len(u.msgs) - u.pos for u in units),
            )
            self._acks.release_units(units)
        with self._st.lock:
            # stopping "unreachable", also wait (bounded) for the acks given up on, so the
            # counters returned say how many are uncertain
            while self._st.fetchers_alive > 0 or self._st.pops_in_flight > 0 or (self._st.stats.reason == "unreachable" and self._st.outstanding > 0):
                left = fetch_deadline - time.monotonic()
                if left <= 0:
                    log.info(
                        "consumer of queue %r: %d fetcher(s), %d message(s) still busy at the stop deadline; "
                        "not waiting for them",
                        self._st.queue,
                        self._st.fetchers_alive,
                        self._st.outstanding,
                    )
                    self._st.abort_locked()
                    break
                self._st.lock.wait(min(TICK_S, left))
            self._st.notify_everyone_locked()
        self.finished.set()

