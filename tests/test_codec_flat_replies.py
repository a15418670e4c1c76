"""The compiled decode of flat-object list replies (push results, ack verdicts, lease
extensions: ``_speedups/_replies.pxi``) gives exactly what ``orjson.loads`` gives: the same
dicts, keys in the same order, values of the same types, or the same exception when the
body is bad. Its shortcuts (each dict a copy of the one before, a value equal to the one
before shared) must never show: the suite compares typed items in order, over bodies
serialised every way a broker could (compact, spaced, indented, ASCII-escaped) and over
cut and corrupted ones."""

from __future__ import annotations

import json
from typing import Any, List, Tuple

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from _helpers import codec_twins, need_compiled  # noqa: E402

PY, CY = codec_twins()

DECODERS = ("decode_push_result", "decode_ack_result", "decode_renew_result")
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _need_compiled() -> None:
    need_compiled(CY)


def typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type and every dict as its ordered items:
    ``True == 1`` and ``{"a": 1, "b": 2} == {"b": 2, "a": 1}`` must not pass for equal."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    return (type(value).__name__, value)


def outcome(fn: Any, *args: Any) -> Tuple[str, Any]:
    try:
        return ("ok", typed(fn(*args)))
    except Exception as exc:  # noqa: BLE001 - the class and text are what is compared
        return ("raised", (type(exc), str(exc)))


def assert_same(body: Any) -> None:
    for name in DECODERS:
        assert outcome(getattr(CY, name), body) == outcome(getattr(PY, name), body), (name, body)
    for count in (0, 1, 3):
        assert outcome(CY.decode_push_reply, body, count) == outcome(PY.decode_push_reply, body, count), body


# --------------------------------------------------------------------------- strategies

text = st.text(st.characters(codec="utf-8"), max_size=10) | st.text(max_size=5) | st.sampled_from(
    ["queued", "status", "index", "é", 'a"b', "a\\b", "\x00", "\x1f", "\u2028", "\U0001f600"]
)
ints = (st.integers(min_value=-(10**18), max_value=10**18) | st.integers(min_value=-(2**64), max_value=2**65)
        | st.sampled_from([0, -1, 10**18 - 1, 10**18, -(10**18) + 1, 2**63 - 1, 2**63, 2**64]))
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0, 1.0, 1e300])
scalars = st.none() | st.booleans() | ints | floats | text
nested = st.lists(scalars, max_size=2) | st.dictionaries(text, scalars, max_size=2)


@st.composite
def flat_lists(draw: Any) -> List[Any]:
    """Lists of objects that mostly repeat one shape (the same keys; values now the same
    as before, now new), with a different shape or a nested value now and then."""
    keys = draw(st.lists(text, max_size=6))
    base = [draw(scalars) for _ in keys]
    out: List[Any] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            out.append(draw(st.dictionaries(text, scalars | nested, max_size=4)))
        elif kind == 1 and keys:
            out.append({k: v for k, v in reversed(list(zip(keys, base)))})
        else:
            out.append({k: (b if draw(st.booleans()) else draw(scalars)) for k, b in zip(keys, base)})
    return out


def serialisations(doc: Any) -> List[bytes]:
    """``doc`` as a broker could send it; a doc orjson refuses (a surrogate, an int beyond
    64 bits) is still written, by the stdlib, as bytes that may not be UTF-8."""
    out = []
    for kwargs in ({"separators": (",", ":"), "ensure_ascii": False}, {"ensure_ascii": False},
                   {"indent": 1, "ensure_ascii": False}, {"separators": (",", ":")}):
        out.append(json.dumps(doc, **kwargs).encode("utf-8", "surrogatepass"))
    return out


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(doc=flat_lists())
def test_flat_lists_decode_as_orjson_does(doc: List[Any]) -> None:
    for body in serialisations(doc):
        assert_same(body)


@SETTINGS
@given(doc=flat_lists(), at=st.integers(min_value=0, max_value=10**6), byte=st.integers(0, 255))
def test_cut_and_corrupted_bodies_fail_or_decode_alike(doc: List[Any], at: int, byte: int) -> None:
    body = serialisations(doc)[0]
    k = at % (len(body) + 1)
    assert_same(body[:k])
    if body:
        assert_same(body[:k % len(body)] + bytes([byte]) + body[k % len(body) + 1:])


