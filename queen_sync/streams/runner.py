"""The stream runner: background threads that pop the source, run one cycle per partition
(in parallel across partitions, strictly in order within one), flush idle windows, and
commit everything through ``/streams/v1/cycle``.

Threads: one pop thread (long polls for the group ``streams.<query_id>``), a pool of
``max_partitions`` cycle workers, and, for a window with ``idle_flush_ms > 0``, a flush
thread. A partition's cycles and its idle flush take the partition's lock, so they never
run at the same time (0.15's runtime races there); that lock is one per (query, partition)
in the process (:mod:`._partition_locks`), so two runners of one query in a process never
flush a partition while the other cycles it. The idle flush only visits partitions
idle for one interval (no batch queued, no cycle ended in it): busy partitions close their
windows by stream time in their cycles, so a draining backlog is never split into partial
windows by the wall clock (0.15 flushes every recent partition on every tick).

Exactly once: each sink item carries a deterministic ``transactionId``
(:func:`~queen_sync.streams.state.sink_transaction_id`); every cycle with an ack carries
its lease, so the broker fences it. A cycle whose reply is lost (or that got a 5xx) is
resent with the same body: if the first copy committed, the resend is refused for its lease
("maybe committed"), the sink items of a second landing would be ``duplicate``, and the
runner forgets what it knew about the partition (watermark) and re-reads state; the source
cursor decides what comes back. No event is folded twice and no window emitted twice.

Registry: every started runner is registered; :func:`stop_runners_for` stops those of a
client (``Queen.close()`` calls it), and a forked child sees its parent's runners as
stopped (no threads cross a fork).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Deque, Dict, List, Optional

from .. import _fork
from .._validate import int_arg, timestamp_arg, validate_name
from ..errors import ClientClosedError, InvalidInputError, QueenConnectionError, QueenHTTPError, StreamsCycleError
from ..wire import streams as wire
from . import _binding
from .._callables import check_arity
from ._partition_locks import partition_lock
from .processor import CycleWork, Stage, flush_request, needs_state, process_batch, process_flush

__all__ = ["MAX_BATCH_SIZE", "MAX_PARTITIONS", "RunOptions", "StreamRunner", "stop_runners_for", "running_runners"]

_log = logging.getLogger("queen_sync.streams")

#: the largest ``run(batch_size=)``: messages per pop, all held in memory and each
#: partition's share committed as one cycle (one JSON body, one broker transaction). The
#: broker reads ``batch`` as a 32-bit int and silently pops 1 message for anything above
#: 2147483647; 10000 keeps a cycle's body and transaction to a sane size.
MAX_BATCH_SIZE = 10_000
#: the largest ``run(max_partitions=)``: partitions one pop claims, and cycle worker threads
#: (one per partition in flight). The broker reads ``partitions`` as a 32-bit int (1 above
#: 2147483647); beyond 1000 the threads cost more than the parallelism gains.
MAX_PARTITIONS = 1_000

_RECENT_MILLIS = 5 * 60 * 1000
_RESENDS = 4
_EMPTY_POP_PAUSE = 0.1
_POP_ERROR_PAUSE = 0.5


class _OutageLog:
    """The log level of a run of failures of one kind (pops, idle flushes): the first one
    at WARNING, the rest at DEBUG, and one INFO line when it works again; so an outage logs
    two lines, not one per attempt (each failure is still counted and passed to on_error)."""

    __slots__ = ("what", "failed")

    def __init__(self, what: str) -> None:
        self.what = what  # plural noun of the log line: "pops", "idle flushes"
        self.failed = 0  # failures in a row

    def failure(self) -> int:
        """Count a failure; returns the level to log it at."""
        self.failed += 1
        return logging.WARNING if self.failed == 1 else logging.DEBUG

    def success(self, query: str, again: str) -> None:
        """It worked: after failures, log their end once (INFO)."""
        if self.failed:
            _log.info("stream query %r: %s works again after %d failed %s", query, again, self.failed, self.what)
            self.failed = 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class RunOptions:
    """The options of :meth:`Stream.run`, checked."""

    batch_size: int
    max_partitions: int
    max_wait_millis: int
    subscription_mode: Optional[str]
    subscription_from: Optional[str]
    reset: bool
    consumer_group: str
    on_error: Optional[Callable[[BaseException, Dict[str, Any]], Any]]

    @classmethod
    def make(cls, *, query_id: str, **kw: Any) -> "RunOptions":
        """Check every option of :meth:`Stream.run` (``consumer_group`` None: the query's
        own group ``streams.<query_id>``) and return them.

        Raises:
            InvalidInputError: a bad option (``batch_size`` not an int of
                1..:data:`MAX_BATCH_SIZE`, ``max_partitions`` not one of
                1..:data:`MAX_PARTITIONS`, ...); nothing has been sent.
        """
        int_arg("batch_size", kw["batch_size"], 1, MAX_BATCH_SIZE)
        int_arg("max_partitions", kw["max_partitions"], 1, MAX_PARTITIONS)
        int_arg("max_wait_millis", kw["max_wait_millis"], 0)
        if kw["on_error"] is not None:
            check_arity(kw["on_error"], 2, "run(on_error=)")
        if not isinstance(kw["reset"], bool):
            raise InvalidInputError("reset must be a bool")
        mode = kw["subscription_mode"]
        if mode is not None and mode not in ("all", "new"):
            raise InvalidInputError("subscription_mode must be None, 'all' or 'new', got %r" % (mode,))
        if kw["subscription_from"] is not None:
            timestamp_arg("subscription_from", kw["subscription_from"], allow_now=True)
        group = kw["consumer_group"]
        if group is None:
            group = kw["consumer_group"] = "streams.%s" % query_id
            try:
                validate_name("consumer group", group)
            except InvalidInputError as err:
                raise InvalidInputError(
                    "run(%r): the query's consumer group %r is not a valid name (%s); use a query_id of "
                    "A-Z a-z 0-9 . _ ~ - (at most 247 characters) or pass consumer_group=" % (query_id, group, err)
                ) from None
        else:
            validate_name("run(consumer_group=) consumer group", group)
        return cls(**kw)


class _Partition:
    """Per-partition bookkeeping: the lock taken by its cycles and flushes (the process-wide
    one of the query's partition, shared with the other runners of the query in this
    process), its queue of popped batches, its name and event-time watermark."""

    __slots__ = ("pid", "name", "lock", "pending", "scheduled", "touched", "last_cycle", "watermark", "held")

    def __init__(self, query: str, pid: str, name: Optional[str]) -> None:
        self.pid = pid
        self.name = name
        self.lock = partition_lock(query, pid)
        self.pending: Deque[Dict[str, Any]] = deque()
        self.scheduled = False
        self.touched = 0.0  # time.monotonic() of the last batch queued
        self.last_cycle = 0.0  # time.monotonic() at the end of the last cycle
        self.watermark: Optional[float] = None
        #: a gate's denied messages still under our lease (released on stop)
        self.held: Optional[Dict[str, Any]] = None


_REGISTRY: "weakref.WeakSet[StreamRunner]" = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()


def running_runners(client: Any = None) -> List["StreamRunner"]:
    """The runners of this process started and not asked to stop (of ``client`` only, when
    given): what :meth:`Queen.running_consumers` lists, and ``Queen.close()`` stops. A runner
    asked to stop leaves this list at once, while its :attr:`~StreamRunner.is_running` stays
    True until its cycles in flight have ended."""
    with _REGISTRY_LOCK:
        runners = list(_REGISTRY)
    owner = None if client is None else _binding.owner_of(client)
    return [r for r in runners if r._active() and (owner is None or r._session is owner)]


def stop_runners_for(client: Any, timeout_millis: int) -> int:
    """Stop every running runner of ``client`` in this process, within one deadline of
    ``timeout_millis`` ms (the stops run in parallel). Returns how many were stopped.
    ``Queen.close()`` calls this first."""
    runners = running_runners(client)
    deadline = time.monotonic() + max(0, timeout_millis) / 1000.0
    for r in runners:
        r._request_stop("closed")
    for r in runners:
        r.stop(int(max(0.0, deadline - time.monotonic()) * 1000))
    return len(runners)


def _after_fork_in_child() -> None:
    # the child has one thread: a parent thread may have held the lock at fork, so make it anew
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for r in list(_REGISTRY):
        r._forked()


# every fork path, uWSGI's (which skips Python's at-fork hooks) included
_fork.after_fork_in_child(_after_fork_in_child)


class StreamRunner:
    """A running stream query (made by :meth:`Stream.run`).

    ``stop(timeout_millis)``, ``join()``, ``is_running``, ``metrics()``; a context manager
    (``with stream.run("q") as runner:`` stops on exit). Thread-safe.
    """

    def __init__(self, plan: Any, query: str, opts: RunOptions, *, requester: Any = None, session: Any = None) -> None:
        self._plan = plan
        self._query = query
        self._opts = opts
        self._session = session if session is not None else _binding.session_of(plan.source)
        self._requester = requester if requester is not None else self._session
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop_event = threading.Event()
        self._stopped_event = threading.Event()
        self._local = threading.local()  # .worker: this thread runs this runner's cycles
        self._started = False
        self._started_at_millis: Optional[int] = None  # wall clock (Unix epoch ms) of start
        self._stop_reason: Optional[str] = None
        self._partitions: Dict[str, _Partition] = {}
        self._inflight = 0  # batches queued or in a cycle
        self._server_id: Optional[str] = None
        self._threads: List[threading.Thread] = []
        self._finisher: Optional[threading.Thread] = None  # completes a stop asked from a user function
        self._pool: Optional[ThreadPoolExecutor] = None
        # idle flushes failed in a row (as the pop's: one WARNING per outage, one INFO at its end)
        self._flush_outage = _OutageLog("idle flushes")
        self._stats: Dict[str, Any] = {
            "cyclesTotal": 0, "flushCyclesTotal": 0, "messagesTotal": 0, "pushItemsTotal": 0,
            "stateOpsTotal": 0, "lateEventsTotal": 0, "errorsTotal": 0, "gateAllowsTotal": 0,
            "gateDenialsTotal": 0, "lastCycleAt": None, "lastFlushAt": None, "lastError": None,
            "duplicatePushesTotal": 0, "resendsTotal": 0, "maybeCommittedTotal": 0, "releasedTotal": 0,
        }

    def __repr__(self) -> str:
        return "StreamRunner(query=%r, %s)" % (self._query, "running" if self.is_running else "stopped")

    # lifecycle -------------------------------------------------------------------------

    def start(self) -> "StreamRunner":
        """Register the query and start the threads (called by :meth:`Stream.run`).

        Raises: StreamsConfigHashError / StreamsError / transport errors from the register.
        """
        if self._started:
            return self
        if _fork.uwsgi_prefork():
            raise InvalidInputError(
                "%s in the uWSGI master before it forks its workers: a thread running at that fork hangs "
                "the workers (uWSGI forks without Python's fork hooks). Start it in the worker (a "
                "uwsgidecorators.postfork function) or run uWSGI with --lazy-apps" % "Stream.run()"
            )
        plan = self._plan
        o = self._opts
        # the pop builder first: whatever it refuses is refused before the register is sent
        qb = plan.source.batch(o.batch_size).wait(True).timeout_millis(o.max_wait_millis).group(o.consumer_group)
        if o.max_partitions > 1:
            qb = qb.partitions(o.max_partitions)
        if o.subscription_mode is not None:
            qb = qb.subscription_mode(o.subscription_mode)
        if o.subscription_from is not None:
            qb = qb.subscription_from(o.subscription_from)
        reg = wire.register_query(
            self._requester, name=self._query, source_queue=plan.source_queue, config_hash=plan.config_hash,
            sink_queue=plan.sink_queue, reset=self._opts.reset,
        )
        self._server_id = reg["query_id"]
        _log.info("stream query %r registered (id %s, fresh=%s, reset=%s)", self._query, self._server_id,
                  reg.get("fresh"), reg.get("reset"))
        self._pop_builder = qb
        self._started_at_millis = _now_ms()
        self._started = True
        self._pool = ThreadPoolExecutor(max_workers=o.max_partitions, thread_name_prefix="queen-stream-%s" % self._query)
        t = threading.Thread(target=self._pop_loop, name="queen-stream-%s-pop" % self._query, daemon=True)
        self._threads.append(t)
        w = plan.window
        if w is not None and plan.reducer is not None and w.idle_flush_ms > 0:
            f = threading.Thread(target=self._flush_loop, args=(w.idle_flush_ms,),
                                 name="queen-stream-%s-flush" % self._query, daemon=True)
            self._threads.append(f)
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)
        for th in self._threads:
            th.start()
        return self

    @property
    def query_id(self) -> str:
        """The query name given to ``run()``."""
        return self._query

    @property
    def is_running(self) -> bool:
        """True from start until the runner has stopped: once a stop was asked, it stays True
        while a cycle or an idle flush is still running (a user function that has not
        returned, a commit), the pop in flight has not returned, or the background
        completion of a stop called from a user function has not ended: after a
        :meth:`stop` that returned False for its timeout, or one called from a user
        function. False before start, once all that ended, and in a forked child."""
        if not self._started or self._pid != os.getpid():
            return False
        if not self._stop_event.is_set():
            return True
        if self._stopped_event.is_set():
            return False
        with self._lock:
            if self._inflight > 0:
                return True
            finisher = self._finisher
        busy = self._threads + ([finisher] if finisher is not None else [])
        return any(t.is_alive() for t in busy)

    def _active(self) -> bool:
        """Started, in this process, and no stop asked for yet."""
        return self._started and not self._stop_event.is_set() and self._pid == os.getpid()

    def describe(self) -> Dict[str, Any]:
        """What this runner is, for :meth:`Queen.running_consumers`: a new dict ``{"queue":
        str (the source queue), "group": str (the consumer group it pops for), "query": str
        (:attr:`query_id`), "threads": int (its threads alive now: pop, flush, cycle workers),
        "started_at_millis": int | None (when it started, Unix epoch milliseconds; None
        before)}``. Sends nothing."""
        return {
            "queue": self._plan.source_queue,
            "group": self._opts.consumer_group,
            "query": self._query,
            "threads": self._thread_count(),
            "started_at_millis": self._started_at_millis,
        }

    def _thread_count(self) -> int:
        """Threads of this runner alive now: pop, flush and cycle workers (those of the pool
        are read from ThreadPoolExecutor's own set, CPython's ``_threads``)."""
        pool = self._pool
        workers = list(getattr(pool, "_threads", ())) if pool is not None else []
        return sum(1 for t in self._threads + workers if t.is_alive())

    def _request_stop(self, reason: str) -> None:
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._stop_event.set()
            self._idle.notify_all()

    def stop(self, timeout_millis: int = 10000) -> bool:
        """Stop, waiting at most ``timeout_millis`` ms: no new pops; the cycle in flight
        finishes (committed or abandoned, never half-applied); popped batches not started,
        and a gate's denied messages still under the lease, are released (``ack`` status
        ``retry``: redelivered at once); open windows stay in the broker's state.

        From a user function (a map, filter, key_by, reducer, gate, sink partition function
        or foreach running in one of this runner's cycles or idle flushes) the stop cannot
        wait for the cycle it is called from: it requests the stop and returns False at once
        (not stopped yet). The cycle goes on when the function returns and commits (or is
        abandoned) as usual; then the runner completes the stop by itself, in a background
        thread, as this call from another thread would with the same ``timeout_millis``
        (releases, shuts its threads down); :meth:`join` returns True once it has.

        Args:
            timeout_millis: the longest wait, in milliseconds (an int of 0..31536000000).

        Returns:
            True when every thread ended in time; False when they did not, or when called
            from a user function (see above). Idempotent.

        Raises:
            InvalidInputError: a bad ``timeout_millis``.
        """
        int_arg("timeout_millis", timeout_millis, 0)
        self._request_stop("stopped")
        if self._pid != os.getpid() or not self._started:
            self._stopped_event.set()
            return True
        if getattr(self._local, "worker", False):
            # called from a user function in a cycle: that cycle cannot be waited for here, so
            # a thread of its own completes the stop once the cycles in flight have ended
            with self._lock:
                if self._finisher is None and not self._stopped_event.is_set():
                    self._finisher = threading.Thread(target=self.stop, args=(timeout_millis,),
                                                      name="queen-stream-%s-stop" % self._query, daemon=True)
                    self._finisher.start()
            return False
        deadline = time.monotonic() + timeout_millis / 1000.0
        ok = True
        for th in self._threads:
            if th is threading.current_thread():
                continue
            th.join(max(0.0, deadline - time.monotonic()))
            ok = ok and not th.is_alive()
        with self._lock:
            while self._inflight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    ok = False
                    break
                self._idle.wait(left)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._release_held()
        if ok:
            self._stopped_event.set()
        return ok

    def join(self, timeout_millis: Optional[int] = None) -> bool:
        """Block until the runner has stopped (someone called :meth:`stop`, also from a user
        function, ``Queen.close()`` ran, or the client was closed); returns False if
        ``timeout_millis`` (ms; None: no bound) passed first."""
        if self._pid != os.getpid() or not self._started:
            return True
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000.0
        if not self._stop_event.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
            return False
        if self._stopped_event.is_set():
            return True
        left = 3600000 if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
        return self.stop(left)

    def __enter__(self) -> "StreamRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _forked(self) -> None:
        # the child has none of the parent's threads: this runner is simply not running here
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop_event.set()
        self._stopped_event.set()
        self._pool = None
        self._finisher = None

    def metrics(self) -> Dict[str, Any]:
        """Counters with the official runtime's keys (``queryId``, ``serverQueryId``,
        ``cyclesTotal``, ``flushCyclesTotal``, ``messagesTotal`` (source messages acked),
        ``pushItemsTotal``, ``stateOpsTotal``, ``lateEventsTotal``, ``errorsTotal``,
        ``gateAllowsTotal``, ``gateDenialsTotal``, ``lastCycleAt``, ``lastFlushAt``,
        ``lastError``: the text of the last error seen, never cleared, also not when the
        runner works again) plus ``duplicatePushesTotal``, ``resendsTotal``,
        ``maybeCommittedTotal``, ``releasedTotal``, ``running``, ``stopReason``. Also after
        stop."""
        with self._lock:
            out = dict(self._stats)
            out["stopReason"] = self._stop_reason
        out["queryId"] = self._query
        out["serverQueryId"] = self._server_id
        out["running"] = self.is_running
        return out

    # errors ----------------------------------------------------------------------------

    def _report(self, err: BaseException, ctx: Dict[str, Any], level: int = logging.WARNING) -> None:
        with self._lock:
            self._stats["errorsTotal"] += 1
            self._stats["lastError"] = str(err) or type(err).__name__
        _log.log(level, "stream query %r: %s failed%s: %s", self._query, ctx.get("phase"),
                 " (partition %s)" % ctx["partition"] if ctx.get("partition") else "", err)
        if self._opts.on_error is not None:
            try:
                self._opts.on_error(err, ctx)
            except Exception:  # a failing hook must not kill the runner
                _log.exception("stream query %r: on_error hook raised", self._query)

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._stats[k] += v

    # pop loop --------------------------------------------------------------------------

    def _pop_loop(self) -> None:
        outage = _OutageLog("pops")  # an outage logs one WARNING, its end one INFO
        try:
            while not self._stop_event.is_set():
                with self._lock:
                    while self._inflight >= self._opts.max_partitions and not self._stop_event.is_set():
                        self._idle.wait(0.5)
                if self._stop_event.is_set():
                    break
                try:
                    msgs = self._pop_builder.pop()
                except ClientClosedError:
                    self._request_stop("closed")
                    break
                except Exception as err:
                    self._report(err, {"phase": "pop"}, outage.failure())
                    self._stop_event.wait(_POP_ERROR_PAUSE)
                    continue
                outage.success(self._query, "pop")
                if not msgs:
                    self._stop_event.wait(_EMPTY_POP_PAUSE)
                    continue
                groups = self._group(msgs)
                if self._stop_event.is_set():
                    for g in groups:
                        self._release(g)
                    break
                for g in groups:
                    self._enqueue(g)
        except BaseException as err:  # pragma: no cover - last resort, keeps stop() bounded
            self._report(err, {"phase": "pop"})
            self._request_stop("crashed")

    def _group(self, msgs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        groups: Dict[str, Dict[str, Any]] = {}
        for m in msgs:
            pid = m.get("partitionId") or "unknown"
            g = groups.get(pid)
            if g is None:
                g = {"pid": pid, "name": m.get("partition"), "lease": m.get("leaseId"),
                     "group": m.get("consumerGroup") or self._opts.consumer_group, "messages": []}
                if g["group"] == "__QUEUE_MODE__":
                    g["group"] = None
                groups[pid] = g
            g["messages"].append(m)
        return list(groups.values())

    def _enqueue(self, g: Dict[str, Any]) -> None:
        with self._lock:
            p = self._partitions.get(g["pid"])
            if p is None:
                p = self._partitions[g["pid"]] = _Partition(self._query, g["pid"], g["name"])
            p.name = g["name"] or p.name
            p.touched = time.monotonic()
            p.pending.append(g)
            self._inflight += 1
            submit = not p.scheduled
            p.scheduled = True
        if submit:
            assert self._pool is not None
            try:
                self._pool.submit(self._drain, p)
            except RuntimeError:  # pool shut down (a stop racing this pop, or interpreter exit)
                self._request_stop(self._stop_reason or "stopped")
                self._drain(p)  # stopping: releases the batch

    def _drain(self, p: _Partition) -> None:
        self._local.worker = True
        while True:
            with self._lock:
                if not p.pending:
                    p.scheduled = False
                    return
                g = p.pending.popleft()
            try:
                if self._stop_event.is_set():
                    self._release(g)
                else:
                    with p.lock:
                        try:
                            self._cycle(p, g)
                        finally:
                            p.last_cycle = time.monotonic()
            except BaseException as err:  # never lose the inflight count
                self._report(err, {"phase": "cycle", "partition": p.pid})
            finally:
                with self._lock:
                    self._inflight -= 1
                    self._idle.notify_all()

    def _release_held(self) -> None:
        with self._lock:
            held = [p for p in self._partitions.values() if p.held is not None]
        for p in held:
            if p.lock.acquire(timeout=0.5):
                try:
                    g, p.held = p.held, None
                    if g is not None:
                        self._release(g)
                finally:
                    p.lock.release()

    def _release(self, g: Dict[str, Any]) -> None:
        try:
            ctx = {"group": g["group"]} if g["group"] else None
            _binding.release(self._session, g["messages"], ctx)
            self._count(releasedTotal=len(g["messages"]))
        except Exception as err:  # e.g. the lease expired meanwhile: they come back anyway
            _log.info("stream query %r: could not release %d messages of partition %s (they come back when "
                      "their lease expires): %s", self._query, len(g["messages"]), g["pid"], err)

    # cycles ----------------------------------------------------------------------------

    def _cycle(self, p: _Partition, g: Dict[str, Any]) -> None:
        plan = self._plan
        p.held = None  # a new batch of this partition: the previous lease is gone
        stage = Stage()  # "cycle", or the stage that raised: "gate-eval", "window-apply"
        try:
            loaded = (wire.get_state(self._requester, query_id=self._server_id or "", partition_id=p.pid, query=self._query)
                      if needs_state(plan) else {})
            work = process_batch(plan, self._query, p.pid, p.name, g["lease"], g["messages"], loaded, _now_ms(),
                                 p.watermark, stage)
        except Exception as err:
            self._report(err, {"phase": stage.phase, "partition": p.pid})
            return
        for exc, phase in work.errors:
            self._report(exc, {"phase": phase, "partition": p.pid})
        if work.late:
            self._count(lateEventsTotal=work.late)
        if not work.commit:  # a gate denied the batch's first message: it waits for its lease
            self._count(gateDenialsTotal=work.gate_denials, cyclesTotal=1)
            p.held = g
            return
        if not self._effects(work, p):
            return
        outcome = self._commit(p, work, g["group"], "cycle")
        if outcome is None:
            return
        with self._lock:
            s = self._stats
            s["cyclesTotal"] += 1
            s["messagesTotal"] += work.acked
            s["gateAllowsTotal"] += work.gate_allows
            s["gateDenialsTotal"] += work.gate_denials
            s["lastCycleAt"] = _now_iso()
        if outcome == "committed" and work.watermark is not None:
            p.watermark = work.watermark
        if outcome == "committed" and not work.release_lease:
            p.held = dict(g, messages=g["messages"][work.acked:])

    def _effects(self, work: CycleWork, p: _Partition) -> bool:
        if not work.effects:
            return True
        fn = self._plan.sink.fn
        try:
            for value, ctx in work.effects:
                fn(value, ctx)
        except Exception as err:
            self._report(err, {"phase": "foreach", "partition": p.pid})
            return False
        return True

    def _commit(self, p: _Partition, work: CycleWork, group: Optional[str], phase: str) -> Optional[str]:
        """Send the cycle, resending the same body while its outcome is unknown (a lost
        reply, a 5xx): with a growing pause (0.1 s doubling, at most 2 s) until the broker
        answers, reported once after :data:`_RESENDS` resends; given up after those only
        when the runner is stopping. Returns ``"committed"``, ``"maybe"`` (a resend refused
        for its lease: the first copy most likely committed, or the lease expired) or None
        (refused, or given up while stopping: nothing applied, or unknown). Its errors are
        reported under ``phase`` (``"cycle"``, or ``"flush"`` for an idle flush's)."""
        attempt = 0
        while True:
            try:
                doc = wire.cycle(
                    self._requester, query_id=self._server_id or "", partition_id=p.pid, consumer_group=group,
                    state_ops=work.state_ops, push_items=work.push_items, ack=work.ack,
                    release_lease=work.release_lease, query=self._query,
                    nan_as_null=bool(getattr(self._session, "nan_as_null", False)),
                )
            except StreamsCycleError as err:
                if attempt and err.lease_refused:
                    p.watermark = None  # re-read from state next time
                    self._count(maybeCommittedTotal=1)
                    _log.info("stream query %r: resent cycle on partition %s refused for its lease: the first "
                              "copy committed (or the lease expired); state is re-read", self._query, p.pid)
                    return "maybe"
                self._report(err, {"phase": phase, "partition": p.pid})
                return None
            except (QueenConnectionError, QueenHTTPError) as err:
                if isinstance(err, QueenHTTPError) and not (err.status is not None and err.status >= 500):
                    self._report(err, {"phase": phase, "partition": p.pid})
                    return None
                attempt += 1
                p.watermark = None
                if attempt > _RESENDS and self._stop_event.is_set():
                    # stopping: abandon; if no copy committed, the lease expiry brings the batch back
                    self._count(maybeCommittedTotal=1)
                    self._report(err, {"phase": phase, "partition": p.pid})
                    return None
                if attempt == _RESENDS + 1:
                    # still unknown: resending until the broker answers (a resend refused for its
                    # lease once the lease expired ends it too). Giving up here left the batch
                    # unacked until its lease expired (5 min by default) when no copy had
                    # committed, and uncounted when one had.
                    self._report(err, {"phase": phase, "partition": p.pid})
                self._count(resendsTotal=1)
                time.sleep(min(2.0, 0.1 * (2 ** min(attempt - 1, 5))))
                continue
            except ClientClosedError as err:
                self._report(err, {"phase": phase, "partition": p.pid})
                self._request_stop("closed")
                return None
            dup = sum(1 for r in doc.get("push_results") or () if isinstance(r, dict) and r.get("status") == "duplicate")
            self._count(pushItemsTotal=len(work.push_items), stateOpsTotal=len(work.state_ops),
                        duplicatePushesTotal=dup)
            return "committed"

    # idle flush ------------------------------------------------------------------------

    def _flush_loop(self, interval_ms: int) -> None:
        self._local.worker = True
        while not self._stop_event.wait(interval_ms / 1000.0):
            try:
                self._flush_tick(interval_ms)
            except Exception as err:  # pragma: no cover - _flush_partition reports its own
                self._report(err, {"phase": "flush-tick"})

    def _flush_tick(self, interval_ms: int) -> None:
        # only idle partitions: a partition with batches in flight, or a cycle less than one
        # interval ago, closes its windows by stream time in its cycles (flushing it by the
        # wall clock while a backlog drains would split its windows)
        now = time.monotonic()
        cutoff = now - _RECENT_MILLIS / 1000.0
        idle_since = now - interval_ms / 1000.0
        with self._lock:
            parts = [p for p in self._partitions.values()
                     if p.touched >= cutoff and not p.pending and not p.scheduled
                     and p.touched <= idle_since and p.last_cycle <= idle_since]
        for p in parts:
            if self._stop_event.is_set():
                return
            if not p.lock.acquire(blocking=False):
                continue  # a cycle holds the partition: the next tick flushes it
            try:
                if self._flush_partition(p):
                    self._flush_outage.success(self._query, "idle flush")
            except Exception as err:
                self._report(err, {"phase": "flush", "partition": p.pid}, self._flush_outage.failure())
            finally:
                p.lock.release()
        with self._lock:
            self._stats["lastFlushAt"] = _now_iso()

    def _flush_partition(self, p: _Partition) -> bool:
        """Flush one idle partition. Returns False when a foreach or the commit failed (each
        reported where it failed), True otherwise (also when nothing was ripe); an error of
        the state read or of a user function raises."""
        plan = self._plan
        clock = p.watermark if plan.window.event_time_fn is not None else _now_ms()
        req = flush_request(plan, clock)
        if req is None or clock is None:
            return True
        rows = wire.get_state(self._requester, query_id=self._server_id or "", partition_id=p.pid,
                              key_prefix=req.get("key_prefix"), ripe_at_or_before=req.get("ripe_at_or_before"),
                              query=self._query)
        if not rows:
            return True
        work = process_flush(plan, self._query, p.pid, p.name, rows, clock)
        if not work.commit:
            return True
        if not self._effects(work, p) or self._commit(p, work, self._opts.consumer_group, "flush") is None:
            return False
        with self._lock:
            self._stats["flushCyclesTotal"] += 1
        return True
