"""Gates: per-record allow / deny decisions with state kept in the broker, and the two
rate-limiter factories of the official SDK.

A gate function ``fn(value, ctx)`` returns True (or ``{"allow": True}``) to pass the record
on, False to stop the batch there. ``ctx.state`` is the mutable state dict of the record's
key (default key: the source partition id), persisted when the key let a record through;
``ctx.stream_time_ms`` (alias ``streamTimeMs``) is the cycle's wall clock in epoch ms. The
function is called once per record, in order, up to and including the first one it denies
(as in the official SDK). The source messages wholly allowed before the first denial are
committed (acked, the lease kept); the denied record's message (also when some of its
records, from a ``flat_map``, were allowed: what the gate did to its state then is undone)
and everything after it stay unacked and come back, in order (FIFO), when the lease
expires, and are asked again then.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import InvalidInputError
from .._callables import check_arity

__all__ = ["GateContext", "token_bucket_gate", "sliding_window_gate", "evaluate_gate"]


class GateContext:
    """What a gate function gets as ``ctx``: ``state`` (dict, mutate it), ``stream_time_ms``,
    ``partition_id``, ``partition`` (name), ``key``; camelCase aliases ``streamTimeMs`` and
    ``partitionId``."""

    __slots__ = ("state", "stream_time_ms", "partition_id", "partition", "key", "streamTimeMs", "partitionId")

    def __init__(self, state: Dict[str, Any], stream_time_ms: int, partition_id: str, partition: Optional[str], key: str) -> None:
        self.state = state
        self.stream_time_ms = stream_time_ms
        self.partition_id = partition_id
        self.partition = partition
        self.key = key
        self.streamTimeMs = stream_time_ms
        self.partitionId = partition_id

    def __repr__(self) -> str:
        return "GateContext(key=%r, partition=%r, stream_time_ms=%r, state=%r)" % (
            self.key, self.partition, self.stream_time_ms, self.state)


def _positive(name: str, x: Any) -> None:
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x <= 0:
        raise InvalidInputError("%s must be a positive number, got %r" % (name, x))


def _cost(cost_fn: Callable[[Any], Any], value: Any) -> float:
    c = cost_fn(value)
    if not isinstance(c, (int, float)) or isinstance(c, bool) or not math.isfinite(c) or c < 0:
        return 1
    return c


def _one(_value: Any) -> int:
    return 1


def token_bucket_gate(
    capacity: float,
    refill_per_sec: float,
    cost_fn: Callable[[Any], Any] = _one,
    allow_zero_cost: bool = True,
) -> Callable[[Any, GateContext], bool]:
    """A token-bucket gate for ``Stream.gate``: ``capacity`` tokens, refilled at
    ``refill_per_sec`` tokens per **second** of stream time; a record costs ``cost_fn(value)``
    tokens (default 1; a non-number or negative cost counts 1; cost 0 passes when
    ``allow_zero_cost``). State per key: ``tokens``, ``lastRefillAt`` (epoch ms),
    ``allowedTotal``, ``consumedTotal``. Max sustained rate per partition:
    ``min(refill_per_sec, capacity / lease seconds)``.

    Raises:
        InvalidInputError: a non-positive capacity / refill rate, or a cost_fn that is not a
            callable of one argument.
    """
    _positive("token_bucket_gate capacity", capacity)
    _positive("token_bucket_gate refill_per_sec", refill_per_sec)
    check_arity(cost_fn, 1, "token_bucket_gate cost_fn")

    def token_bucket(value: Any, ctx: GateContext) -> bool:
        now = ctx.stream_time_ms
        st = ctx.state
        if not isinstance(st.get("tokens"), (int, float)):
            st["tokens"] = capacity
        if not isinstance(st.get("lastRefillAt"), (int, float)):
            st["lastRefillAt"] = now
        elapsed = max(0.0, (now - st["lastRefillAt"]) / 1000.0)
        st["tokens"] = min(capacity, st["tokens"] + elapsed * refill_per_sec)
        st["lastRefillAt"] = now
        cost = _cost(cost_fn, value)
        if cost == 0:
            return allow_zero_cost
        if st["tokens"] >= cost:
            st["tokens"] -= cost
            st["allowedTotal"] = st.get("allowedTotal", 0) + 1
            st["consumedTotal"] = st.get("consumedTotal", 0) + cost
            return True
        return False

    return token_bucket


def sliding_window_gate(
    limit: float,
    window_sec: float,
    cost_fn: Callable[[Any], Any] = _one,
) -> Callable[[Any, GateContext], bool]:
    """A gate allowing about ``limit`` cost units per ``window_sec`` **seconds**: the
    two-bucket approximation of the official SDK (previous bucket weighted by the part of it
    still inside the window, plus the current one). State per key: ``window`` (bucket
    number), ``currentCount``, ``previousCount``.

    Raises:
        InvalidInputError: a non-positive limit or window, or a cost_fn that is not a callable
            of one argument.
    """
    _positive("sliding_window_gate limit", limit)
    _positive("sliding_window_gate window_sec", window_sec)
    check_arity(cost_fn, 1, "sliding_window_gate cost_fn")
    window_ms = window_sec * 1000

    def sliding_window(value: Any, ctx: GateContext) -> bool:
        now = ctx.stream_time_ms
        st = ctx.state
        current = math.floor(now / window_ms)
        elapsed = (now % window_ms) / window_ms
        if st.get("window") != current:
            st["previousCount"] = st.get("currentCount", 0) if st.get("window") == current - 1 else 0
            st["currentCount"] = 0
            st["window"] = current
        estimated = (st.get("previousCount", 0) or 0) * (1 - elapsed) + (st.get("currentCount", 0) or 0)
        cost = _cost(cost_fn, value)
        if estimated + cost <= limit:
            st["currentCount"] = st.get("currentCount", 0) + cost
            return True
        return False

    return sliding_window


def _clone(v: Any) -> Any:
    if v is None:
        return {}
    if not isinstance(v, (dict, list)):
        return v
    return copy.deepcopy(v)


def evaluate_gate(
    gate: Any,
    records: List[Any],
    loaded: Dict[str, Any],
    stream_time_ms: int,
    partition_id: str,
    partition: Optional[str],
) -> Tuple[int, Dict[str, Any], List[str]]:
    """Run the gate over ``records`` (each with ``.key``, ``.value`` and ``.pos``, the index
    of its source message; the records of one message are contiguous) in order, stopping at
    the first denial. The gate function is called once per record, up to and including the
    first one it denies (as in the official SDK), never again for the same record.

    Whole messages only: when the denied record's message had records allowed before it,
    that message counts as denied too, and what the gate did to the state of its keys while
    allowing them is undone (the message comes back whole, and its records are asked again
    then).

    Returns ``(allowed, live_state, touched_keys)``: the number of records let through (those
    of the messages wholly allowed), the per-key state dicts, and the keys (in first-allow
    order) whose state must be persisted. A gate function that raises propagates (nothing is
    committed)."""
    live: Dict[str, Any] = {}
    contexts: Dict[str, GateContext] = {}  # one per key: same state dict, same stream time
    touched: List[str] = []
    seen = set()
    sizes: Dict[Any, int] = {}
    for r in records:
        sizes[r.pos] = sizes.get(r.pos, 0) + 1
    allowed = 0
    msg_pos: Any = None
    msg_first = 0  # index of the first record of the current message
    msg_touched = 0  # len(touched) before the current message
    undo: Dict[str, Any] = {}  # key -> its state before the current message (multi-record messages)
    for i, r in enumerate(records):
        if r.pos != msg_pos:
            msg_pos, msg_first, msg_touched = r.pos, i, len(touched)
            undo = {}
        key = r.key
        ctx = contexts.get(key)
        if ctx is None:
            st = _clone(loaded.get(key)) if key in loaded else {}
            if not isinstance(st, dict):
                st = {}
            live[key] = st
            ctx = contexts[key] = GateContext(st, stream_time_ms, partition_id, partition, key)
        if sizes[r.pos] > 1 and key not in undo:
            undo[key] = copy.deepcopy(ctx.state)
        if not gate.allows(r.value, ctx):
            if i > msg_first:  # part of this message was allowed: undo it
                allowed = msg_first
                for k, before in undo.items():
                    live[k] = before
                for k in touched[msg_touched:]:
                    seen.discard(k)
                del touched[msg_touched:]
            break
        allowed += 1
        if key not in seen:
            seen.add(key)
            touched.append(key)
    return allowed, live, touched
