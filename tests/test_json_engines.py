"""The two JSON engines of ``queen_sync._json`` accept and refuse the same values.

orjson is the engine wherever it installs; the stdlib engine (PyPy, free-threaded builds)
must behave the same, so that a payload tested on CPython does not change meaning or start
failing elsewhere. The stdlib engine is forced in-process (a fresh copy of the module
imported with ``orjson`` hidden) and both get one table of awkward inputs: same bytes, or
the same refusal (``TypeError`` for what JSON cannot carry, ``ValueError`` for NaN / ±inf).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import importlib.util
import math
import sys
import types
import uuid
from typing import Any, Callable, Dict

import pytest

import queen_sync
from queen_sync import _json, _pycodec, codec
from queen_sync.errors import InvalidInputError, ProtocolError

orjson = pytest.importorskip("orjson")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _load_stdlib_engine() -> types.ModuleType:
    saved = sys.modules.get("orjson")
    sys.modules["orjson"] = None  # type: ignore[assignment]  # import orjson -> ImportError
    try:
        spec = importlib.util.spec_from_file_location("_queen_sync_json_stdlib_engine", _json.__file__)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if saved is None:
            del sys.modules["orjson"]
        else:
            sys.modules["orjson"] = saved
    assert mod.BACKEND == "json"
    return mod


STD = _load_stdlib_engine()
ORJ = _json if _json.BACKEND == "orjson" else None


class Color(enum.Enum):
    RED = 1
    NAME = "n"
    NESTED = {"k": [1, 2]}
    BAD_KEY = {1: 2}
    BYTES = b"x"


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str, enum.Enum):
    A = "a"


class Text(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


class Map(dict):
    pass


class Items(list):
    pass


class Pair(tuple):
    pass


Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass
class Order:
    id: int
    lines: list
    _secret: str = "hidden"


@dataclasses.dataclass
class Holder:
    value: Any


@dataclasses.dataclass(**({"slots": True} if sys.version_info >= (3, 10) else {}))
class Slotted:
    a: int
    _b: int = 2


class Stamp(datetime.datetime):
    pass


def nested(depth: int, kind: str = "list") -> Any:
    value: Any = 1
    for i in range(depth):
        if kind == "list":
            value = [value]
        elif kind == "dict":
            value = {"k": value}
        else:
            value = (value,) if i % 2 else {"k": value}
    return value


def cycle() -> Any:
    loop: list = [1]
    loop.append(loop)
    return loop


TZ = datetime.timezone(datetime.timedelta(hours=-3, minutes=-30))

#: name -> value. Every one goes through both engines (and both codecs); the expected
#: outcome is whatever orjson does, so the table needs no expectations of its own.
AWKWARD: Dict[str, Callable[[], Any]] = {
    "int key": lambda: {1: "a"},
    "float key": lambda: {1.5: "a"},
    "bool key": lambda: {True: "a"},
    "None key": lambda: {None: "a"},
    "tuple key": lambda: {(1, 2): "a"},
    "Enum key": lambda: {Color.RED: 1},
    "str-Enum key": lambda: {Tag.A: 1},
    "str subclass key": lambda: {Text("k"): 1},
    "2**64": lambda: 2**64,
    "2**64 - 1": lambda: 2**64 - 1,
    "-2**63": lambda: -(2**63),
    "-2**63 - 1": lambda: -(2**63) - 1,
    "huge int in list": lambda: [1, 10**30],
    "int subclass": lambda: Count(7),
    "int subclass beyond 64 bits": lambda: Count(2**70),
    "bool": lambda: [True, False, None],
    "datetime naive": lambda: datetime.datetime(2026, 12, 1, 9, 30, 5),
    "datetime micro": lambda: datetime.datetime(2026, 12, 1, 9, 30, 5, 42),
    "datetime utc": lambda: datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.timezone.utc),
    "datetime -03:30": lambda: datetime.datetime(2026, 12, 1, 9, 30, 0, 7, tzinfo=TZ),
    "datetime year 1": lambda: datetime.datetime.min,
    "datetime subclass": lambda: Stamp(2026, 1, 1),
    "date": lambda: datetime.date(2026, 12, 1),
    "time": lambda: datetime.time(9, 30, 5, 1),
    "time with tz": lambda: datetime.time(9, 30, tzinfo=datetime.timezone.utc),
    "timedelta": lambda: datetime.timedelta(seconds=1),
    "UUID": lambda: uuid.UUID("7d444840-9dc0-11d1-b245-5ffdce74fad2"),
    "dataclass": lambda: Order(1, [{"sku": "a"}]),
    "dataclass with extra attribute": lambda: _with_attr(Order(2, []), "note", "x"),
    "dataclass holding a set": lambda: Holder({1}),
    "dataclass holding an int key": lambda: Holder({1: 2}),
    "slots dataclass": lambda: Slotted(1),
    "dataclass class": lambda: Order,
    "Enum": lambda: [Color.RED, Color.NAME, Color.NESTED],
    "Enum with bad value": lambda: Color.BAD_KEY,
    "Enum with bytes value": lambda: Color.BYTES,
    "IntEnum": lambda: Level.HIGH,
    "str Enum": lambda: Tag.A,
    "str subclass": lambda: Text("hello"),
    "dict subclass": lambda: Map(a=1),
    "list subclass": lambda: Items([1, 2]),
    "OrderedDict": lambda: collections.OrderedDict(b=1, a=2),
    "tuple": lambda: (1, "a", None),
    "tuple subclass": lambda: Pair((1,)),
    "namedtuple": lambda: Point(1, 2),
    "bytes": lambda: b"abc",
    "bytearray": lambda: bytearray(b"abc"),
    "memoryview": lambda: memoryview(b"abc"),
    "set": lambda: {1, 2},
    "frozenset": lambda: frozenset({1}),
    "Decimal": lambda: decimal.Decimal("1.5"),
    "complex": lambda: 1j,
    "object": lambda: object(),
    "range": lambda: range(3),
    "dict keys view": lambda: {"a": 1}.keys(),
    "generator": lambda: (i for i in range(2)),
    "float subclass": lambda: Ratio(1.5),
    "-0.0": lambda: -0.0,
    "0.0": lambda: 0.0,
    "huge float": lambda: 1.7976931348623157e308,
    "tiny float": lambda: 5e-324,
    "1e16": lambda: 1e16,
    "1e15": lambda: 1e15,
    "1e-5": lambda: [1e-5, -1.5e-5, 9.999000000000001e-05],
    "1e-7": lambda: [1e-7, 1.5e-9, 1e-10, 0.0001],
    "floats": lambda: [0.1, 1.5, 123456789.0, 2.5e-300, 1e22],
    "NaN": lambda: float("nan"),
    "+Infinity": lambda: {"a": float("inf")},
    "-Infinity in a dataclass": lambda: Holder([float("-inf")]),
    "NaN in an Enum": lambda: _nan_enum(),
    "NaN in a tuple": lambda: (1, float("nan")),
    "lone surrogate": lambda: "a\ud800b",
    "lone surrogate key": lambda: {"\udfff": 1},
    "control characters": lambda: "\x01\x1f\x7f\b\f\n\r\t\"\\/\u2028\u2029",  # U+0000: test_codec.py
    "non-ASCII": lambda: {"é": "日本\U0001F600"},
    "empty containers": lambda: [{}, [], ""],
    "depth 254 lists": lambda: nested(254),
    "depth 255 lists": lambda: nested(255),
    "depth 254 dicts": lambda: nested(254, "dict"),
    "depth 255 dicts": lambda: nested(255, "dict"),
    # no deep *tuples*: orjson 3.13 does not count them toward its limit (300 nested tuples
    # pass, ~3000 corrupt its heap and abort the process); the stdlib engine counts them
    "depth 10000": lambda: nested(10000),
    "cycle": cycle,
}


def _with_attr(obj: Any, name: str, value: Any) -> Any:
    setattr(obj, name, value)
    return obj


def _nan_enum() -> Any:
    class Odd(enum.Enum):
        X = float("nan")

    return Odd.X


def outcome(dumps: Callable[..., bytes], value: Any, *args: Any) -> Any:
    try:
        return ("ok", dumps(value, *args))
    except ValueError:  # NonFiniteFloatError (before TypeError: orjson's error is both)
        return ("raised", ValueError)
    except TypeError:
        return ("raised", TypeError)


def orjson_outcome(value: Any, nan_as_null: bool) -> Any:
    """What orjson itself does, with NaN / inf refused unless ``nan_as_null``."""
    got = outcome(orjson.dumps, value)
    if got[0] == "ok" and not nan_as_null and _json._has_non_finite(value):
        return ("raised", ValueError)
    return got


@pytest.mark.parametrize("nan_as_null", [False, True], ids=["strict", "nan_as_null"])
@pytest.mark.parametrize("name", sorted(AWKWARD))
def test_both_engines_accept_and_refuse_alike(name: str, nan_as_null: bool) -> None:
    expected = orjson_outcome(AWKWARD[name](), nan_as_null)
    assert outcome(STD.dumps, AWKWARD[name](), nan_as_null) == expected
    if ORJ is not None:
        assert outcome(ORJ.dumps, AWKWARD[name](), nan_as_null) == expected


@pytest.mark.parametrize("name", sorted(AWKWARD))
def test_codecs_turn_refusals_into_invalid_input(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the codec (pure on the stdlib engine, and the active backend on its own
    engine) a refusal is an InvalidInputError, before anything is sent."""
    expected = orjson_outcome(AWKWARD[name](), False)
    backends = [codec.IMPL]
    for backend in backends:
        try:
            body = backend.encode_json(AWKWARD[name]())
        except InvalidInputError:
            assert expected[0] == "raised"
        else:
            assert ("ok", body) == expected
    # a push body wraps the payload in 3 more levels (the depth limit counts them)
    expected = orjson_outcome({"items": [{"queue": "q", "payload": AWKWARD[name](), "transactionId": "t"}]}, False)
    monkeypatch.setattr(_pycodec, "_json", STD)
    try:
        body = _pycodec.encode_push("q", None, [{"data": AWKWARD[name](), "transactionId": "t"}])[0]
    except InvalidInputError:
        assert expected[0] == "raised"
    else:
        assert ("ok", body) == expected


