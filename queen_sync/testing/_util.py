"""Small helpers of the embedded broker: JSON, ids and timestamps (no client code is shared)."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from datetime import datetime, timezone
from types import ModuleType
from typing import Any, Dict, Optional, Tuple

_orjson: Optional[ModuleType]
try:  # orjson is a runtime dependency of queen_sync, but stay usable without it
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only without orjson
    _orjson = None

__all__ = [
    "EMPTY_BODY",
    "dumps",
    "loads",
    "uuid4",
    "uuid7",
    "is_uuid",
    "now_us",
    "fmt_us",
    "fmt_ms",
    "parse_ts_us",
    "json_error_text",
    "int_param",
    "paging",
    "BadRequest",
    "NumberOverflow",
]


class BadRequest(Exception):
    """Request validation failed: the broker answers 400 ``{"error": text}``."""

    def __init__(self, text: str) -> None:
        Exception.__init__(self, text)
        self.text = text


class _EmptyBody(object):
    """Marker reply: a 200 with ``Content-Type: application/json`` and no body at all (the
    real broker's answer on some routes, e.g. the messages of an unknown queue)."""


EMPTY_BODY = _EmptyBody()


def dumps(obj: Any) -> bytes:
    """Serialise ``obj`` to compact JSON bytes."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj)
        except TypeError:
            pass  # e.g. integers beyond 64 bits: fall back to the stdlib
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class NumberOverflow(ValueError):
    """A JSON number too large for a double (``1e400``, a 401-digit int): the real broker refuses it."""

    def __init__(self, token: str) -> None:
        ValueError.__init__(self, token)
        self.token = token

    @property
    def text(self) -> str:
        """nlohmann::json's own text for it (the broker answers 400 ``Invalid JSON: <text>``)."""
        return "[json.exception.out_of_range.406] number overflow parsing '%s'" % self.token


# The real broker parses every body with nlohmann::json (3.11): an integer inside the 64-bit range
# (signed or unsigned) stays exact, any other number becomes a double, and a number a double
# cannot hold fails the parse (out_of_range.406) before anything is stored. orjson does the same;
# the stdlib fallback below (for input orjson refuses, or no orjson) is told to do it too.
_INT_MIN, _UINT_MAX = -(2 ** 63), 2 ** 64 - 1


def _parse_float(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise NumberOverflow(token)
    return value


def _parse_int(token: str) -> Any:
    if len(token) <= 20:  # cheap bound first: int() of thousands of digits is slow and limited
        value = int(token)
        if _INT_MIN <= value <= _UINT_MAX:
            return value
    return _parse_float(token)


def _refuse_constant(token: str) -> Any:
    raise ValueError("not JSON: " + token)  # NaN / Infinity are no JSON literals for nlohmann either


def loads(data: bytes) -> Any:
    """Parse JSON bytes as the real broker does; raises ``ValueError`` on malformed input
    (:class:`NumberOverflow` for a number beyond a double)."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass  # the stdlib decides, and names the number that overflowed
    return json.loads(data.decode("utf-8"), parse_float=_parse_float, parse_int=_parse_int,
                      parse_constant=_refuse_constant)


_rand = random.Random()
_id_lock = threading.Lock()
_last_ms = 0
_counter = 0


def int_param(v: Optional[str], default: int) -> int:
    """A query parameter as an int (``default`` when absent or not a number)."""
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        return default


def paging(params: Dict[str, str], default_limit: int) -> Tuple[int, int]:
    """``(limit, offset)`` of a listing route's query parameters (offset defaults to 0)."""
    return int_param(params.get("limit"), default_limit), int_param(params.get("offset"), 0)


def uuid7() -> str:
    """A UUIDv7 string, monotonic within this process (12-bit counter inside one millisecond)."""
    global _last_ms, _counter
    with _id_lock:
        ms = int(time.time() * 1000)
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:
                ms += 1
                _counter = 0
        else:
            _counter = 0
        _last_ms = ms
        counter = _counter
    rb = _rand.getrandbits(62) | (0b10 << 62)
    h = "%012x%01x%03x%016x" % (ms, 7, counter, rb)
    return "%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def uuid4() -> str:
    """A random UUIDv4 string."""
    return str(uuid.UUID(int=_rand.getrandbits(128), version=4))


def is_uuid(value: Any) -> bool:
    """True when ``value`` is a string PostgreSQL would accept as a uuid."""
    if not isinstance(value, str):
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


_clock_lock = threading.Lock()
_last_us = 0


def now_us() -> int:
    """Current UTC time in integer microseconds since the epoch, strictly increasing."""
    global _last_us
    t = int(time.time() * 1_000_000)
    with _clock_lock:
        if t <= _last_us:
            t = _last_us + 1
        _last_us = t
    return t


_sec_cache: Dict[int, str] = {}


def _fmt_sec(sec: int) -> str:
    s = _sec_cache.get(sec)
    if s is None:
        if len(_sec_cache) > 4096:
            _sec_cache.clear()
        s = datetime.fromtimestamp(sec, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        _sec_cache[sec] = s
    return s


def fmt_us(us: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (microseconds) for epoch microseconds ``us``."""
    sec, frac = divmod(us, 1_000_000)
    return "%s.%06dZ" % (_fmt_sec(sec), frac)


def fmt_ms(us: Optional[int]) -> Optional[str]:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` (milliseconds) for epoch microseconds ``us``; None stays None."""
    if us is None:
        return None
    sec, frac = divmod(us, 1_000_000)
    return "%s.%03dZ" % (_fmt_sec(sec), frac // 1000)


def parse_ts_us(value: Any) -> Optional[int]:
    """Parse an ISO-8601 timestamp into epoch microseconds (naive = UTC); None if unparsable."""
    if not isinstance(value, str) or not value:
        return None
    s = value.strip()
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


# --------------------------------------------------------------------------- malformed JSON text
# The real broker parses bodies with nlohmann::json and returns its exception text. We imitate
# the common cases: the position (line/column of the last character read) and the reason.

_PREFIX = "[json.exception.parse_error.101] parse error at line %d, column %d: syntax error while parsing %s - "


def _position(text: str, upto: int) -> Tuple[int, int]:
    line = text.count("\n", 0, upto) + 1
    last_nl = text.rfind("\n", 0, upto)
    return line, upto - (last_nl + 1)


def json_error_text(raw: bytes) -> str:
    """An nlohmann-style message for a body that failed to parse (best effort)."""
    text = raw.decode("utf-8", "replace")
    n = len(text)
    i = 0
    stack = []  # expected structure, for the "expected" hint
    expect_value = True

    def err(pos_end: int, detail: str) -> str:
        line, col = _position(text, pos_end)
        # nlohmann names what it was parsing: a key, the ':' after it, or a value
        what = ("object key" if detail.endswith("expected string literal")
                else "object separator" if detail.endswith("expected ':'") else "value")
        return _PREFIX % (line, col, what) + detail

    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            if expect_value:
                return err(n + 1 if n else 1, "unexpected end of input; expected '[', '{', or a literal")
            return err(n + 1, "unexpected end of input")
        c = text[i]
        if expect_value:
            if c in "{[":
                stack.append(c)
                i += 1
                j = i
                while j < n and text[j] in " \t\r\n":
                    j += 1
                if j < n and text[j] == ("}" if c == "{" else "]"):
                    stack.pop()
                    i = j + 1
                    expect_value = False
                    continue
                if c == "{":
                    if j >= n:
                        return err(n + 1, "unexpected end of input; expected string literal")
                    if text[j] != '"':
                        return err(j + 1, "invalid literal; last read: '%s'" % text[i:j + 1].strip())
                    # parse the key string then expect ':'
                    k = text.find('"', j + 1)
                    while k != -1 and text[k - 1] == "\\":
                        k = text.find('"', k + 1)
                    if k == -1:
                        return err(n + 1, "invalid string: missing closing quote; last read: '%s'" % text[j:])
                    i = k + 1
                    while i < n and text[i] in " \t\r\n":
                        i += 1
                    if i >= n:
                        return err(n + 1, "unexpected end of input; expected ':'")
                    if text[i] != ":":
                        return err(i + 1, "unexpected '%s'; expected ':'" % text[i])
                    i += 1
                continue
            if c == '"':
                k = i + 1
                while k < n and text[k] != '"':
                    k += 2 if text[k] == "\\" else 1
                if k >= n:
                    return err(n + 1, "invalid string: missing closing quote; last read: '%s'" % text[i:])
                i = k + 1
                expect_value = False
                continue
            for lit in ("true", "false", "null"):
                if c == lit[0]:
                    m = 0
                    while m < len(lit) and i + m < n and text[i + m] == lit[m]:
                        m += 1
                    if m == len(lit):
                        i += m
                        expect_value = False
                        break
                    last = text[i:i + m + 1]
                    return err(i + len(last), "invalid literal; last read: '%s'" % last)
            else:
                if c in "-0123456789":
                    k = i + 1
                    while k < n and text[k] in "0123456789.eE+-":
                        k += 1
                    i = k
                    expect_value = False
                    continue
                return err(i + 1, "invalid literal; last read: '%s'" % c)
            continue
        # after a value
        if not stack:
            return err(i + 1, "unexpected '%s'; expected end of input" % c)
        top = stack[-1]
        if c == ",":
            i += 1
            expect_value = True
            if top == "{":
                while i < n and text[i] in " \t\r\n":
                    i += 1
                if i >= n:
                    return err(n + 1, "unexpected end of input; expected string literal")
                if text[i] != '"':
                    return err(i + 1, "invalid literal; last read: '%s'" % text[i])
                k = text.find('"', i + 1)
                if k == -1:
                    return err(n + 1, "invalid string: missing closing quote; last read: '%s'" % text[i:])
                i = k + 1
                while i < n and text[i] in " \t\r\n":
                    i += 1
                if i >= n:
                    return err(n + 1, "unexpected end of input; expected ':'")
                if text[i] != ":":
                    return err(i + 1, "unexpected '%s'; expected ':'" % text[i])
                i += 1
            continue
        if (c == "}" and top == "{") or (c == "]" and top == "["):
            stack.pop()
            i += 1
            continue
        return err(i + 1, "unexpected '%s'; expected '%s'" % (c, "}" if top == "{" else "]"))
