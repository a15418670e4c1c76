"""The JSON ground layer: orjson where it is installed, else the stdlib ``json`` with orjson's rules.

``BACKEND`` (exported as ``queen_sync.json_backend``) is ``"orjson"`` or ``"json"``. orjson
is a dependency on the interpreters it has wheels for; elsewhere (PyPy, free-threaded
builds) the stdlib engine is used, and it **accepts and refuses exactly what orjson does**
(``tests/test_json_engines.py`` runs one table of awkward inputs through both):

- accepted: ``dict`` (keys exactly ``str``), ``list``, ``tuple``, ``str`` / ``int`` /
  ``dict`` / ``list`` subclasses, ints in ``[-2**63, 2**64 - 1]``, ``bool``, ``None``,
  finite ``float``, ``Enum`` (as its value), ``datetime`` / ``date`` / ``time`` (RFC 3339,
  a ``time`` without tzinfo), ``UUID`` (as its string), dataclass instances (as objects);
  strings are written as UTF-8 with orjson's escapes, floats with orjson's spelling
  (``0.00001``, ``1e-7``, ``1e+16``).
- refused with ``TypeError`` (orjson's ``JSONEncodeError`` is one): other key types (int,
  Enum, str subclass...), ints beyond 64 bits, ``bytes``, ``set``, ``Decimal``, float /
  tuple / datetime subclasses, lone surrogates, and anything nested deeper than
  :data:`MAX_DEPTH` (254) containers (which also stops cycles). One known difference:
  orjson 3.13 does not count *tuples* toward its depth limit (and a few thousand nested
  tuples corrupt its heap); the stdlib engine counts them. After such a refusal,
  :func:`encode_error_text` names where the value goes too deep (:func:`find_too_deep`),
  or where an int beyond 64 bits sits (:func:`find_int_out_of_range`); only then is the
  value walked.

**Non-finite floats** (NaN, ±Infinity, which JSON cannot represent) raise
:class:`NonFiniteFloatError` (a ``ValueError``) naming where the value sits, unless the
caller passes ``nan_as_null=True``, which writes them as ``null``. With orjson the check
costs one ``b"null" in body`` scan on the success path, plus a walk of the value only when
the body holds a ``null``.

**Decoding numbers beyond a double** (``1e400``, a 401-digit integer): orjson refuses the
whole body. The codec then calls :func:`loads_fallback` (stdlib ``json``: big integers
exact, ``1e400`` as ``inf``) before it gives up with ``ProtocolError``, so one such payload
cannot stop every pop. The fallback runs only after ``loads`` failed. Decoding refuses
(``ValueError``) bodies nested deeper than the engine handles (orjson: 1024 levels; the
stdlib engine: the interpreter's recursion limit, about 990) instead of ``RecursionError``.
"""

from __future__ import annotations

import dataclasses as _dataclasses
import datetime as _dt
import enum as _enum
import json as _stdjson
import math as _math
import uuid as _uuid
from typing import Any, Callable, List, Optional, Type

__all__ = [
    "dumps",
    "loads",
    "loads_fallback",
    "find_non_finite",
    "find_too_deep",
    "find_int_out_of_range",
    "encode_error_text",
    "DecodeError",
    "EncodeError",
    "NonFiniteFloatError",
    "BACKEND",
    "MAX_DEPTH",
]

#: orjson refuses containers nested deeper than this (``"Recursion limit reached"``).
MAX_DEPTH = 254

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1

loads: Callable[[Any], Any]


class NonFiniteFloatError(ValueError):
    """A float NaN / ±Infinity in a value to encode (JSON has no spelling for it)."""


# --------------------------------------------------------------------------- non-finite floats


def _dataclass_items(obj: Any) -> List[Any]:
    """The (name, value) pairs orjson writes for a dataclass instance: the instance
    ``__dict__`` when it has one, else the declared fields; names starting with ``_`` skipped."""
    try:
        attrs = obj.__dict__
    except AttributeError:
        return [(f.name, getattr(obj, f.name)) for f in _dataclasses.fields(obj) if not f.name.startswith("_")]
    return [(k, v) for k, v in attrs.items() if not (isinstance(k, str) and k.startswith("_"))]


