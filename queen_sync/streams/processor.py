"""The pure part of a stream cycle: from one partition's popped messages (and its state
rows) to the cycle to commit, and from ripe state rows to a flush cycle. No I/O here.

:func:`process_batch` runs the pre stages, ``key_by``, then the window + reducer fold, the
gate or nothing (stateless), then the post stages, and builds the state ops, the sink push
items (each with its deterministic ``transactionId``), the foreach effects and the ack.
:func:`process_flush` does the same for an idle flush (no ack). Both return a
:class:`CycleWork`; the runner commits it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..errors import InvalidInputError
from .gates import evaluate_gate
from .state import SEP, WATERMARK_KEY, parse_iso_ms, sink_transaction_id
from .windows import SessionWindow, WindowEmit, WindowEntry, fold_windows, ripe_emits, run_sessions

__all__ = ["Record", "CycleWork", "Stage", "needs_state", "process_batch", "flush_request", "process_flush"]


class Stage:
    """Where :func:`process_batch` is, for the ``on_error`` phase of an error it raises:
    ``"gate-eval"`` while the gate decides (its function, a helper's ``cost_fn``),
    ``"window-apply"`` while an event is placed in its windows (``event_time``), else
    ``"cycle"`` (the official SDK's phase names)."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = "cycle"


class Record:
    """One value flowing through the pre stages: the source message, its key and value,
    and its identity (``src``: the message id, ``sub``: its index among the records that
    message produced)."""

    __slots__ = ("msg", "key", "value", "src", "sub", "pos")

    def __init__(self, msg: Dict[str, Any], key: Any, value: Any, src: str, sub: int, pos: int) -> None:
        self.msg = msg
        self.key = key
        self.value = value
        self.src = src
        self.sub = sub
        self.pos = pos  # index of the source message in the batch


@dataclass
class CycleWork:
    """What one cycle commits, plus what the runner counts."""

    state_ops: List[Dict[str, Any]] = field(default_factory=list)
    push_items: List[Dict[str, Any]] = field(default_factory=list)
    effects: List[Tuple[Any, Dict[str, Any]]] = field(default_factory=list)
    ack: Optional[Dict[str, Any]] = None
    release_lease: bool = True
    #: False: send nothing (a gate denied the first message; the batch waits for its lease)
    commit: bool = True
    #: source messages this cycle acks (the batch, or the gate's allowed prefix)
    acked: int = 0
    late: int = 0
    gate_allows: int = 0
    gate_denials: int = 0
    watermark: Optional[float] = None
    #: (exception, phase) of records skipped because a window could not place them
    errors: List[Tuple[BaseException, str]] = field(default_factory=list)


def needs_state(plan: Any) -> bool:
    """True when a cycle must read the partition's state first."""
    return plan.gate is not None or (plan.window is not None and plan.reducer is not None)


def _pre(plan: Any, messages: List[Dict[str, Any]], partition_id: str) -> List[Record]:
    out: List[Record] = []
    for pos, msg in enumerate(messages):
        src = str(msg.get("id") or msg.get("transactionId") or pos)
        recs = [Record(msg, msg.get("partitionId") or partition_id, msg.get("data"), src, 0, pos)]
        for op in plan.pre:
            kind = op.kind
            nxt: List[Record] = []
            for r in recs:
                if kind == "map":
                    r.value = op.fn(r.msg, None)
                    nxt.append(r)
                elif kind == "filter":
                    if op.fn(r.msg, None):
                        nxt.append(r)
                else:  # flatMap: the source message again, one record per item
                    for v in op.expand(r.msg, None):
                        nxt.append(Record(msg, r.key, v, src, 0, pos))
            recs = nxt
        if plan.key_by is not None:
            for r in recs:
                r.key = str(plan.key_by.fn(r.msg))
                if plan.window is not None and SEP in r.key:
                    # it would split the window's state key into other parts: an error of key_by
                    raise InvalidInputError(
                        "key_by() returned %r for message %s: a window key cannot contain U+001F (the unit "
                        "separator that joins the parts of a state key)" % (r.key, src))
        for i, r in enumerate(recs):
            r.sub = i
        out.extend(recs)
    return out


def _ctx(e: WindowEmit, partition_name: Optional[str], partition_id: str) -> Dict[str, Any]:
    return {"partition": partition_name, "partitionId": partition_id, "key": e.key, "windowKey": e.window_key,
            "windowStart": e.start, "windowEnd": e.end}


def _post(plan: Any, e: WindowEmit, partition_name: Optional[str], partition_id: str) -> List[Any]:
    values = [e.value]
    if plan.post:
        ctx = _ctx(e, partition_name, partition_id)
        for op in plan.post:
            kind = op.kind
            nxt = []
            for v in values:
                # a None result stays None (0.15 puts the input back instead, which breaks
                # its own map -> None -> filter(lambda v: v is not None) alerting example)
                if kind == "map":
                    nxt.append(op.fn(v, ctx))
                elif kind == "filter":
                    if op.fn(v, ctx):
                        nxt.append(v)
                else:
                    nxt.extend(op.expand(v, ctx))
            values = nxt
    return values


def _emit(plan: Any, work: CycleWork, query: str, emits: List[WindowEmit], partition_name: Optional[str], partition_id: str) -> None:
    sink = plan.sink
    items = work.push_items
    for e in emits:
        values = _post(plan, e, partition_name, partition_id) if plan.post else [e.value]
        if sink is None:
            continue
        if sink.kind == "sink":
            for i, v in enumerate(values):
                items.append(sink.item(v, partition_name, sink_transaction_id(query, e.basis, i)))
        else:
            ctx = _ctx(e, partition_name, partition_id)
            for v in values:
                work.effects.append((v, ctx))


def _record_emits(records: List[Record], partition_id: str) -> List[WindowEmit]:
    return [WindowEmit(r.key, None, None, None, r.value, "m" + SEP + partition_id + SEP + r.src + SEP + str(r.sub))
            for r in records]


def _ack(msg: Dict[str, Any], lease_id: Optional[str], count: int) -> Dict[str, Any]:
    return {"transactionId": msg.get("transactionId"), "leaseId": msg.get("leaseId") or lease_id,
            "status": "completed", "count": count}


def process_batch(
    plan: Any,
    query: str,
    partition_id: str,
    partition_name: Optional[str],
    lease_id: Optional[str],
    messages: List[Dict[str, Any]],
    loaded: Dict[str, Any],
    now_ms: int,
    watermark: Optional[float] = None,
    stage: Optional[Stage] = None,
) -> CycleWork:
    """The cycle for one partition's batch (``messages`` in the order popped).

    Args:
        plan: the compiled chain (:class:`.stream.Plan`); query: the query name (part of
            every sink ``transactionId``).
        loaded: the partition's state rows (``{}`` when :func:`needs_state` is False).
        now_ms: the wall clock (gate stream time; session close clock in processing time).
        watermark: the event-time watermark known before this batch (a ``__wm__`` row in
            ``loaded`` wins).

    User callables that raise propagate (the runner abandons the cycle), and so do their
    errors: a ``key_by`` key containing U+001F in a chain with a window (InvalidInputError).
    ``stage`` (optional) then says which stage raised (its ``phase``).
    """
    work = CycleWork()
    stage = stage if stage is not None else Stage()
    # the partition's order as popped (its cursor order): the ack of the last one then covers
    # exactly the batch (0.15 re-sorts by createdAt first, so a createdAt out of cursor order
    # would make it ack a message before the end of the batch and get the rest again)
    ordered = messages
    records = _pre(plan, ordered, partition_id)
    last = ordered[-1]
    if plan.gate is not None:
        return _gate_batch(plan, work, query, partition_id, partition_name, lease_id, ordered, records, loaded, now_ms,
                           stage)
    if plan.window is None:
        _emit(plan, work, query, _record_emits(records, partition_id), partition_name, partition_id)
    else:
        _window_batch(plan, work, query, partition_id, partition_name, ordered, records, loaded, now_ms, watermark,
                      stage)
    work.ack = _ack(last, lease_id, len(ordered))
    work.acked = len(ordered)
    return work


def _window_batch(plan: Any, work: CycleWork, query: str, partition_id: str, partition_name: Optional[str],
                  ordered: List[Dict[str, Any]], records: List[Record], loaded: Dict[str, Any], now_ms: int,
                  watermark: Optional[float], stage: Stage) -> None:
    window = plan.window
    event_time = window.event_time_fn is not None
    # a window without a reducer keeps no state and, as in the official SDK, no watermark:
    # it passes every event through, none is late (0.15 never sets one on that path)
    watermarked = event_time and plan.reducer is not None
    if not watermarked:
        watermark = None
    else:
        wm_row = loaded.get(WATERMARK_KEY)
        if isinstance(wm_row, dict) and isinstance(wm_row.get("eventTimeMs"), (int, float)):
            watermark = wm_row["eventTimeMs"]
    entries: List[WindowEntry] = []
    passthrough: List[Tuple[Record, int]] = []
    max_seen = -math.inf
    stage.phase = "window-apply"  # placing the events in their windows: event_time, windows_of
    for r in records:
        # an event_time that raises or returns a bad value abandons the cycle, as any user
        # function that raises (0.15 reports and skips the record: the message is acked, lost)
        ts = window.event_time_of(r.msg)
        if ts is None:  # processing time and no createdAt
            work.errors.append((RuntimeError("%s could not determine the timestamp of message %s"
                                             % (window.config_kind, r.src)), "window-apply"))
            continue
        if watermarked:
            if ts > max_seen:
                max_seen = ts
            if watermark is not None and ts < watermark and window.on_late == "drop":
                work.late += 1
                continue
        value = r.value if r.value is not None else r.msg
        if isinstance(window, SessionWindow):
            entries.append(WindowEntry(r.key, ts, ts, value, r.src))
        elif plan.reducer is None:
            for start, _end in window.windows_of(ts):
                passthrough.append((r, start))
        else:
            for start, end in window.windows_of(ts):
                entries.append(WindowEntry(r.key, start, end, value, r.src))
    stage.phase = "cycle"
    clock: Optional[float] = None
    if watermarked:
        base = watermark if watermark is not None else -math.inf
        adv = max(base, max_seen - window.allowed_lateness_ms if max_seen > -math.inf else -math.inf)
        if adv > -math.inf:
            work.watermark = adv
            clock = adv
    if plan.reducer is None:
        emits = [WindowEmit(r.key, None, None, None, r.value,
                            "m" + SEP + partition_id + SEP + r.src + SEP + str(r.sub) + SEP + str(start))
                 for r, start in passthrough]
        _emit(plan, work, query, emits, partition_name, partition_id)
        return
    if isinstance(window, SessionWindow):
        # processing time: sessions close by the wall clock; event time: by the watermark
        session_clock = (clock if clock is not None else -math.inf) if event_time else now_ms
        ops, emits = run_sessions(window, plan.reducer, entries, loaded, session_clock, partition_id)
    else:
        if not event_time:
            clock = max((parse_iso_ms(m.get("createdAt")) or 0) for m in ordered)
        ops, emits = fold_windows(window, plan.reducer, entries, loaded, clock, partition_id)
    if work.watermark is not None:
        ops.append({"type": "upsert", "key": WATERMARK_KEY, "value": {"eventTimeMs": _int_if_whole(work.watermark)}})
    work.state_ops = ops
    _emit(plan, work, query, emits, partition_name, partition_id)


def _int_if_whole(v: float) -> Any:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _gate_batch(plan: Any, work: CycleWork, query: str, partition_id: str, partition_name: Optional[str],
                lease_id: Optional[str], ordered: List[Dict[str, Any]], records: List[Record], loaded: Dict[str, Any],
                now_ms: int, stage: Stage) -> CycleWork:
    # whole messages only: a message whose records were partly allowed comes back whole (the
    # gate undoes its state changes; it is called once per record, never twice)
    stage.phase = "gate-eval"
    allowed, live, touched = evaluate_gate(plan.gate, records, loaded, now_ms, partition_id, partition_name)
    stage.phase = "cycle"
    n_msgs = len(ordered) if allowed == len(records) else records[allowed].pos
    work.gate_allows = allowed
    work.gate_denials = len(records) - allowed
    if n_msgs == 0:
        work.commit = False
        return work
    work.state_ops = [{"type": "upsert", "key": k, "value": live[k]} for k in touched]
    _emit(plan, work, query, _record_emits(records[:allowed], partition_id), partition_name, partition_id)
    work.ack = _ack(ordered[n_msgs - 1], lease_id, n_msgs)
    work.acked = n_msgs
    work.release_lease = n_msgs == len(ordered)
    return work


def flush_request(plan: Any, clock_ms: Optional[float]) -> Optional[Dict[str, Any]]:
    """The state read of an idle flush at ``clock_ms`` (wall clock, or the watermark in
    event-time mode): ``{"key_prefix", "ripe_at_or_before"}`` for tumbling / sliding / cron,
    ``{}`` (every row) for sessions, None when there is nothing to do."""
    window = plan.window
    if window is None or plan.reducer is None or clock_ms is None:
        return None
    if isinstance(window, SessionWindow):
        return {}
    ripe = int(clock_ms) - window.grace_ms
    if ripe < 0:
        return None
    return {"key_prefix": window.tag + SEP, "ripe_at_or_before": ripe}


def process_flush(plan: Any, query: str, partition_id: str, partition_name: Optional[str], rows: Dict[str, Any],
                  clock_ms: float) -> CycleWork:
    """The flush cycle (no ack) for the state ``rows`` read as :func:`flush_request` said:
    ripe windows, or the sessions that closed by ``clock_ms``. ``commit`` is False when
    nothing closed."""
    work = CycleWork(acked=0)
    window = plan.window
    if isinstance(window, SessionWindow):
        ops, emits = run_sessions(window, plan.reducer, [], rows, clock_ms, partition_id)
    else:
        ops, emits = ripe_emits(window, plan.reducer, rows, partition_id)
    if not emits:
        work.commit = False
        return work
    work.state_ops = ops
    _emit(plan, work, query, emits, partition_name, partition_id)
    return work