def test_table_covers_both_outcomes() -> None:
    got = {name: orjson_outcome(make(), False)[0] for name, make in AWKWARD.items()}
    assert got["int key"] == got["2**64"] == got["depth 255 lists"] == got["NaN"] == "raised"
    assert got["datetime naive"] == got["UUID"] == got["dataclass"] == got["depth 254 lists"] == "ok"


any_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e-5, 1e-6, 5e-5, 1e16, 1e15, -0.0])


@settings(max_examples=400, deadline=None)
@given(st.lists(any_floats, max_size=8))
def test_stdlib_engine_spells_floats_as_orjson(values: list) -> None:
    assert STD.dumps(values) == orjson.dumps(values)


json_text = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 + 5) | any_floats | json_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_text, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_stdlib_engine_matches_orjson_on_random_values(value: Any) -> None:
    assert outcome(STD.dumps, value) == outcome(orjson.dumps, value)


def test_non_finite_error_names_the_place() -> None:
    value = {"items": [{"payload": {"ok": 1.5}}, {"payload": {"lines": [None, {"price": math.nan}]}}]}
    for engine in filter(None, (STD, ORJ)):
        with pytest.raises(ValueError, match=r"at \$\.items\[1\]\.payload\.lines\[1\]\.price:"):
            engine.dumps(value)
    assert _json.find_non_finite({"a": [1, (2.5, -math.inf)]}) == "$.a[1][1]"
    assert _json.find_non_finite({"a": None, "b": "nan"}) is None


