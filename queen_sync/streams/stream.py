"""``Stream``: the fluent, immutable builder of a streaming pipeline, and its compilation.

``Stream.from_(q.queue("src"))`` starts a chain; each operator method returns a new Stream;
``run(query_id)`` checks the chain rules, registers the query with the broker and returns a
started :class:`~queen_sync.streams.runner.StreamRunner`. The grammar, option names, units
and defaults are the official SDK's (snake_case; camelCase window options are accepted too).

Chain rules (checked by ``run()`` / :meth:`Stream.compile`, raising InvalidInputError):
at most one window, one ``key_by`` (before the reducer / gate; before or after the window, as
in the official SDK), one reducer (after a window), one gate (not with a window or reducer), and a ``.to()`` / ``.foreach()`` only
last. A session window needs a reducer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from ..errors import InvalidInputError
from .hashing import config_hash
from .operators import (
    AggregateOperator,
    FilterOperator,
    FlatMapOperator,
    ForeachOperator,
    GateOperator,
    KeyByOperator,
    MapOperator,
    ReduceOperator,
    SinkOperator,
    check_source_builder,
    queue_name_of,
)
from .runner import RunOptions, StreamRunner
from .windows import CronWindow, SessionWindow, SlidingWindow, TumblingWindow

__all__ = ["Stream", "Plan"]

_CAMEL = {
    "gracePeriod": "grace_period",
    "idleFlushMs": "idle_flush_ms",
    "eventTime": "event_time",
    "allowedLateness": "allowed_lateness",
    "onLate": "on_late",
}


def _window_kwargs(what: str, opts: Dict[str, Any], allowed: tuple) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in opts.items():
        name = _CAMEL.get(k, k)
        if name not in allowed:
            raise InvalidInputError("%s() got an unexpected option %r (allowed: %s)" % (what, k, ", ".join(allowed)))
        if name in out:
            raise InvalidInputError("%s() got %r twice (snake_case and camelCase)" % (what, name))
        out[name] = v
    return out


_COMMON = ("grace_period", "idle_flush_ms", "event_time", "allowed_lateness", "on_late")


@dataclass
class Plan:
    """A checked chain: its stages and config hash."""

    source: Any
    operators: List[Any]
    pre: List[Any] = field(default_factory=list)
    key_by: Optional[Any] = None
    window: Optional[Any] = None
    reducer: Optional[Any] = None
    gate: Optional[Any] = None
    post: List[Any] = field(default_factory=list)
    sink: Optional[Any] = None
    config_hash: str = ""

    @property
    def source_queue(self) -> str:
        return queue_name_of(self.source)

    @property
    def sink_queue(self) -> Optional[str]:
        return self.sink.queue_name if self.sink is not None and self.sink.kind == "sink" else None


class Stream:
    """An immutable streaming pipeline over a Queen queue (see the module docstring)."""

    def __init__(self, source: Any, operators: Optional[List[Any]] = None) -> None:
        self._source = source
        self._operators: List[Any] = list(operators or [])

    @classmethod
    def from_(cls, queue_builder: Any) -> "Stream":
        """A stream reading ``queue_builder`` (``q.queue("src")``, optionally with
        ``.partition(...)``); the client that made it is used for every call.

        Raises:
            InvalidInputError: not a queue builder, or one with ``auto_ack(True)`` or a
                ``group(...)`` (the runner pops as ``run(consumer_group=)`` and acks in its
                cycle).
        """
        queue_name_of(queue_builder)
        check_source_builder(queue_builder)
        return cls(queue_builder)

    from_queue = from_

    def __repr__(self) -> str:
        return "Stream(%s: %s)" % (queue_name_of(self._source), " -> ".join(op.kind for op in self._operators) or "-")

    @property
    def operators(self) -> List[Any]:
        """The operators of the chain, in order (a copy)."""
        return list(self._operators)

    def _extend(self, op: Any) -> "Stream":
        return Stream(self._source, self._operators + [op])

    # stateless -------------------------------------------------------------------------

    def map(self, fn: Callable[..., Any]) -> "Stream":
        """``fn(message, None)`` before a reducer / gate, ``fn(value, ctx)`` after; the result
        is the new value."""
        return self._extend(MapOperator(fn))

    def filter(self, fn: Callable[..., Any]) -> "Stream":
        """Keep records for which ``fn(message_or_value, ctx)`` is truthy."""
        return self._extend(FilterOperator(fn))

    def flat_map(self, fn: Callable[..., Any]) -> "Stream":
        """``fn(message_or_value, ctx)`` returns a list: one record per item."""
        return self._extend(FlatMapOperator(fn))

    flatMap = flat_map

    def key_by(self, fn: Callable[[Any], Any]) -> "Stream":
        """The window / gate key is ``str(fn(message))`` instead of the source partition id."""
        return self._extend(KeyByOperator(fn))

    keyBy = key_by

    # windows ---------------------------------------------------------------------------

    def window_tumbling(self, **opts: Any) -> "Stream":
        """Tumbling windows: ``seconds`` (required), ``grace_period`` (s, 0),
        ``idle_flush_ms`` (ms, an int of 0..31536000000, 5000; 0 = none), ``event_time``
        (fn(message) -> epoch ms; default: processing time from ``createdAt``),
        ``allowed_lateness`` (s, 0), ``on_late`` ("drop" | "include"). Durations in seconds
        are numbers of 0.001..315537897600 (``seconds`` > 0).

        Raises:
            InvalidInputError: a missing, unknown or bad option (e.g. an ``idle_flush_ms``
                that is a float or a bool); nothing runs.
        """
        kw = _window_kwargs("window_tumbling", opts, ("seconds",) + _COMMON)
        if "seconds" not in kw:
            raise InvalidInputError("window_tumbling() needs seconds=")
        return self._extend(TumblingWindow(**kw))

    def window_sliding(self, **opts: Any) -> "Stream":
        """Sliding windows: ``size`` and ``slide`` (s; size a whole multiple of slide), then
        the options of :meth:`window_tumbling` (``idle_flush_ms`` default 5000). Each event
        is in ``size / slide`` windows: at most 10000
        (:data:`~queen_sync.streams.windows.MAX_SLIDING_WINDOWS_PER_EVENT`).

        Raises:
            InvalidInputError: a missing or bad option, a ``size`` not a whole multiple of
                ``slide``, or ``size / slide`` above 10000; nothing runs.
        """
        kw = _window_kwargs("window_sliding", opts, ("size", "slide") + _COMMON)
        if "size" not in kw or "slide" not in kw:
            raise InvalidInputError("window_sliding() needs size= and slide=")
        return self._extend(SlidingWindow(**kw))

    def window_session(self, **opts: Any) -> "Stream":
        """Session windows per key: ``gap`` (s), then the options of :meth:`window_tumbling`
        (``idle_flush_ms`` default 1000)."""
        kw = _window_kwargs("window_session", opts, ("gap",) + _COMMON)
        if "gap" not in kw:
            raise InvalidInputError("window_session() needs gap=")
        return self._extend(SessionWindow(**kw))

    def window_cron(self, **opts: Any) -> "Stream":
        """UTC-aligned windows: ``every`` = "second" | "minute" | "hour" | "day" | "week",
        then the options of :meth:`window_tumbling` (``idle_flush_ms`` default 30000)."""
        kw = _window_kwargs("window_cron", opts, ("every",) + _COMMON)
        if "every" not in kw:
            raise InvalidInputError("window_cron() needs every=")
        return self._extend(CronWindow(**kw))

    windowTumbling = window_tumbling
    windowSliding = window_sliding
    windowSession = window_session
    windowCron = window_cron

    # reducers, gate, sinks -------------------------------------------------------------

    def reduce(self, fn: Callable[[Any, Any], Any], initial: Any = None) -> "Stream":
        """Fold each window: ``acc = fn(acc, value)``, from a copy of ``initial``."""
        return self._extend(ReduceOperator(fn, initial))

    def aggregate(self, extractors: Dict[str, Callable[[Any], Any]]) -> "Stream":
        """Per-window ``{name: extractor(value)}`` aggregates: ``count``, ``sum``, ``min``,
        ``max``, ``avg`` (any other name sums)."""
        return self._extend(AggregateOperator(extractors))

    def gate(self, fn: Callable[[Any, Any], Any]) -> "Stream":
        """Allow / deny each record with ``fn(value, ctx)`` (see :mod:`queen_sync.streams.gates`)."""
        return self._extend(GateOperator(fn))

    def to(self, queue_builder: Any, partition: Optional[Union[str, Callable[[Any], Any]]] = None) -> "Stream":
        """Push each result to ``queue_builder``'s queue, in the cycle's transaction.

        ``partition``: None (the source partition's name), a partition name, or
        ``fn(value)`` returning one (checked per value: a non-str or invalid name abandons
        the cycle like a raising user function).

        Raises:
            InvalidInputError: ``partition`` is not None, a valid partition name or a callable;
                ``queue_builder`` has a ``.partition(...)`` (give it as ``partition=``).
        """
        return self._extend(SinkOperator(queue_builder, partition))

    def foreach(self, fn: Callable[..., Any]) -> "Stream":
        """Call ``fn(value, ctx)`` for each result before the cycle commits (at least once)."""
        return self._extend(ForeachOperator(fn))

    # compile / run ---------------------------------------------------------------------

    def compile(self) -> Plan:
        """Check the chain rules and return its :class:`Plan` (with the config hash).

        Raises:
            InvalidInputError: the chain breaks a rule (see the module docstring).
        """
        ops = self._operators
        plan = Plan(source=self._source, operators=list(ops))
        for i, op in enumerate(ops):
            if op.kind in ("sink", "foreach"):
                if i != len(ops) - 1:
                    raise InvalidInputError(
                        "the sink (.to / .foreach) must be the last operator; found %s at position %d of %d"
                        % (op.kind, i + 1, len(ops)))
                plan.sink = op
        phase = "pre"
        for op in ops[:-1] if plan.sink is not None else ops:
            kind = op.kind
            if kind in ("map", "filter", "flatMap"):
                (plan.pre if phase in ("pre", "keyed", "window") else plan.post).append(op)
            elif kind == "keyBy":
                if plan.key_by is not None:
                    raise InvalidInputError("only one .key_by() per stream")
                if phase in ("reducer", "gate"):
                    raise InvalidInputError(".key_by() must come before reduce / aggregate / gate")
                plan.key_by = op
                if phase == "pre":
                    phase = "keyed"
            elif kind == "window":
                if plan.window is not None:
                    raise InvalidInputError("only one window operator per stream")
                if plan.reducer is not None:
                    raise InvalidInputError("the window must come before reduce / aggregate")
                if plan.gate is not None:
                    raise InvalidInputError("a window cannot be combined with .gate() in the same stream")
                plan.window = op
                phase = "window"
            elif kind in ("reduce", "aggregate"):
                if plan.reducer is not None:
                    raise InvalidInputError("only one reduce / aggregate per stream")
                if plan.window is None:
                    raise InvalidInputError("%s() needs a window before it (window_tumbling / sliding / session / cron)" % kind)
                plan.reducer = op
                phase = "reducer"
            elif kind == "gate":
                if plan.gate is not None:
                    raise InvalidInputError("only one .gate() per stream")
                if plan.window is not None or plan.reducer is not None:
                    raise InvalidInputError(".gate() cannot be combined with a window or reduce in the same stream")
                plan.gate = op
                phase = "gate"
            else:  # pragma: no cover - every operator class is covered above
                raise InvalidInputError("unsupported operator %r" % kind)
        if isinstance(plan.window, SessionWindow) and plan.reducer is None:
            raise InvalidInputError("window_session() needs a .reduce() or .aggregate() after it")
        plan.config_hash = config_hash(ops)
        return plan

    def config_hash(self) -> str:
        """The chain's config hash (what the broker compares on register)."""
        return config_hash(self._operators)

    def run(
        self,
        query_id: str,
        *,
        batch_size: int = 200,
        max_partitions: int = 4,
        max_wait_millis: int = 1000,
        subscription_mode: Optional[str] = None,
        subscription_from: Optional[str] = None,
        reset: bool = False,
        consumer_group: Optional[str] = None,
        on_error: Optional[Callable[[BaseException, Dict[str, Any]], Any]] = None,
    ) -> "StreamRunner":
        """Check the chain, register the query and start a background runner.

        Args:
            query_id: the durable name of the query (its state, and the consumer group
                ``streams.<query_id>`` unless ``consumer_group`` is given).
            batch_size: messages per pop (total over its partitions), 1..10000
                (:data:`~queen_sync.streams.runner.MAX_BATCH_SIZE`); max_partitions:
                partitions per pop and cycles in parallel (threads), 1..1000
                (:data:`~queen_sync.streams.runner.MAX_PARTITIONS`); max_wait_millis:
                long-poll wait in **milliseconds**.
            subscription_mode / subscription_from: where a new consumer group starts
                (``"all"`` / ``"new"``; ``"now"`` or an ISO timestamp).
            reset: wipe the query's state if the chain changed (the source cursor is kept).
            on_error: ``fn(exception, {"phase", "partition"?})`` for every error; the phase
                is ``"pop"``, ``"cycle"``, ``"gate-eval"``, ``"window-apply"``,
                ``"foreach"``, ``"flush"`` or ``"flush-tick"`` (see docs/streams.md).

        Returns:
            the started :class:`~queen_sync.streams.runner.StreamRunner`.

        Raises:
            InvalidInputError: a bad chain or argument, nothing sent: a ``batch_size`` not
                an int of 1..10000, a ``max_partitions`` not an int of 1..1000, a
                ``max_wait_millis`` not an int of 0..31536000000, a ``subscription_mode``
                other than ``"all"`` / ``"new"``, a
                ``subscription_from`` neither ``"now"`` nor a timestamp the broker reads, a
                consumer group (given, or ``streams.<query_id>``) that is not a valid name,
                an ``on_error`` that cannot be called with two arguments.
            StreamsConfigHashError: the query exists with another chain and not ``reset``
                (nothing started). StreamsError / QueenConnectionError: register failed.

        Wire: ``POST /streams/v1/queries``, then the runner's pops, state reads and cycles.
        """
        if not isinstance(query_id, str) or not query_id:
            raise InvalidInputError("run() needs query_id=<non-empty str>")
        plan = self.compile()
        opts = RunOptions.make(
            query_id=query_id,
            batch_size=batch_size,
            max_partitions=max_partitions,
            max_wait_millis=max_wait_millis,
            subscription_mode=subscription_mode,
            subscription_from=subscription_from,
            reset=reset,
            consumer_group=consumer_group,
            on_error=on_error,
        )
        runner = StreamRunner(plan, query_id, opts)
        runner.start()
        return runner