def _is_dataclass_instance(obj: Any) -> bool:
    return hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type)


def _find(obj: Any, hit: Callable[[Any], bool]) -> Optional[str]:
    """The path (``$`` = ``obj``) of the first value or dict key for which ``hit`` is true, in
    what the encoder would write: dict keys and values, list / tuple items, dataclass fields,
    Enum values; stops at :data:`MAX_DEPTH` (deeper values are refused by the encoder anyway)."""
    stack = [(obj, "$", 0)]
    while stack:
        o, path, depth = stack.pop()
        if hit(o):
            return path
        if depth >= MAX_DEPTH:
            continue
        if isinstance(o, dict):
            for k, v in reversed(list(o.items())):
                named = isinstance(k, str) and not hit(k)
                kp = "%s.%s" % (path, k) if named else "%s[%r]" % (path, k)
                if isinstance(k, str) and not named:
                    return kp
                stack.append((v, kp, depth + 1))
        elif isinstance(o, (list, tuple)):
            for i in range(len(o) - 1, -1, -1):
                stack.append((o[i], "%s[%d]" % (path, i), depth + 1))
        elif isinstance(o, _enum.Enum):
            stack.append((o.value, path, depth))
        elif _is_dataclass_instance(o):
            for k, v in reversed(_dataclass_items(o)):
                stack.append((v, "%s.%s" % (path, k), depth + 1))
    return None


def _is_non_finite(o: Any) -> bool:
    return type(o) is float and not _math.isfinite(o)


def find_non_finite(obj: Any) -> Optional[str]:
    """Where the first NaN / ±Infinity float in ``obj`` sits, as a path such as
    ``$.items[3].payload.total`` (``$`` = ``obj``), or ``None`` when there is none.
    Both codec backends build their error message with it."""
    return _find(obj, _is_non_finite)


# --------------------------------------------------------------------------- NUL characters


def has_nul_escape(body: bytes) -> bool:
    """True when ``body`` (compact JSON as either engine writes it) holds an escaped U+0000
    (``\\u0000`` whose backslash is not itself escaped). Both engines escape every control
    character, so this is the only way a NUL reaches the wire."""
    start = 0
    while True:
        i = body.find(b"\\u0000", start)
        if i < 0:
            return False
        run = 1
        while i - run >= 0 and body[i - run] == 0x5C:  # backslashes before it pair up
            run += 1
        if run % 2:
            return True
        start = i + 1


def _holds_nul(o: Any) -> bool:
    return isinstance(o, str) and "\x00" in o


def find_nul(obj: Any) -> Optional[str]:
    """Where the first string holding U+0000 sits in ``obj`` (a value or a dict key), as a
    path like :func:`find_non_finite`'s, or ``None``."""
    return _find(obj, _holds_nul)


def nul_error_text(obj: Any) -> str:
    """The refusal text for ``obj``, which holds a U+0000 character (see :func:`find_nul`)."""
    return (
        "NUL character (U+0000) at %s: the broker stores payloads in PostgreSQL, which cannot hold it "
        "(the whole request would fail there); remove or replace it" % (find_nul(obj) or "$")
    )


_SCALARS = (str, int, bool, type(None))
_isfinite = _math.isfinite


def _has_non_finite(obj: Any, depth: int = 0) -> bool:
    """Fast form of :func:`find_non_finite` (no paths): True when ``obj`` holds a NaN / ±inf."""
    t = type(obj)
    if t is float:
        return not _isfinite(obj)
    if t in _SCALARS or depth >= MAX_DEPTH:
        return False
    if t is dict or isinstance(obj, dict):
        values: Any = obj.values()
    elif t is list or t is tuple or isinstance(obj, list):
        values = obj
    elif isinstance(obj, _enum.Enum):
        return _has_non_finite(obj.value, depth)
    elif _is_dataclass_instance(obj):
        values = [v for _, v in _dataclass_items(obj)]
    else:
        return False
    for v in values:  # scalars inline: a call per container only
        tv = type(v)
        if tv is float:
            if not _isfinite(v):
                return True
        elif tv not in _SCALARS and _has_non_finite(v, depth + 1):
            return True
    return False