def test_decoding_too_deep_is_a_value_error_not_recursion() -> None:
    deep = b"[" * 100000 + b"]" * 100000
    for engine in filter(None, (STD, ORJ)):
        with pytest.raises(ValueError):
            engine.loads(deep)
        assert engine.loads(b"[" * 200 + b"1" + b"]" * 200) == nested(200)
    with pytest.raises(ValueError):
        STD.loads_fallback(deep)
    for backend in (codec.IMPL, _pycodec):
        with pytest.raises(ProtocolError):
            backend.decode_json(deep)


def test_encoding_too_deep_is_invalid_input_on_both_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = nested(10000, "dict")
    with pytest.raises(InvalidInputError):
        codec.encode_push("q", None, [{"data": deep}])
    monkeypatch.setattr(_pycodec, "_json", STD)
    with pytest.raises(InvalidInputError, match="Recursion limit reached"):
        _pycodec.encode_push("q", None, [{"data": deep}])


def test_json_backend_is_public() -> None:
    assert queen_sync.json_backend == _json.BACKEND
    assert queen_sync.json_backend in ("orjson", "json")
    assert "json_backend" in queen_sync.__all__
    assert queen_sync.json_backend == "orjson"  # orjson is importable here (see importorskip)


def _too_deep_text(engine: Any, value: Any) -> str:
    """The codec's text for ``value`` refused by ``engine`` as too deep."""
    with pytest.raises(TypeError) as info:
        engine.dumps(value)
    assert str(info.value) == "Recursion limit reached"
    return engine.encode_error_text(info.value, value)


