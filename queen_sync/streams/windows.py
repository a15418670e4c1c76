"""Window operators (tumbling, sliding, session, cron) and the per-window folding.

Owns: the window options, units and defaults of the official SDK (``seconds`` / ``size`` /
``slide`` / ``gap`` / ``grace_period`` / ``allowed_lateness`` in **seconds**,
``idle_flush_ms`` in **milliseconds**, an int, 0 = no idle flush; default 5000 for tumbling and
sliding, 1000 for session, 30000 for cron), the assignment of an event time to windows, the
fold of a batch into the window accumulators read from state (which windows close, which
state rows are upserted or deleted) and the session logic (merge within ``gap``, close after
``gap + grace_period``).

Times are epoch **milliseconds** (ints). A window ``[start, end)`` closes when
``end + grace <= stream time``; the stream time of a cycle is the watermark in event-time
mode (max event time seen minus ``allowed_lateness``), else the latest ``createdAt`` of the
batch; the idle flush uses the wall clock (or the watermark in event-time mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._validate import MAX_DURATION_MILLIS
from ..errors import InvalidInputError
from .._callables import check_arity
from .state import SEP, parse_iso_ms, parse_window_state_key, session_state_key, to_iso_ms, window_state_key

__all__ = [
    "MAX_WINDOW_SECONDS",
    "MAX_SLIDING_WINDOWS_PER_EVENT",
    "WindowOperator",
    "TumblingWindow",
    "SlidingWindow",
    "SessionWindow",
    "CronWindow",
    "WindowEntry",
    "WindowEmit",
    "fold_windows",
    "ripe_emits",
    "run_sessions",
]

#: the event times a window accepts: what a datetime holds (years 1..9999), in epoch ms
_MIN_EVENT_MS = -62135596800000
_MAX_EVENT_MS = 253402300799999
_EVERY_MS = {"second": 1000, "minute": 60000, "hour": 3600000, "day": 86400000, "week": 7 * 86400000}
#: 1970-01-01 was a Thursday: weeks start on Monday 00:00 UTC, 4 days later
_WEEK_OFFSET_MS = 4 * 86400000


#: the longest duration a window option takes, in seconds: the span of years 1..9999
#: (315537897600 s, about 9999 years); the shortest non-zero one is 1 ms
MAX_WINDOW_SECONDS = (_MAX_EVENT_MS + 1 - _MIN_EVENT_MS) // 1000
_MIN_SECONDS = 0.001

#: the most windows a sliding window puts one event in (``size / slide``): each event is
#: folded into that many accumulators (state rows), so a huge size over a tiny slide (up to
#: about 3 * 10**14 windows per event) made a cycle that never ends
MAX_SLIDING_WINDOWS_PER_EVENT = 10_000


def _seconds(name: str, value: Any, *, positive: bool) -> Any:
    """Check a duration in seconds: a number of 0.001..MAX_WINDOW_SECONDS (0 too when not
    ``positive``). Ints are compared exactly (``math.isfinite`` of a huge int overflows)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)):
        raise InvalidInputError("%s must be a number of seconds, got %r" % (name, value))
    if value < 0 or (positive and value == 0):
        raise InvalidInputError("%s must be %s, got %r" % (name, "> 0" if positive else ">= 0", value))
    if value != 0 and value < _MIN_SECONDS:
        raise InvalidInputError("%s must be %sat least 0.001 seconds (1 ms), got %r"
                                % (name, "" if positive else "0 or ", value))
    if value > MAX_WINDOW_SECONDS:
        raise InvalidInputError("%s must be at most %d seconds (about 9999 years), got %r"
                                % (name, MAX_WINDOW_SECONDS, value))
    return value