def non_finite_error(obj: Any) -> NonFiniteFloatError:
    """The :class:`NonFiniteFloatError` for ``obj`` (which holds a NaN / ±inf); returned, not raised."""
    path = find_non_finite(obj) or "$"
    return NonFiniteFloatError(
        "NaN / Infinity float at %s: JSON cannot represent it (send None, or opt in to nan_as_null "
        "to have it written as null)" % path
    )


# --------------------------------------------------------------------------- too deep

#: The text both engines give a value nested deeper than MAX_DEPTH (orjson's own words).
TOO_DEEP = "Recursion limit reached"
#: The text both engines give an int outside [-2**63, 2**64 - 1] (orjson's own words).
INT_RANGE = "Integer exceeds 64-bit range"
#: Path segments shown by :func:`find_too_deep` (its path is MAX_DEPTH segments long).
_DEEP_PATH_SHOWN = 12


def find_too_deep(obj: Any, count_tuples: bool = True) -> Optional[str]:
    """Where the first container nested deeper than :data:`MAX_DEPTH` sits in ``obj``, as a
    path in :func:`find_non_finite`'s style (``$.items[0].data.k[0]``), or None when there is
    none. The path is cut after its first segments (``... (and N more levels)``): the full one
    is MAX_DEPTH segments long.

    Walks in the encoder's order and counts its levels: dicts, lists, dataclass instances and,
    with ``count_tuples`` (the stdlib engine; orjson does not count them), tuples; an Enum is
    its value. Meant for after a refusal only (it costs a walk of the value down to the limit).
    """
    stack: List[Any] = [(obj, (), 0)]
    while stack:
        o, path, depth = stack.pop()
        if isinstance(o, _enum.Enum):
            stack.append((o.value, path, depth))
            continue
        if isinstance(o, dict):
            children: List[Any] = [("." + k if isinstance(k, str) else "[%r]" % (k,), v) for k, v in o.items()]
        elif isinstance(o, list) or (count_tuples and type(o) is tuple):
            children = [("[%d]" % i, v) for i, v in enumerate(o)]
        elif type(o) is tuple:  # orjson: not a level of its own, its items sit at its depth
            stack.extend((v, path + ("[%d]" % i,), depth) for i, v in reversed(list(enumerate(o))))
            continue
        elif _is_dataclass_instance(o):
            children = [("." + k, v) for k, v in _dataclass_items(o)]
        else:
            continue
        if depth >= MAX_DEPTH:
            shown = "$" + "".join(path[:_DEEP_PATH_SHOWN])
            rest = len(path) - _DEEP_PATH_SHOWN
            return shown if rest <= 0 else "%s... (and %d more levels)" % (shown, rest)
        stack.extend((v, path + (seg,), depth + 1) for seg, v in reversed(children))
    return None


def _is_int_out_of_range(o: Any) -> bool:
    return isinstance(o, int) and not isinstance(o, bool) and not _INT_MIN <= o <= _INT_MAX


def find_int_out_of_range(obj: Any) -> Optional[str]:
    """Where the first integer outside ``[-2**63, 2**64 - 1]`` (what both engines write, and
    the broker's JSON parser reads exactly) sits in ``obj``, as a path like
    :func:`find_non_finite`'s, or ``None``."""
    return _find(obj, _is_int_out_of_range)


def encode_error_text(exc: BaseException, obj: Any) -> str:
    """The text of an encode refusal ``exc`` of ``obj``, for the codec's InvalidInputError:
    ``str(exc)``, plus where the value sits when it is nested too deeply
    (``"Recursion limit reached: nested deeper than 254 levels at $.items[0].data.k..."``)
    or is an integer beyond 64 bits (``"Integer exceeds 64-bit range at $.items[0].payload.n:
    ..."``, the wording of the NaN refusal). Call it only after the encoder refused (the walk
    is not free); the success path costs nothing."""
    text = str(exc)
    if text == INT_RANGE:
        where = find_int_out_of_range(obj)
        if where is None:
            return text
        return (
            "%s at %s: the broker reads JSON integers from -2**63 to 2**64 - 1 exactly (send this one as a "
            "str)" % (text, where)
        )
    if text != TOO_DEEP:
        return text
    path = find_too_deep(obj, count_tuples=BACKEND != "orjson")  # the engine of this module refused it
    if path is None:
        return text
    return "%s: nested deeper than %d levels at %s" % (text, MAX_DEPTH, path)