@pytest.mark.parametrize("engine", [e for e in (ORJ, STD) if e is not None], ids=lambda e: e.BACKEND)
def test_a_too_deep_value_is_refused_with_the_path_where_it_goes_too_deep(engine: Any) -> None:
    body = {"items": [{"payload": {"flat": 1}}, {"payload": {"a": [{"k": nested(400, "dict")}]}}]}
    text = _too_deep_text(engine, body)
    # the 255th level is refused: its path has 254 segments, the first 12 shown
    assert text == ("Recursion limit reached: nested deeper than 254 levels at "
                    "$.items[1].payload.a[0].k.k.k.k.k.k.k... (and 242 more levels)")
    assert _too_deep_text(engine, cycle()).endswith("at $[1][1][1][1][1][1][1][1][1][1][1][1]... (and 242 more levels)")
    # an Enum is its value (no level of its own); a dataclass instance is a level
    assert engine.find_too_deep({"c": Color.NESTED, "d": nested(253)}) is None
    assert engine.find_too_deep(Holder(nested(254))) == "$.value[0][0][0][0][0][0][0][0][0][0][0]... (and 242 more levels)"
    assert engine.find_too_deep(nested(254)) is None and engine.find_too_deep(nested(255)) is not None


def test_tuples_are_levels_for_the_stdlib_engine_only() -> None:
    deep_tuples = {"t": [nested(300, "mixed")]}
    assert STD.find_too_deep(deep_tuples) is not None
    assert _too_deep_text(STD, deep_tuples).startswith("Recursion limit reached: nested deeper than 254 levels at $.t[0][0].k[0].k[0]")
    assert _json.find_too_deep(deep_tuples, count_tuples=False) is None  # orjson: 150 levels


def test_other_encode_refusals_keep_their_text() -> None:
    with pytest.raises(TypeError) as info:
        STD.dumps({"a": {1, 2}})
    assert STD.encode_error_text(info.value, {"a": {1, 2}}) == str(info.value)
    assert _json.encode_error_text(ValueError("NaN / Infinity float at $.x"), {}) == "NaN / Infinity float at $.x"


def test_a_too_deep_push_payload_is_refused_naming_where_on_both_codecs(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = nested(300, "dict")
    for backend in (codec.IMPL, _pycodec):
        with pytest.raises(InvalidInputError, match=r"at \$\.items\[1\]\.payload\.k\.k"):
            backend.encode_push("q", None, [{"data": 1}, {"data": deep}])
    monkeypatch.setattr(_pycodec, "_json", STD)
    with pytest.raises(InvalidInputError, match=r"at \$\.items\[1\]\.payload\.k\.k"):
        _pycodec.encode_push("q", None, [{"data": 1}, {"data": deep}])


def test_both_engines_write_a_nul_character_as_an_escape() -> None:
    """The engines write U+0000 as ``\\u0000`` alike (the codec then refuses such a body,
    tests/test_codec.py), and ``has_nul_escape`` tells it from the text ``\\u0000``."""
    value = {"k\x00": ["\x00", "a\\u0000"]}
    body = STD.dumps(value)
    assert body == b'{"k\\u0000":["\\u0000","a\\\\u0000"]}'
    if _json.BACKEND == "orjson":
        assert _json.raw_dumps(value) == body
    assert _json.has_nul_escape(body)
    assert not _json.has_nul_escape(STD.dumps({"k": "a\\u0000"}))


@pytest.mark.parametrize("engine", [e for e in (ORJ, STD) if e is not None], ids=lambda e: e.BACKEND)
def test_an_int_beyond_64_bits_is_refused_naming_where_it_sits(engine: Any) -> None:
    body = {"items": [{"payload": {"ok": 2**64 - 1}}, {"payload": {"a": [-(2**63), -(2**63) - 1]}}]}
    with pytest.raises(TypeError) as info:
        engine.dumps(body)
    assert str(info.value) == "Integer exceeds 64-bit range"
    assert engine.encode_error_text(info.value, body) == (
        "Integer exceeds 64-bit range at $.items[1].payload.a[1]: the broker reads JSON integers from -2**63 "
        "to 2**64 - 1 exactly (send this one as a str)"
    )
    assert engine.find_int_out_of_range(body) == "$.items[1].payload.a[1]"
    assert engine.find_int_out_of_range({"b": True, "n": 2**64 - 1}) is None  # bools are no ints here