@pytest.mark.parametrize(
    "body",
    [
        b"[]", b" [ ] ", b"[{}]", b"[{},{}]", b"[{}, {\"a\":1}]", b'[{"a":1},{}]', b"[", b"]", b"[{]", b"[{}", b"[{},]",
        b'[{"a":1,"a":2}]', b'[{"a":1,"b":2},{"a":1,"a":2}]', b'[{"a":1},{"a":1,"a":2}]',
        b'[{"a":-0}]', b'[{"a":01}]', b'[{"a":-}]', b'[{"a":1.5}]', b'[{"a":1e3}]', b'[{"a":1E3}]',
        b'[{"a":999999999999999999}]', b'[{"a":1000000000000000000}]', b'[{"a":-999999999999999999}]',
        b'[{"a":"\\u00e9"}]', b'[{"a":"\xc3\xa9"}]', b'[{"\xc3\xa9":1},{"\xc3\xa9":2}]', b'[{"a":"\xff"}]',
        b'[{"a":"\xed\xa0\x80"}]', b'[{"a":"\x01"}]', b'[{"a":"\x7f"}]', b'[{"a":"x"}]x', b'[{"a":"x"}] ',
        b'[{"a":tru}]', b'[{"a":true}]', b'[{"a":false},{"a":true}]', b'[{"a":nul}]', b'[{"a":null,"b":nullx}]',
        b'[{"a" :\t1 ,\n"b"\r: "q"}]', b'[{"a":[1]}]', b'[{"a":{}}]', b"[1]", b'["a"]', b"[null]", b'[{"a":"x"},1]',
        b'{"error":"boom"}', b'[{"a":"x","b":"y"},{"a":"x","b":"yz"},{"a":"xy","b":"y"},{"a":"x","b":"y"}]',
        b'[{"a":"12345678"},{"a":"123456789"},{"a":"1234567"},{"a":"12345678"}]',
        b'\xef\xbb\xbf[{"a":1}]', b"", b" ",
        # a sign then a leading zero; a value the item before held as a non-str, now as text
        b'[{"a":-01}]', b'[{"a":-00}]', b'[{"a":1},{"a":"1"}]', b'[{"a":null},{"a":"null"}]', b'[{"a":true},{"a":1}]',
        # the shape changes: keys reordered, one fewer, one more; spaced after a key met before
        b'[{"a":1,"b":2},{"b":2,"a":1}]', b'[{"a":1,"b":2},{"a":1}]', b'[{"a":1},{"a":1,"b":2}]',
        b'[{"a":"x"},{"a" :"x"}]', b'[{"a":"x"},{"a":"x', b'[{"a":"x"},{"a":"x"', b'[{"a":1}]\x00', b'[{"a":true }]',
        # what must stop the eight-byte scan, first and last in a word with more text after it
        b'[{"a":"\x1f2345678901234567"}]', b'[{"a":"1234567\x1f901234567"}]', b'[{"a":"\\n345678901234567"}]',
        b'[{"a":"1234567\\n01234567"}]', b'[{"a":"\xc3\xa92345678901234567"}]', b'[{"a":"1234567\xff901234567"}]',
        b'[{"a":"\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f"}]', b'[{"1234567":"1"}]', b'[{"a":"12345678"}]',
        # the key table's limit: 32 keys decoded here, 33 left to orjson, also after a 32-key item
        b"[{" + b",".join(b'"k%d":%d' % (i, i) for i in range(32)) + b"}]",
        b"[{" + b",".join(b'"k%d":%d' % (i, i) for i in range(33)) + b"}]",
        b"[{" + b",".join(b'"k%d":%d' % (i, i) for i in range(32)) + b"},{"
        + b",".join(b'"k%d":%d' % (i, i) for i in range(33)) + b"}]",
    ],
)
def test_edge_bodies_decode_as_orjson_does(body: bytes) -> None:
    assert_same(body)


@pytest.mark.parametrize("kind", [bytearray, memoryview, lambda b: b.decode("utf-8"), type("Body", (bytes,), {})])
def test_bodies_not_exactly_bytes_decode_as_the_pure_codec_does(kind: Any) -> None:
    """Only an exact ``bytes`` takes the compiled shortcut; the others go the generic way."""
    for body in (b'[{"a":1,"b":"x"},{"a":2,"b":"x"}]', b"[]", b'[{"a":1}]x', b""):
        assert_same(kind(body))


@pytest.mark.parametrize("layout", [{"separators": (",", ":")}, {}, {"indent": 2}])
def test_a_push_reply_is_decoded_with_shared_values_but_equal_dicts(layout: Any) -> None:
    """The shape a push reply has, compact or with blanks: equal to orjson's, and (what
    makes it cheaper) the repeated values are one object, the dicts distinct objects."""
    import orjson

    body = json.dumps(
        [
            {"index": i, "message_id": "m-%d" % i, "partition_id": "p-1", "queueName": "orders",
             "status": "queued", "trace_id": None, "transaction_id": "t-%d" % i}
            for i in range(5)
        ],
        **layout,
    ).encode()
    got, failed = CY.decode_push_reply(body, 5)
    assert typed(got) == typed(orjson.loads(body)) and failed == 0
    assert len({id(r) for r in got}) == 5
    assert len({id(r["queueName"]) for r in got}) == 1
    got[0]["status"] = "changed"  # each dict is the caller's own
    assert [r["status"] for r in got] == ["changed"] + ["queued"] * 4