# --------------------------------------------------------------------------- stdlib engine: encode

_encode_str = _stdjson.encoder.encode_basestring  # C-accelerated; escapes like orjson (no ensure_ascii)


def _float_text(x: float) -> str:
    """``x`` (finite) spelled as orjson spells it: ``repr`` except for negative exponents,
    where orjson writes ``1e-7`` (not ``1e-07``) and expands exponent -5 (``0.00001``)."""
    r = repr(x)
    if "e-0" not in r:
        return r
    mantissa, _, exp = r.partition("e-0")
    if exp != "5":
        return mantissa + "e-" + exp
    sign = ""
    if mantissa.startswith("-"):
        sign, mantissa = "-", mantissa[1:]
    return sign + "0.0000" + mantissa.replace(".", "")


def _tz_text(offset: Optional[_dt.timedelta]) -> str:
    if offset is None:
        return ""
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, minutes = divmod(abs(minutes), 60)
    return "%s%02d:%02d" % (sign, hours, minutes)


class _Encoder:
    """One encode call of the stdlib engine: a recursive walk appending text pieces."""

    __slots__ = ("out", "nan_as_null")

    def __init__(self, nan_as_null: bool) -> None:
        self.out: List[str] = []
        self.nan_as_null = nan_as_null

    def value(self, o: Any, depth: int) -> None:
        out = self.out
        t = type(o)
        if t is str:
            out.append(_encode_str(o))
        elif o is None:
            out.append("null")
        elif o is True:
            out.append("true")
        elif o is False:
            out.append("false")
        elif t is int:
            if not _INT_MIN <= o <= _INT_MAX:
                raise TypeError(INT_RANGE)
            out.append(int.__repr__(o))
        elif t is float:
            if o - o == 0.0:  # finite
                out.append(_float_text(o))
            elif self.nan_as_null:
                out.append("null")
            else:
                raise NonFiniteFloatError("NaN / Infinity")  # message rebuilt by dumps()
        elif t is list or t is tuple:
            self.array(o, depth)
        elif t is dict:
            self.object(o.items(), depth)
        elif t is _dt.datetime:
            off = o.utcoffset()
            out.append('"%s%s"' % (o.replace(tzinfo=None).isoformat(), _tz_text(off)))
        elif t is _dt.date:
            out.append('"%s"' % o.isoformat())
        elif t is _dt.time:
            if o.tzinfo is not None:
                raise TypeError("datetime.time must not have tzinfo set")
            out.append('"%s"' % o.isoformat())
        elif t is _uuid.UUID:
            out.append('"%s"' % o)
        elif isinstance(o, str):
            out.append(_encode_str(str.__str__(o)))
        elif isinstance(o, int) and not isinstance(o, _enum.Enum):
            self.value(int(o), depth)
        elif isinstance(o, list):
            self.array(o, depth)
        elif isinstance(o, dict):
            self.object(o.items(), depth)
        elif _is_dataclass_instance(o):
            self.object(_dataclass_items(o), depth)
        elif isinstance(o, _enum.Enum):
            self.value(o.value, depth)
        else:
            raise TypeError("Type is not JSON serializable: %s" % _type_name(t))

    def array(self, o: Any, depth: int) -> None:
        if depth >= MAX_DEPTH:
            raise TypeError("Recursion limit reached")
        out = self.out
        out.append("[")
        first = True
        for v in o:
            if not first:
                out.append(",")
            first = False
            self.value(v, depth + 1)
        out.append("]")

    def object(self, items: Any, depth: int) -> None:
        if depth >= MAX_DEPTH:
            raise TypeError("Recursion limit reached")
        out = self.out
        out.append("{")
        first = True
        for k, v in items:
            if type(k) is not str:
                raise TypeError("Dict key must be str")
            if not first:
                out.append(",")
            first = False
            out.append(_encode_str(k))
            out.append(":")
            self.value(v, depth + 1)
        out.append("}")


