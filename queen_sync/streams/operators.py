"""The non-window operators of a stream: map, filter, flat_map, key_by, reduce, aggregate,
gate, sink (``.to``) and foreach.

Each operator has ``kind`` and ``config`` (its structural options, what the config hash
covers; callables are not hashed) exactly as the official SDK's, and the call shapes of the
official runtime:

- before a window / gate (pre stages) ``map`` / ``filter`` / ``flat_map`` get the **source
  message** (the broker's message dict) and ``None`` as ``ctx``; ``map`` / ``flat_map`` set
  the value the next stages see, but every pre stage gets the source message again;
- after ``reduce`` / ``aggregate`` / ``gate`` (post stages) they get the current value and
  ``ctx = {partition, partitionId, key, windowKey, windowStart, windowEnd}``;
- ``key_by(fn(message))``; ``reduce(fn(acc, value))``; aggregate extractors ``fn(value)``;
  ``gate(fn(value, ctx))``; ``foreach(fn(value, ctx))``.

Callables taking one argument are called with one where the official SDK accepts that
(map, filter, flat_map, foreach). Every callable is checked when the operator is made
(:func:`~queen_sync._callables.check_arity`): one that cannot take the arguments its
operator passes raises InvalidInputError then, not in the first cycle.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Union

from ..errors import InvalidInputError
from .._validate import validate_name
from .._callables import check_arity, two_arg

__all__ = [
    "two_arg",
    "MapOperator",
    "FilterOperator",
    "FlatMapOperator",
    "KeyByOperator",
    "ReduceOperator",
    "AggregateOperator",
    "GateOperator",
    "SinkOperator",
    "ForeachOperator",
    "queue_name_of",
    "check_source_builder",
]


class MapOperator:
    """``.map(fn)``: the value becomes ``fn(message_or_value, ctx)``."""

    kind = "map"

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = two_arg(fn, "map()")
        self.config: Dict[str, Any] = {}


class FilterOperator:
    """``.filter(fn)``: keeps the record when ``fn(message_or_value, ctx)`` is truthy."""

    kind = "filter"

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = two_arg(fn, "filter()")
        self.config: Dict[str, Any] = {}


class FlatMapOperator:
    """``.flat_map(fn)``: ``fn(message_or_value, ctx)`` returns a list; one record per item."""

    kind = "flatMap"

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = two_arg(fn, "flat_map()")
        self.config: Dict[str, Any] = {}

    def expand(self, a: Any, b: Any) -> List[Any]:
        out = self.fn(a, b)
        if not isinstance(out, list):
            raise TypeError("flat_map fn must return a list (got %s)" % type(out).__name__)
        return out


class KeyByOperator:
    """``.key_by(fn)``: the window / gate key becomes ``str(fn(message))`` (default: the
    source partition id)."""

    kind = "keyBy"

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = check_arity(fn, 1, "key_by()")
        self.config: Dict[str, Any] = {}


class ReduceOperator:
    """``.reduce(fn, initial)``: folds each window's values, ``acc = fn(acc, value)``; each
    window starts from a copy of ``initial`` (deep copy for containers)."""

    kind = "reduce"

    def __init__(self, fn: Callable[[Any, Any], Any], initial: Any = None) -> None:
        self.fn = check_arity(fn, 2, "reduce()")
        self.initial = initial
        self.config: Dict[str, Any] = {"hasInitial": initial is not None}
        #: accumulator fields kept in state but not emitted (aggregate's avg helpers)
        self.hidden: tuple = ()

    def initial_value(self) -> Any:
        """A fresh accumulator for a tumbling / sliding / cron window (None stays None)."""
        init = self.initial
        if init is None or isinstance(init, (int, float, str, bool)):
            return init
        return copy.deepcopy(init)

    def session_initial_value(self) -> Any:
        """A fresh accumulator for a session (the official runtime starts sessions from 0
        when no initial value was given)."""
        init = self.initial
        if init is None:
            return 0
        if isinstance(init, (int, float, str, bool)):
            return init
        return copy.deepcopy(init)

    def result(self, acc: Any) -> Any:
        """The emitted value of an accumulator (a copy without the hidden fields)."""
        if self.hidden and isinstance(acc, dict):
            return {k: v for k, v in acc.items() if k not in self.hidden}
        return acc


_NUMBER_TYPES = (int, float)
#: the state fields of an ``avg`` aggregate (kept in the row, as the official runtime stores
#: them, never emitted); with ``avg``, no extractor may have these names
AVG_HELPERS = ("__avg_sum", "__avg_count")


def _num(v: Any) -> bool:
    return type(v) in _NUMBER_TYPES or (isinstance(v, (int, float)) and not isinstance(v, bool))


class AggregateOperator(ReduceOperator):
    """``.aggregate({name: extractor})``: per window, for each name, ``count`` adds the
    extractor's number (1 when it returns a non-number), ``sum`` and any other name add it
    (0 for a non-number), ``min`` / ``max`` keep the extreme number (None until one is
    seen), ``avg`` is sum / count of the numbers seen (0 before). The emitted value has
    exactly the extractor names (the avg helpers ``__avg_sum`` / ``__avg_count`` stay in the
    state row, as the official runtime stores them; with ``avg`` no extractor may have those
    names: InvalidInputError)."""

    kind = "aggregate"

    def __init__(self, extractors: Dict[str, Callable[[Any], Any]]) -> None:
        if not isinstance(extractors, dict):
            raise InvalidInputError("aggregate() needs a dict of {name: extractor}, got %r" % (extractors,))
        if not extractors:
            raise InvalidInputError("aggregate() needs at least one extractor")
        fields = []
        for name, fn in extractors.items():
            if not isinstance(name, str) or not name:
                raise InvalidInputError("aggregate() field names must be non-empty str, got %r" % (name,))
            check_arity(fn, 1, "aggregate extractor %r" % name)
            fields.append((name, fn))
        if "avg" in extractors:
            clash = [n for n in AVG_HELPERS if n in extractors]
            if clash:
                raise InvalidInputError(
                    "aggregate(): with 'avg', %s and %s are the avg accumulator's own state fields; rename the "
                    "extractor%s %s" % (AVG_HELPERS + ("s" if len(clash) > 1 else "", ", ".join(map(repr, clash)))))
        initial: Dict[str, Any] = {}
        for name, _ in fields:
            if name in ("min", "max"):
                initial[name] = None
            elif name == "avg":
                initial.update(dict.fromkeys(AVG_HELPERS, 0))
                initial["avg"] = 0
            else:
                initial[name] = 0
        self._fields = fields
        super().__init__(self._fold, initial)
        self.fields = [n for n, _ in fields]
        self.config = {"fields": list(self.fields)}
        self.hidden = AVG_HELPERS if "avg" in self.fields else ()

    def _fold(self, acc: Any, value: Any) -> Dict[str, Any]:
        nxt = dict(acc) if isinstance(acc, dict) else {}
        for name, ex in self._fields:
            v = ex(value)
            num = type(v) in _NUMBER_TYPES or _num(v)
            if name == "count":
                nxt["count"] = nxt.get("count", 0) + (v if num else 1)
            elif name == "min" or name == "max":
                if num:
                    cur = nxt.get(name)
                    nxt[name] = v if cur is None else (min(cur, v) if name == "min" else max(cur, v))
            elif name == "avg":
                if num:
                    nxt["__avg_sum"] = nxt.get("__avg_sum", 0) + v
                    nxt["__avg_count"] = nxt.get("__avg_count", 0) + 1
                    nxt["avg"] = nxt["__avg_sum"] / nxt["__avg_count"]
            else:
                nxt[name] = nxt.get(name, 0) + (v if num else 0)
        return nxt


class GateOperator:
    """``.gate(fn)``: ``fn(value, ctx)`` returns True / ``{"allow": True}`` to pass the
    record, False / ``{"allow": False}`` to stop the batch there (see :mod:`.gates`)."""

    kind = "gate"

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = check_arity(fn, 2, "gate()")
        self.config: Dict[str, Any] = {}

    def allows(self, value: Any, ctx: Any) -> bool:
        out = self.fn(value, ctx)
        if out is True or out is False:
            return out
        if isinstance(out, dict) and isinstance(out.get("allow"), bool):
            return bool(out["allow"])
        raise TypeError(".gate(fn) must return a bool or {'allow': bool}, got %r" % (out,))


def queue_name_of(builder: Any) -> str:
    """The queue name of a queue builder (``q.queue("x")``), or of a ``{"queueName": ...}``."""
    for attr in ("_name", "_queue_name", "queue_name"):
        v = getattr(builder, attr, None)
        if isinstance(v, str) and v:
            return v
    v = getattr(builder, "name", None)
    if isinstance(v, str) and v:
        return v
    if isinstance(builder, dict):
        for k in ("queueName", "queue_name", "name"):
            if isinstance(builder.get(k), str) and builder[k]:
                return builder[k]
    raise InvalidInputError("cannot tell the queue name of %r: pass q.queue('name')" % (builder,))


def check_source_builder(builder: Any) -> None:
    """Refuse settings on :meth:`Stream.from_`'s builder that the runner would silently drop
    or that would break its guarantee: the runner pops as its own consumer group and acks
    each batch in its cycle.

    Raises:
        InvalidInputError: the builder has ``auto_ack(True)`` (each batch committed at
            delivery, so a failed cycle loses it instead of getting it back) or a consumer
            group (replaced by ``streams.<query_id>`` / ``run(consumer_group=)``).
    """
    if getattr(builder, "_auto_ack", None) is True:
        raise InvalidInputError(
            "Stream.from_(): the source builder has auto_ack(True); the runner acks each batch in its "
            "cycle, and an auto-acked batch would be lost when a cycle fails: drop .auto_ack()"
        )
    group = getattr(builder, "_group", None)
    if isinstance(group, str):
        raise InvalidInputError(
            "Stream.from_(): the source builder's consumer group %r is not used (the runner reads as "
            "'streams.<query_id>'): drop .group() and pass run(..., consumer_group=%r)" % (group, group)
        )


class SinkOperator:
    """``.to(q.queue(sink), partition=None | str | fn(value))``: each result is pushed to the
    sink queue in the cycle's transaction. Payload: the value when it is a dict, else
    ``{"value": value}``. Partition: ``fn(value)`` (a str), the given str, or the source
    partition's name. A static partition is checked here (InvalidInputError, as
    :func:`~queen_sync._validate.validate_name`); ``fn``'s result per value in :meth:`item`."""

    kind = "sink"

    def __init__(self, builder: Any, partition: Optional[Union[str, Callable[[Any], Any]]] = None) -> None:
        self.queue_name = queue_name_of(builder)
        builder_partition = getattr(builder, "_partition", None)
        if isinstance(builder_partition, str):
            # the official SDK drops it silently and pushes to the source partition
            raise InvalidInputError(
                ".to(): the sink builder's partition %r is not used; write .to(q.queue(%r), partition=%r)"
                % (builder_partition, self.queue_name, builder_partition)
            )
        if partition is not None and not isinstance(partition, str) and not callable(partition):
            raise InvalidInputError(".to(partition=) takes None, a str or a callable, got %r" % (partition,))
        if isinstance(partition, str):
            validate_name(".to(partition=) partition", partition)
        elif partition is not None:
            check_arity(partition, 1, ".to(partition=fn)")
        self.partition = partition
        self.config: Dict[str, Any] = {"kind": "sink", "queue": self.queue_name}

    def item(self, value: Any, source_partition: Optional[str], transaction_id: str) -> Dict[str, Any]:
        """One cycle push item for ``value``.

        Raises:
            InvalidInputError: ``fn(value)`` is not a str or not a valid partition name.
        """
        resolver = self.partition
        if resolver is None:
            part = source_partition or "Default"
        elif isinstance(resolver, str):
            part = resolver
        else:
            part = resolver(value)
            if not isinstance(part, str):
                # an error of the user function: the cycle is abandoned as for a raising one
                raise InvalidInputError(".to(partition=fn): fn returned %r, not a partition name (str)" % (part,))
            validate_name(".to(partition=fn) partition", part)
        return {"queue": self.queue_name, "partition": part,
                "payload": value if type(value) is dict or isinstance(value, dict) else {"value": value},
                "transactionId": transaction_id}


class ForeachOperator:
    """``.foreach(fn)``: calls ``fn(value, ctx)`` for each result before the cycle commits
    (at least once: a failed commit redelivers the source messages)."""

    kind = "foreach"

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = two_arg(fn, "foreach()")
        self.config: Dict[str, Any] = {"kind": "foreach"}
