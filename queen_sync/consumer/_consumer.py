"""The :class:`Consumer`: its public API and lifecycle (settings, threads, start / stop / join).

A Consumer wires its parts together and runs them in threads: the ``concurrency`` workers of
the lanes (``_lanes``), the ``concurrency`` fetchers (``_fetching``), the renewer with
``renew_lease(True)`` (``_leases``) and, for ``start()``, a supervisor thread that watches the
stop conditions and runs the stop phase (``_stopping``; the blocking :meth:`Consumer.run` does
that in the calling thread). The parts share one :class:`~._state.ConsumerState` and reach the
broker only through one :class:`~._calls.Broker`.

Fork: a process forked from one running a consumer gets a copy without threads: there
:attr:`Consumer.is_running` is False, :meth:`Consumer.stop` / :meth:`Consumer.join` /
``with consumer:`` / :meth:`Queen.close` return at once, and nothing is acked or released (the
leases belong to the parent, whose consumer goes on). The child logs one WARNING saying so
(``_registry.check_fork``: at fork, or at the first use on a fork path without Python's
at-fork hooks, such as uWSGI's).
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set

from .. import _fork
from .._callables import check_arity
from .._validate import millis_or_deprecated_seconds
from ..errors import InvalidInputError
from ._acks import Acks
from ._calls import Broker, BuilderSettings
from ._fetching import POLL_CAP_MILLIS, Fetchers
from ._lanes import Lanes
from ._leases import Renewer
from ._log import log
from ._outage import Outage
from ._registry import check_fork, register, unregister
from ._signals import SignalHook
from ._state import ConsumeResult, ConsumerState
from ._stopping import STOP_GRACE_S, Supervisor

if TYPE_CHECKING:  # pragma: no cover
    from .._session import Session

__all__ = ["Consumer", "DEFAULT_DRAIN_TIMEOUT_MILLIS", "DEFAULT_DRAIN_TIMEOUT_SECONDS", "MAX_CONCURRENCY"]

#: Default drain timeout of a stop, in milliseconds.
DEFAULT_DRAIN_TIMEOUT_MILLIS = 30000
#: The same in seconds (deprecated: kept for one release with ``drain_timeout``).
DEFAULT_DRAIN_TIMEOUT_SECONDS = DEFAULT_DRAIN_TIMEOUT_MILLIS / 1000.0
#: The most ``concurrency(n)`` takes: each unit is a worker thread (and up to one fetcher);
#: past this, a process starts thousands of threads before its first pop (use processes).
MAX_CONCURRENCY = 1024


class Consumer:
    """A consume loop over one queue builder's consume settings; see
    :meth:`queen_sync.QueueBuilder.consume` (made from :meth:`queen_sync.Queen.queue`).

    Made by ``consume(handler)`` (blocking: :meth:`run`) or ``consume(handler,
    background=True)`` (started, returned to the caller).

    Args:
        session: the :class:`~queen_sync._session.Session` of the client (what the
            consumer sends through; ``Queen.close`` stops the consumers of its session).
        settings: the :class:`~queen_sync.consumer.BuilderSettings` the queue builder hands
            over: its pop settings (``batch``, ``partitions``, ...) and consume settings
            (``concurrency``, ``each``, ``limit``, ``idle_millis``, ``auto_ack``,
            ``renew_lease``, ``on_success``, ``on_error``).
        handler: called with one message dict (``each()`` or ``batch == 1``), else with the
            list of one partition's messages of one pop.
        stop_event: optional ``threading.Event``; setting it stops the consumer: no pop starts
            after it is set (messages already popped are handled in the drain), and it is
            checked at least every 100 ms.
        handle_signals: turn SIGTERM / SIGINT into a graceful stop while the consumer runs
            (a second signal goes to the previous handler); the previous handlers are
            restored when it ends. Main thread only.
        drain_timeout_millis: milliseconds a stop waits for popped messages to be handled
            and acked (default 30000).
        drain_timeout: deprecated, the same in seconds (DeprecationWarning; removed in the
            next release).

    Threads: ``concurrency`` workers and as many fetchers, but at most ``pool_maxsize - 1``
    fetchers (their long polls must leave a connection for the acks).

    Raises:
        InvalidInputError: handler not callable (or not taking one positional argument, or
            an async function), ``handle_signals`` outside the main
            thread, a negative drain timeout, both drain timeout arguments, ``settings``
            not a :class:`~queen_sync.consumer.BuilderSettings`, or ``concurrency`` above 1
            on a client with ``pool_maxsize=1``.

    Live counters (ints): :attr:`handled`, :attr:`acked`, :attr:`nacked`, :attr:`failed`,
    :attr:`skipped`, :attr:`renewals`, :attr:`ack_failures`, :attr:`ack_uncertain`, :attr:`uncertain`,
    :attr:`renew_failures`, :attr:`lost`, :attr:`released`; :attr:`result` is a snapshot :class:`ConsumeResult`.
    """

    def __init__(
        self,
        session: "Session",
        settings: BuilderSettings,
        handler: Callable[[Any], Any],
        *,
        stop_event: Optional[threading.Event] = None,
        handle_signals: bool = False,
        drain_timeout_millis: Optional[int] = None,
        drain_timeout: Optional[float] = None,
    ) -> None:
        if not callable(handler):
            raise InvalidInputError("consume() needs a callable handler, got %r" % (handler,))
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None)):
            # it would return a coroutine that never runs, and the message would be acked
            raise InvalidInputError(
                "consume() handlers are called synchronously; %r is an async function (its body would never "
                "run). Use a plain function, or asyncio.run(...) inside one" % (handler,)
            )
        # a handler that cannot take the message would raise TypeError on every one: each
        # nacked, the whole backlog into the dead-letter queue
        check_arity(handler, 1, "consume() handler (called with the message, or the list of one pop's messages)")
        drain_ms = millis_or_deprecated_seconds(
            "drain_timeout_millis", drain_timeout_millis, "drain_timeout", drain_timeout, DEFAULT_DRAIN_TIMEOUT_MILLIS
        )
        if not isinstance(handle_signals, bool):
            raise InvalidInputError("handle_signals must be True or False, got %r" % (handle_signals,))
        if handle_signals and threading.current_thread() is not threading.main_thread():
            raise InvalidInputError("handle_signals=True works only in the main thread (Python signal rules)")
        if not isinstance(settings, BuilderSettings):
            raise InvalidInputError(
                "Consumer() takes the consume settings a queue builder hands over; start a consumer with "
                "queen.queue(name)...consume(handler), got %r" % (settings,)
            )
        spec = settings.spec
        self._session = session
        self._queue = spec.queue
        self._group = spec.group
        self._concurrency: int = settings.concurrency
        broker = Broker(session)
        pool = broker.pool_maxsize()
        if pool is not None and pool < 2 and self._concurrency > 1:
            raise InvalidInputError(
                "consume() with concurrency(%d) needs a client with pool_maxsize of at least 2 (it is %d): a "
                "fetcher's long poll holds a connection for up to %d ms while the workers' acks need another; "
                "%d (2 x concurrency) lets every poll and every ack have a connection of its own"
                % (self._concurrency, pool, POLL_CAP_MILLIS, 2 * self._concurrency)
            )
        # fetchers: at most pool_maxsize - 1, so that their long polls never hold every
        # connection and leave none for the acks (the workers' own pops do the rest)
        self._fetcher_count = self._concurrency if pool is None else max(1, min(self._concurrency, pool - 1))
        # an explicit auto_ack() always holds; callbacks only change the default (to False)
        has_callbacks = settings.on_success is not None or settings.on_error is not None
        auto_ack: bool = (not has_callbacks) if settings.auto_ack is None else settings.auto_ack
        idle_s = None if settings.idle_millis is None else settings.idle_millis / 1000.0
        self._st = ConsumerState(spec.queue, self._concurrency * spec.batch, settings.limit, idle_s,
                                 (drain_ms or 0) / 1000.0, workers=self._concurrency)
        self._st.user_stop = stop_event
        renew_ms = settings.renew_interval_millis
        acks = Acks(self._st, broker, spec.group, renews=renew_ms is not None)
        self._lanes = Lanes(
            self._st,
            acks,
            handler,
            each=settings.each or spec.batch == 1,
            single_when_one=spec.batch == 1,
            auto_ack=auto_ack,
            on_success=settings.on_success,
            on_error=settings.on_error,
            group=spec.group,
        )
        self._renewer = None if renew_ms is None else Renewer(self._st, broker, renew_ms, auto_ack)
        self._fetchers = Fetchers(self._st, broker, spec, self._lanes, acks, self._renewer)
        self._lanes.pop_for_worker = self._fetchers.pop_for_worker
        self._started = False
        self._done = threading.Event()  # every thread of this consumer ended
        self._signals = SignalHook(
            handle_signals, lambda: not self._st.stopping and not self._done.is_set() and not self._forked()
        )
        self._supervisor = Supervisor(self._st, broker, self._lanes, acks, self._signals, stop_event)
        self._threads: List[threading.Thread] = []
        self._threads_alive = 0
        self._thread_ids: Set[int] = set()
        self._pid = os.getpid()  # the process whose threads run this consumer
        self._started_at_millis: Optional[int] = None  # wall clock (Unix epoch ms) of start

    # the shared state a test or debugger looks at (read-only views)
    _lock = property(lambda self: self._st.lock, doc="The consumer's one lock (a Condition).")
    _outstanding = property(lambda self: self._st.outstanding, doc="Popped messages not finished.")
    _free_slots = property(lambda self: self._st.free_slots, doc="Room for messages not yet popped.")

    _finished = property(lambda self: self._supervisor.finished, doc="Set once the stop phase is over.")

    @property
    def _outage(self) -> Outage:
        """The consumer's outage tracker (``active`` during a broker outage)."""
        return self._st.outage

    def _request_stop(self, reason: str, drain_timeout: Optional[float] = None) -> None:
        self._st.request_stop(reason, drain_timeout)

    def __repr__(self) -> str:
        return "Consumer(queue=%r, group=%r, concurrency=%d, %s)" % (
            self._st.queue,
            self._group,
            self._concurrency,
            "running" if self.is_running else ("stopped: %s" % self._st.stats.reason if self._started else "not started"),
        )

    # ------------------------------------------------------------------ public API

    def _forked(self) -> bool:
        """True in a process forked from the one running this consumer: its copy here has no
        threads (and its lock may have been held at fork time), so it is left alone. The
        first such check in a child also makes the registry fork-safe (:func:`check_fork`)."""
        if self._started and os.getpid() != self._pid:
            check_fork()
            return True
        return False

    @property
    def is_running(self) -> bool:
        """True from start until every thread of the consumer ended (handlers included).
        False in a forked child (the copy there has no threads)."""
        return self._started and not self._done.is_set() and not self._forked()

    def describe(self) -> Dict[str, Any]:
        """What this consumer is, for :meth:`Queen.running_consumers`: a new dict
        ``{"queue": str, "group": str | None (None in queue mode), "query": None, "threads":
        int (its threads alive now: handler workers, fetchers, lease renewer, supervisor),
        "started_at_millis": int | None (when it started, Unix epoch milliseconds; None
        before)}``. Read without the consumer's lock (a snapshot); sends nothing."""
        return {
            "queue": self._queue,
            "group": self._group,
            "query": None,
            "threads": self._threads_alive,
            "started_at_millis": self._started_at_millis,
        }

    @property
    def result(self) -> ConsumeResult:
        """A snapshot of the counters and the stop reason (``""`` while running, ``"forked"``
        in a process forked from the one running it)."""
        if self._forked():
            # no lock: a parent thread may have held it at fork
            return replace(self._st.stats, reason=self._st.stats.reason or "forked")
        with self._st.lock:
            return replace(self._st.stats)

    @property
    def error(self) -> Optional[BaseException]:
        """The exception that stopped the consumer, else None: for reason ``"error"`` the
        handler's or pop's exception, for reason ``"unreachable"`` the last connection error
        (a :class:`~queen_sync.errors.QueenConnectionError`, or the
        :class:`~queen_sync.errors.QueenHTTPError` of a 5xx / 429 reply)."""
        return self._st.error

    @property
    def reason(self) -> str:
        """Why the consumer stopped (see :class:`ConsumeResult`); ``""`` while running."""
        return self._st.stats.reason

    handled = property(lambda self: self._st.stats.handled, doc="Messages delivered to the handler.")
    acked = property(lambda self: self._st.stats.acked, doc="Messages acked completed (auto-ack).")
    nacked = property(lambda self: self._st.stats.nacked, doc="Messages nacked failed (auto-ack).")
    failed = property(lambda self: self._st.stats.failed, doc="Messages whose handler raised.")
    skipped = property(lambda self: self._st.stats.skipped, doc="Messages skipped after a nack.")
    renewals = property(lambda self: self._st.stats.renewals, doc="Lease renewals accepted.")
    ack_failures = property(lambda self: self._st.stats.ack_failures, doc="Acks refused or not sent.")
    ack_uncertain = property(
        lambda self: self._st.stats.ack_uncertain, doc="Acks whose reply was lost, not (yet) confirmed."
    )
    uncertain = property(
        lambda self: self._st.stats.uncertain, doc="Acks / nacks given up on while the broker was unreachable."
    )
    renew_failures = property(lambda self: self._st.stats.renew_failures, doc="Renewals refused or not sent.")
    lost = property(lambda self: self._st.stats.lost, doc="Messages given up after their lease was lost.")
    released = property(lambda self: self._st.stats.released, doc="Messages released unhandled at stop.")

    def run(self) -> ConsumeResult:
        """Run in the calling thread until a stop condition; return the :class:`ConsumeResult`.

        On ``KeyboardInterrupt`` the consumer stops gracefully (drain timeout applies; a
        second interrupt aborts the drain) and the KeyboardInterrupt is re-raised.

        Raises:
            the handler's exception (``auto_ack(False)`` without ``on_error``), a pop error
            that is not a transient connection problem (e.g. AuthenticationError, BrokerError),
            an AuthenticationError of an ack, a release or a lease renewal,
            or, when ``idle_millis`` passed while the broker was unreachable (reason
            ``"unreachable"``), the last connection error (QueenConnectionError, or the
            QueenHTTPError of a 5xx / 429 reply).
        """
        self._signals.install()
        try:
            try:
                # an interrupt while the threads start (a handler can run before the last
                # one has) stops them too
                self._start_threads()
                self._supervisor.watch()
            except KeyboardInterrupt:
                if self._st.stopping:  # interrupted while already stopping: abort the drain
                    log.info("consumer of queue %r interrupted again; releasing what is not handled yet", self._st.queue)
                    self._st.request_stop("interrupted", 0.0)
                else:
                    log.info("consumer of queue %r interrupted; stopping gracefully", self._st.queue)
                    self._st.request_stop("interrupted")
                self._supervisor.finish()
                raise
        finally:
            self._signals.restore()
        if self._st.error is not None:
            raise self._st.error
        return self.result

    def start(self) -> "Consumer":
        """Start the consumer in background threads and return it (used by
        ``consume(handler, background=True)``)."""
        self._signals.install()
        try:
            self._start_threads()
        except BaseException:
            self._signals.restore()
            raise
        t = threading.Thread(target=self._thread_main, args=(self._supervisor.watch,),
                             name="queen-consume-%s-supervisor" % self._st.queue, daemon=True)
        self._add_thread(t)
        return self

    def stop(self, drain_timeout: Optional[float] = None, *, drain_timeout_millis: Optional[int] = None) -> ConsumeResult:
        """Stop gracefully and return the :class:`ConsumeResult`.

        Args:
            drain_timeout_millis: how long popped messages may still be handled and acked,
                in milliseconds (default: the consumer's, 30000). Keyword only.
            drain_timeout: deprecated, the same in **seconds** (also positional, as
                ``stop(10)``): works for one more release with a DeprecationWarning.

        No new pop is started; in-flight pops finish (at most ~1 s, long polls are capped at
        :data:`POLL_CAP_MILLIS`) and their messages are released unhandled; messages popped
        before are handled and acked until the drain timeout has passed; then the ones not yet given to a handler are released
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
        drain_ms = millis_or_deprecated_seconds(
            "drain_timeout_millis", drain_timeout_millis, "drain_timeout", drain_timeout, None
        )
        if self._forked():
            self._signals.restore()
            return self.result
        self._st.request_stop("stopped", None if drain_ms is None else drain_ms / 1000.0)
        if not self._started:
            self._st.stats.reason = self._st.stats.reason or "stopped"
            return self.result
        if threading.get_ident() not in self._thread_ids:
            if not self._supervisor.wait_finished():
                log.warning(
                    "stop() of the consumer of queue %r gave up waiting %.1f s after the drain timeout; "
                    "it goes on stopping in the background",
                    self._st.queue,
                    STOP_GRACE_S,
                )
            if self._done.is_set():
                self._signals.restore()
        return self.result

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` **seconds** (None: forever) until every thread of the consumer
        ended. Returns True when it has ended, False on timeout. (Seconds, as
        ``threading.Thread.join``; every other duration of queen_sync is in milliseconds.)

        In a process forked from the one running the consumer it returns True at once (the
        copy there has no threads).

        Raises:
            InvalidInputError: a negative ``timeout``.
            the exception that stopped the consumer (reason ``"error"`` or
            ``"unreachable"``, see :attr:`error`), once it has ended.
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise InvalidInputError("join() timeout must be None or a number of seconds >= 0, got %r" % (timeout,))
        if not self._started or self._forked():
            return True
        ended = self._done.wait(timeout)
        if ended:
            self._signals.restore()
            if self._st.error is not None:
                raise self._st.error
        return ended

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ threads

    def _add_thread(self, t: threading.Thread) -> None:
        with self._st.lock:
            self._threads.append(t)
            self._threads_alive += 1
        t.start()

    def _thread_main(self, target: Callable[[], None]) -> None:
        self._thread_ids.add(threading.get_ident())
        try:
            target()
        except BaseException as exc:  # never let a consumer thread die silently
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                # a handler asked the program to stop (README: not nacked, consume() re-raises
                # it): a stop, not a failure, so no ERROR and no traceback
                log.warning("consumer of queue %r stopping: a handler raised %s%s (consume() re-raises it)",
                            self._st.queue, type(exc).__name__, "(%s)" % (exc,) if str(exc) else "")
            else:
                log.exception("consumer thread of queue %r failed", self._st.queue)
            self._st.fail(exc)
        finally:
            with self._st.lock:
                self._threads_alive -= 1
                last = self._threads_alive == 0
                self._st.lock.notify_all()
            if last:
                unregister(self)
                self._done.set()

    def _start_threads(self) -> None:
        if self._started:
            raise InvalidInputError("this consumer was already started")
        if _fork.uwsgi_prefork():
            raise InvalidInputError(
                "%s in the uWSGI master before it forks its workers: a thread running at that fork hangs "
                "the workers (uWSGI forks without Python's fork hooks). Start it in the worker (a "
                "uwsgidecorators.postfork function) or run uWSGI with --lazy-apps" % "consume()"
            )
        self._pid = os.getpid()
        self._started_at_millis = int(time.time() * 1000)
        self._started = True
        self._st.last_activity = time.monotonic()
        register(self)
        name = "queen-consume-%s" % self._st.queue
        for i in range(self._concurrency):
            self._add_thread(threading.Thread(target=self._thread_main, args=(self._lanes.run,),
                                              name="%s-worker-%d" % (name, i), daemon=True))
        for i in range(self._fetcher_count):
            # counted one by one as started: a stop during start-up waits for those only
            with self._st.lock:
                self._st.fetchers_alive += 1
            self._add_thread(threading.Thread(target=self._thread_main, args=(lambda i=i: self._fetchers.run(i),),
                                              name="%s-fetch-%d" % (name, i), daemon=True))
        if self._renewer is not None:
            self._add_thread(threading.Thread(target=self._thread_main, args=(self._renewer.run,),
                                              name="%s-renew" % name, daemon=True))