def _type_name(t: type) -> str:
    module = t.__module__
    return t.__qualname__ if module in ("builtins", "__main__") else "%s.%s" % (module, t.__qualname__)


def _std_dumps(obj: Any, nan_as_null: bool = False) -> bytes:
    enc = _Encoder(nan_as_null)
    try:
        enc.value(obj, 0)
    except NonFiniteFloatError:
        raise non_finite_error(obj) from None
    try:
        return "".join(enc.out).encode("utf-8")
    except UnicodeEncodeError:
        raise TypeError("str is not valid UTF-8: surrogates not allowed") from None


# --------------------------------------------------------------------------- stdlib engine: decode


def _refuse_constant(name: str) -> Any:
    raise ValueError("%s is not valid JSON" % name)


def _int_or_float(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # beyond sys.get_int_max_str_digits(): a float (inf) rather than a refusal
        return float(text)


_std_decoder = _stdjson.JSONDecoder(parse_constant=_refuse_constant)
_lenient_decoder = _stdjson.JSONDecoder(parse_int=_int_or_float, parse_constant=_refuse_constant)


def _text(body: Any) -> str:
    if isinstance(body, str):
        return body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body).decode("utf-8")  # strict UTF-8, like orjson (no UTF-16/32 sniffing)
    raise TypeError("a JSON body must be bytes, bytearray, memoryview or str, not %s" % type(body).__name__)


def _std_loads(body: Any) -> Any:
    """stdlib parse with orjson's input rules: UTF-8 only, no ``NaN`` / ``Infinity`` literals."""
    try:
        return _std_decoder.decode(_text(body))
    except RecursionError:
        raise ValueError("depth limit exceeded") from None


def loads_fallback(body: Any) -> Any:
    """Second attempt at a body ``loads`` refused (see the module docstring): stdlib ``json``
    with strict UTF-8 and no ``NaN`` / ``Infinity`` literals; integers exact (beyond
    ``sys.get_int_max_str_digits()`` digits they become a float), numbers beyond a double
    become ``inf`` / ``-inf``.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``), or nested
            too deeply.
        TypeError: ``body`` is not bytes / bytearray / memoryview / str.
    """
    try:
        return _lenient_decoder.decode(_text(body))
    except RecursionError:
        raise ValueError("depth limit exceeded") from None


# --------------------------------------------------------------------------- engine choice


def _orjson_dumps_factory(raw_dumps: Callable[[Any], bytes]) -> Callable[..., bytes]:
    def dumps(obj: Any, nan_as_null: bool = False) -> bytes:
        """``obj`` as compact UTF-8 JSON bytes (see the module docstring for what is accepted).

        Raises:
            NonFiniteFloatError: ``obj`` holds NaN / ±Infinity and ``nan_as_null`` is false.
            TypeError: a value orjson refuses (``orjson.JSONEncodeError``).
        """
        body = raw_dumps(obj)
        # orjson writes NaN / inf as null: look for them only when the body holds a null
        if not nan_as_null and b"null" in body and _has_non_finite(obj):
            raise non_finite_error(obj)
        return body

    return dumps


EncodeError: Type[Exception]
DecodeError: Type[ValueError]

try:  # pragma: no branch - which branch runs depends on the interpreter
    import orjson as _orjson

    raw_dumps: Callable[[Any], bytes] = _orjson.dumps  # orjson itself: NaN / inf written as null
    dumps = _orjson_dumps_factory(_orjson.dumps)
    loads = _orjson.loads
    # pre-encoded JSON written as is (newer orjson releases); the compiled push encoder splices with it
    Fragment: Optional[Callable[[bytes], Any]] = getattr(_orjson, "Fragment", None)
    EncodeError = _orjson.JSONEncodeError
    DecodeError = _orjson.JSONDecodeError
    BACKEND = "orjson"
except ImportError:  # pragma: no cover - exercised on interpreters without orjson (and by tests)
    raw_dumps = None  # type: ignore[assignment]
    dumps = _std_dumps
    loads = _std_loads
    Fragment = None
    EncodeError = TypeError
    DecodeError = ValueError
    BACKEND = "json"