def _idle_ms(value: Any) -> int:
    """Check ``idle_flush_ms``: an int (not a bool, not a float: 0.5 truncated to 0 turned
    the idle flush off) of 0..MAX_DURATION_MILLIS, as ``run(max_wait_millis=)`` is checked."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DURATION_MILLIS:
        raise InvalidInputError("idle_flush_ms must be an int of milliseconds of 0..%d (one year; 0 = no "
                                "idle flush), got %r" % (MAX_DURATION_MILLIS, value))
    return value


def _on_late(value: Any) -> str:
    if value is None or value == "drop":
        return "drop"
    if value == "include":
        return "include"
    raise InvalidInputError("on_late must be 'drop' or 'include', got %r" % (value,))


class WindowOperator:
    """Common part of the four window operators (``kind == "window"``)."""

    kind = "window"
    window_kind = ""
    config_kind = ""

    def __init__(
        self,
        *,
        grace_period: Any,
        idle_flush_ms: Any,
        event_time: Optional[Callable[[Any], Any]],
        allowed_lateness: Any,
        on_late: Optional[str],
    ) -> None:
        if event_time is not None:
            check_arity(event_time, 1, "event_time")
        self.grace_period = _seconds("grace_period", grace_period, positive=False)
        self.grace_ms = int(grace_period * 1000)
        self.idle_flush_ms = _idle_ms(idle_flush_ms)
        self.event_time_fn = event_time
        self.allowed_lateness = _seconds("allowed_lateness", allowed_lateness, positive=False)
        self.allowed_lateness_ms = int(allowed_lateness * 1000)
        self.on_late = _on_late(on_late)
        self.tag = ""
        self.config: Dict[str, Any] = {}

    def _finish_config(self, shape: Dict[str, Any]) -> None:
        self.config = {"kind": self.config_kind}
        self.config.update(shape)
        self.config.update(
            {
                "gracePeriod": self.grace_period,
                "idleFlushMs": self.idle_flush_ms,
                "eventTime": self.event_time_fn is not None,
                "allowedLateness": self.allowed_lateness,
                "onLate": self.on_late,
            }
        )

    def event_time_of(self, msg: Any) -> Optional[int]:
        """The event time (epoch ms) of a source message: ``event_time(msg)`` (int / float ms,
        datetime or ISO string), else the message's ``createdAt`` (None when it has none).

        Raises:
            InvalidInputError: ``event_time(msg)`` returned anything else (None, NaN, a
                non-number, an unparseable string, a time outside years 1..9999): an error
                of the user function, handled as one that raises (the batch is not committed).
        """
        if self.event_time_fn is not None:
            raw = self.event_time_fn(msg)
            ts: Optional[int] = None
            if isinstance(raw, datetime):
                ts = int(raw.timestamp() * 1000)
            elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
                ts = int(raw) if math.isfinite(raw) else None
            elif isinstance(raw, str):
                ts = parse_iso_ms(raw)
            if ts is None or not _MIN_EVENT_MS <= ts <= _MAX_EVENT_MS:
                raise InvalidInputError(
                    "event_time returned %r: not epoch ms (int / float), a datetime or an ISO string within "
                    "years 1..9999" % (raw,))
            return ts
        return parse_iso_ms(msg.get("createdAt")) if isinstance(msg, dict) else None

    def assign(self, ts: int) -> List[Tuple[int, int]]:
        """The ``(start, end)`` of every window the time ``ts`` falls in."""
        raise NotImplementedError

    def windows_of(self, ts: int) -> List[Tuple[int, int]]:
        """:meth:`assign`, refusing a window that would start before year 1 (a long window
        and an event time before 1970: its start has no ISO form for the state key).

        Raises:
            InvalidInputError: an error of ``event_time``, handled as one that raises.
        """
        out = self.assign(ts)
        if out and min(start for start, _ in out) < _MIN_EVENT_MS:
            raise InvalidInputError(
                "event_time returned %d: it falls in a %s window starting before year 1 (its start has no "
                "timestamp form)" % (ts, self.window_kind))
        return out


class TumblingWindow(WindowOperator):
    """``.window_tumbling(seconds=...)``: back-to-back windows ``[k*s, (k+1)*s)``."""

    window_kind = "tumbling"
    config_kind = "window-tumbling"

    def __init__(self, seconds: Any, grace_period: Any = 0, idle_flush_ms: Any = 5000, event_time: Any = None,
                 allowed_lateness: Any = 0, on_late: Optional[str] = None) -> None:
        super().__init__(grace_period=grace_period, idle_flush_ms=idle_flush_ms, event_time=event_time,
                         allowed_lateness=allowed_lateness, on_late=on_late)
        self.seconds = _seconds("window_tumbling seconds", seconds, positive=True)
        self.window_ms = int(seconds * 1000)
        self.tag = "tumb:%s" % (seconds,)
        self._finish_config({"seconds": seconds})

    def assign(self, ts: int) -> List[Tuple[int, int]]:
        start = (ts // self.window_ms) * self.window_ms
        return [(start, start + self.window_ms)]


class SlidingWindow(WindowOperator):
    """``.window_sliding(size=..., slide=...)``: windows of ``size`` starting every ``slide``
    (``size`` a whole multiple of ``slide``); an event is in ``size / slide`` windows, at most
    :data:`MAX_SLIDING_WINDOWS_PER_EVENT` (10000).

    Raises:
        InvalidInputError: a bad duration, a ``size`` not a whole multiple of ``slide``, or
            ``size / slide`` above :data:`MAX_SLIDING_WINDOWS_PER_EVENT`.
    """

    window_kind = "sliding"
    config_kind = "window-sliding"

    def __init__(self, size: Any, slide: Any, grace_period: Any = 0, idle_flush_ms: Any = 5000,
                 event_time: Any = None, allowed_lateness: Any = 0, on_late: Optional[str] = None) -> None:
        super().__init__(grace_period=grace_period, idle_flush_ms=idle_flush_ms, event_time=event_time,
                         allowed_lateness=allowed_lateness, on_late=on_late)
        self.size = _seconds("window_sliding size", size, positive=True)
        self.slide = _seconds("window_sliding slide", slide, positive=True)
        if size % slide != 0:
            raise InvalidInputError("window_sliding: size (%r) must be a whole multiple of slide (%r)" % (size, slide))
        if size > slide * MAX_SLIDING_WINDOWS_PER_EVENT:
            raise InvalidInputError(
                "window_sliding: size / slide (%r / %r) puts each event in more than %d windows; use a larger "
                "slide or a smaller size" % (size, slide, MAX_SLIDING_WINDOWS_PER_EVENT))
        self.size_ms = int(size * 1000)
        self.slide_ms = int(slide * 1000)
        self.per_event = int(size / slide)
        self.tag = "slide:%s:%s" % (size, slide)
        self._finish_config({"size": size, "slide": slide})

    def assign(self, ts: int) -> List[Tuple[int, int]]:
        latest = (ts // self.slide_ms) * self.slide_ms
        out = []
        for i in range(self.per_event):
            start = latest - i * self.slide_ms
            if start <= ts < start + self.size_ms:
                out.append((start, start + self.size_ms))
        return out


class CronWindow(WindowOperator):
    """``.window_cron(every="second"|"minute"|"hour"|"day"|"week")``: wall-clock aligned
    windows in UTC (weeks start on Monday 00:00 UTC)."""

    window_kind = "cron"
    config_kind = "window-cron"

    def __init__(self, every: Any, grace_period: Any = 0, idle_flush_ms: Any = 30000, event_time: Any = None,
                 allowed_lateness: Any = 0, on_late: Optional[str] = None) -> None:
        super().__init__(grace_period=grace_period, idle_flush_ms=idle_flush_ms, event_time=event_time,
                         allowed_lateness=allowed_lateness, on_late=on_late)
        if not isinstance(every, str) or every not in _EVERY_MS:
            raise InvalidInputError("window_cron every must be one of second|minute|hour|day|week, got %r" % (every,))
        self.every = every
        self.window_ms = _EVERY_MS[every]
        self.tag = "cron:%s" % every
        self._finish_config({"every": every})

    def assign(self, ts: int) -> List[Tuple[int, int]]:
        if self.every == "week":
            start = ((ts - _WEEK_OFFSET_MS) // self.window_ms) * self.window_ms + _WEEK_OFFSET_MS
        else:
            start = (ts // self.window_ms) * self.window_ms
        return [(start, start + self.window_ms)]


class SessionWindow(WindowOperator):
    """``.window_session(gap=...)``: per key, events less than ``gap`` apart (inclusive)
    form one session; it closes ``gap + grace_period`` after its last event."""

    window_kind = "session"
    config_kind = "window-session"

    def __init__(self, gap: Any, grace_period: Any = 0, idle_flush_ms: Any = 1000, event_time: Any = None,
                 allowed_lateness: Any = 0, on_late: Optional[str] = None) -> None:
        super().__init__(grace_period=grace_period, idle_flush_ms=idle_flush_ms, event_time=event_time,
                         allowed_lateness=allowed_lateness, on_late=on_late)
        self.gap = _seconds("window_session gap", gap, positive=True)
        self.gap_ms = int(gap * 1000)
        self.tag = "sess:%s" % (gap,)
        self._finish_config({"gap": gap})

    @property
    def open_prefix(self) -> str:
        return self.tag + SEP + "open" + SEP

    def assign(self, ts: int) -> List[Tuple[int, int]]:  # sessions are not assigned up front
        return [(ts, ts + self.gap_ms)]


@dataclass
class WindowEntry:
    """One value to fold: ``key``, its window ``start``/``end`` (event time for a session),
    the value, and the id of the source message (names the window instance it opens)."""

    key: str
    start: int
    end: int
    value: Any
    source_id: str


class WindowEmit:
    """A result to emit: key, window bounds (None outside windows), ISO start, the value and
    ``basis`` (the identity of what produced it: the window instance or the source record,
    for the sink ``transactionId``)."""

    __slots__ = ("key", "start", "end", "window_key", "value", "basis")

    def __init__(self, key: Any, start: Any, end: Any, window_key: Optional[str], value: Any, basis: str) -> None:
        self.key = key
        self.start = start
        self.end = end
        self.window_key = window_key
        self.value = value
        self.basis = basis


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fold_windows(
    window: WindowOperator,
    reducer: Any,
    entries: List[WindowEntry],
    loaded: Dict[str, Any],
    stream_time: Optional[float],
    partition_id: str,
) -> Tuple[List[Dict[str, Any]], List[WindowEmit]]:
    """Fold ``entries`` into the windows of ``loaded`` (this partition's state rows) and
    return ``(state_ops, emits)``: every window with ``end + grace <= stream_time`` is
    emitted (and its row deleted if it had one), every other touched window is upserted as
    ``{acc, windowStart, windowEnd, openedBy}``. ``stream_time`` None means the latest window
    start of the batch. Tumbling / sliding / cron windows only."""
    acc_by_key: Dict[str, Dict[str, Any]] = {}
    for sk, value in loaded.items():
        parts = parse_window_state_key(sk)
        if parts is None or parts["operatorTag"] != window.tag:
            continue
        v = value if isinstance(value, dict) else {}
        ws = v.get("windowStart") if _is_num(v.get("windowStart")) else (parse_iso_ms(parts["windowKey"]) or 0)
        we = v.get("windowEnd") if _is_num(v.get("windowEnd")) else ws
        acc = v.get("acc") if v.get("acc") is not None else value
        acc_by_key[sk] = {"key": parts["userKey"], "ws": ws, "we": we, "wk": parts["windowKey"], "acc": acc,
                          "touched": False, "seeded": True, "opener": str(v.get("openedBy") or "")}
    batch_max_start = -math.inf
    for e in entries:
        wk = to_iso_ms(e.start)
        sk = window_state_key(window.tag, wk, e.key)
        a = acc_by_key.get(sk)
        if a is None:
            a = {"key": e.key, "ws": e.start, "we": e.end, "wk": wk, "acc": reducer.initial_value(),
                 "touched": False, "seeded": False, "opener": e.source_id}
            acc_by_key[sk] = a
        a["acc"] = reducer.fn(a["acc"], e.value)
        a["touched"] = True
        if e.start > batch_max_start:
            batch_max_start = e.start
    clock = stream_time if stream_time is not None and stream_time > -math.inf else batch_max_start
    ops: List[Dict[str, Any]] = []
    emits: List[WindowEmit] = []
    for sk, a in acc_by_key.items():
        if a["we"] + window.grace_ms <= clock:
            emits.append(WindowEmit(a["key"], a["ws"], a["we"], a["wk"], reducer.result(a["acc"]),
                                    "w" + SEP + partition_id + SEP + sk + SEP + a["opener"]))
            if a["seeded"]:
                ops.append({"type": "delete", "key": sk})
        elif a["touched"]:
            row = {"acc": a["acc"], "windowStart": a["ws"], "windowEnd": a["we"]}
            if a["opener"]:
                row["openedBy"] = a["opener"]
            ops.append({"type": "upsert", "key": sk, "value": row})
    return ops, emits


def ripe_emits(window: WindowOperator, reducer: Any, rows: Dict[str, Any], partition_id: str) -> Tuple[List[Dict[str, Any]], List[WindowEmit]]:
    """The idle flush of tumbling / sliding / cron windows: ``rows`` are the ripe state rows
    the broker returned; each row of this window operator is emitted and deleted."""
    ops: List[Dict[str, Any]] = []
    emits: List[WindowEmit] = []
    for sk, value in rows.items():
        parts = parse_window_state_key(sk)
        if parts is None or parts["operatorTag"] != window.tag:
            continue
        v = value if isinstance(value, dict) else {}
        acc = v.get("acc") if v.get("acc") is not None else value
        ws = v.get("windowStart")
        if ws is None:
            ws = parse_iso_ms(parts["windowKey"]) or 0
        emits.append(WindowEmit(parts["userKey"], ws, v.get("windowEnd"), parts["windowKey"], reducer.result(acc),
                                "w" + SEP + partition_id + SEP + sk + SEP + str(v.get("openedBy") or "")))
        ops.append({"type": "delete", "key": sk})
    return ops, emits


def run_sessions(
    window: SessionWindow,
    reducer: Any,
    entries: List[WindowEntry],
    loaded: Dict[str, Any],
    now_ms: float,
    partition_id: str,
) -> Tuple[List[Dict[str, Any]], List[WindowEmit]]:
    """Fold ``entries`` (``start`` = event time) into the open sessions of ``loaded`` and
    close those whose ``lastEventTime + gap + grace <= now_ms``. Returns ``(state_ops,
    emits)``; the emit bounds are ``[sessionStart, lastEventTime + gap)``.

    Unlike the official 0.15 runtime, a key's state row is deleted whenever the key's last
    session closes, also when that session was opened in this very batch after an older one
    closed (0.15 leaves the old row behind and emits that session a second time later)."""
    prefix = window.open_prefix
    sessions: Dict[str, Dict[str, Any]] = {}
    had_row: Dict[str, bool] = {}
    for sk, value in loaded.items():
        if not sk.startswith(prefix):
            continue
        user_key = sk[len(prefix):]
        if SEP in user_key:
            continue
        v = value if isinstance(value, dict) else {}
        sessions[user_key] = {
            "acc": v.get("acc") if v.get("acc") is not None else reducer.session_initial_value(),
            "start": v.get("sessionStart") if _is_num(v.get("sessionStart")) else None,
            "last": v.get("lastEventTime") if _is_num(v.get("lastEventTime")) else None,
            "opener": str(v.get("openedBy") or ""),
            "dirty": False,
            "closed": False,
        }
        had_row[user_key] = True
    emits: List[WindowEmit] = []

    def emit(user_key: str, s: Dict[str, Any]) -> None:
        sk = session_state_key(window.tag, user_key)
        start = s["start"] if s["start"] is not None else s["last"]
        emits.append(WindowEmit(user_key, start, s["last"] + window.gap_ms, to_iso_ms(start),
                                reducer.result(s["acc"]),
                                "s" + SEP + partition_id + SEP + sk + SEP + str(start) + SEP + s["opener"]))

    for e in entries:
        ts = e.start
        s = sessions.get(e.key)
        if s is None or s["last"] is None:
            s = {"acc": reducer.session_initial_value(), "start": ts, "last": ts, "opener": e.source_id,
                 "dirty": True, "closed": False}
            sessions[e.key] = s
        elif s["last"] + window.gap_ms >= ts:
            if ts >= s["last"]:
                s["last"] = ts
            s["dirty"] = True
        else:
            emit(e.key, s)
            s = {"acc": reducer.session_initial_value(), "start": ts, "last": ts, "opener": e.source_id,
                 "dirty": True, "closed": False}
            sessions[e.key] = s
        s["acc"] = reducer.fn(s["acc"], e.value)
    for user_key, s in sessions.items():
        if s["last"] is None:
            continue
        if s["last"] + window.gap_ms + window.grace_ms <= now_ms:
            emit(user_key, s)
            s["closed"] = True
    ops: List[Dict[str, Any]] = []
    for user_key, s in sessions.items():
        sk = session_state_key(window.tag, user_key)
        if s["closed"]:
            if had_row.get(user_key):
                ops.append({"type": "delete", "key": sk})
        elif s["dirty"]:
            row = {"acc": s["acc"], "sessionStart": s["start"], "lastEventTime": s["last"]}
            if s["opener"]:
                row["openedBy"] = s["opener"]
            ops.append({"type": "upsert", "key": sk, "value": row})
    return ops, emits
