"""Property tests: the compiled codec and the pure-Python codec are interchangeable.

Both backends get the same random input (with the same injected ``id_source``) and must
give byte-identical bodies, equal decoded values, and the same exception class for bad
input. Skipped when the compiled codec is not built, failed instead when
``QUEEN_SYNC_REQUIRE_EXTENSIONS=1``.
"""

from __future__ import annotations

import contextlib
import enum
import types
from collections.abc import Mapping
import uuid
from typing import Any, Callable, Iterator, List, Tuple

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from _helpers import codec_twins, need_compiled  # noqa: E402
from queen_sync import _json  # noqa: E402

PY, CY = codec_twins()


@pytest.fixture(autouse=True)
def _need_compiled() -> None:
    need_compiled(CY)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def counter_ids() -> Callable[[], str]:
    state = [0]

    def next_id() -> str:
        state[0] += 1
        return "id-%d" % state[0]

    return next_id


def outcome(fn: Callable[..., Any], *args: Any) -> Tuple[str, Any]:
    """("ok", value) or ("raised", exception class)."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001 - the class is what is compared
        return ("raised", type(exc))


def same(name: str, *args_factory: Any, ids: bool = False) -> Tuple[str, Any]:
    """Call ``name`` on both backends with the same arguments (a fresh id counter each when
    ``ids``) and require equal outcomes; returns the pure one."""
    extra_py = (counter_ids(),) if ids else ()
    extra_cy = (counter_ids(),) if ids else ()
    got_py = outcome(getattr(PY, name), *args_factory, *extra_py)
    got_cy = outcome(getattr(CY, name), *args_factory, *extra_cy)
    assert got_py[0] == got_cy[0], (name, got_py, got_cy)
    if got_py[0] == "raised":
        assert got_py[1] is got_cy[1], (name, got_py, got_cy)
    else:
        assert type(got_py[1]) is type(got_cy[1])
        assert got_py[1] == got_cy[1], (name, got_py, got_cy)
    return got_py


# --------------------------------------------------------------------------- strategies

text = st.text(st.characters(codec="utf-8"), max_size=12) | st.text(max_size=6)  # second one has surrogates
ints = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.integers()  # some beyond 64 bits
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | ints | floats | text
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=25,
)


@st.composite
def deep(draw: Any) -> Any:
    """Deep nesting (orjson refuses beyond 254 levels: both backends must say so alike)."""
    depth = draw(st.integers(min_value=1, max_value=300))
    value: Any = draw(scalars)
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


GOOD_STATUSES = [True, False, "completed", "success", "failed", "retry", "dlq"]

# st.one_of picks its branches about evenly: valid branches are repeated so that most
# examples are valid and the error paths are still hit regularly.
unserialisable = st.builds(object) | st.sets(st.integers(), max_size=2)
payloads = st.one_of(json_values, json_values, json_values, json_values, deep(), st.just({}), st.none(), unserialisable)
uuids = st.uuids().map(str) | st.uuids().map(lambda u: str(u).upper())
bad_trace = text | st.integers() | uuids.map(lambda u: u + "\n")
trace_ids = st.one_of(st.none(), st.none(), uuids, uuids, uuids, bad_trace)
good_tx = st.text(min_size=1, max_size=40)
tx_ids = st.one_of(st.none(), st.none(), good_tx, good_tx, good_tx, st.just(""), st.integers(), st.binary(max_size=4))


@st.composite
def push_item(draw: Any) -> Any:
    item: dict = {}
    keys = draw(st.lists(st.sampled_from(["data", "payload", "transactionId", "traceId", "extra"]), unique=True))
    for key in keys:
        if key in ("data", "payload"):
            item[key] = draw(payloads)
        elif key == "transactionId":
            item[key] = draw(tx_ids)
        elif key == "traceId":
            item[key] = draw(trace_ids)
        else:
            item[key] = draw(json_values)
    if draw(st.integers(0, 120)) == 0:
        return draw(st.none() | st.integers() | text | st.lists(st.integers(), max_size=2))  # not a dict
    return item


safe_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)  # U+0000: refused
safe_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | safe_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(safe_text, children, max_size=4),
    max_leaves=25,
)
valid_items = st.lists(
    st.one_of(
        *(
            st.fixed_dictionaries(
                {payload_key: safe_values},
                optional={
                    "transactionId": st.none() | st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=40),
                    "traceId": st.none() | uuids,
                },
            )
            for payload_key in ("data", "payload")
        )
    ),
    max_size=12,
)
valid_messages = st.fixed_dictionaries(
    {"transactionId": st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12),
     "partitionId": st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)},
    optional={"leaseId": st.none() | st.just("") | uuids, "_status": st.sampled_from(GOOD_STATUSES),
              "_error": st.none() | safe_text | st.integers(), "data": safe_values},
)

items_lists = st.lists(push_item(), max_size=12)
items_seqs = items_lists | items_lists.map(tuple)
queues = text | st.integers()
partitions = st.none() | text


# --------------------------------------------------------------------------- encode parity


@SETTINGS
@given(queue=safe_text, partition=st.none() | safe_text, items=valid_items | valid_items.map(tuple))
def test_valid_push_bodies_identical(queue: Any, partition: Any, items: Any) -> None:
    assert same("encode_push", queue, partition, items, ids=True)[0] == "ok"
    kind, wire = same("build_push_items", queue, partition, items, ids=True)
    assert kind == "ok" and len(wire) == len(items)
    assert same("encode_push_items", wire)[0] == "ok"
    kind, (fragment, fids) = same("encode_push_fragment", queue, partition, items, ids=True)
    assert kind == "ok" and fids == [w["transactionId"] for w in wire]
    if items:
        body = same("join_push_fragments", [fragment, fragment])[1]
        assert body == PY.encode_push_items(wire + wire)
        assert same("build_tx_push_op", queue, partition, items, ids=True)[0] == "ok"


@SETTINGS
@given(messages=st.lists(valid_messages, min_size=1, max_size=6), status=st.sampled_from(GOOD_STATUSES),
       group=st.none() | safe_text, error=st.none() | safe_text)
def test_valid_ack_bodies_identical(messages: Any, status: Any, group: Any, error: Any) -> None:
    assert same("encode_ack", messages[0], status, group, error)[0] == "ok"
    assert same("encode_ack_batch", messages, status, group, error)[0] == "ok"
    kind, op = same("build_tx_ack_op", messages[0], status, group)
    assert kind == "ok"
    kind, op_err = same("build_tx_ack_op", messages[0], status, group, error)
    assert kind == "ok" and (("error" in op_err) == (error is not None))
    assert same("encode_transaction", [op])[0] == "ok"


@SETTINGS
@given(queue=queues, partition=partitions, items=items_seqs)
def test_push_bodies_identical(queue: Any, partition: Any, items: Any) -> None:
    kind, value = same("build_push_items", queue, partition, items, ids=True)
    same("encode_push", queue, partition, items, ids=True)
    same("encode_push_fragment", queue, partition, items, ids=True)
    if kind == "ok":
        same("encode_push_items", value)
        same("build_tx_push_op", queue, partition, items, ids=True)


def same_error_text(name: str, *args: Any) -> str:
    """Both backends raise InvalidInputError with the same message; returns it."""
    texts = []
    for backend in (PY, CY):
        with pytest.raises(Exception) as info:
            getattr(backend, name)(*args, counter_ids())
        assert info.type.__name__ == "InvalidInputError", (name, info.value)
        texts.append(str(info.value))
    assert texts[0] == texts[1], (name, texts)
    return texts[0]


bad_key_items = st.dictionaries(
    st.sampled_from(["data", "payload", "transactionId", "traceId", "transactionID", "trace_id", "Data", "x"])
    | st.integers(0, 3) | text,
    st.none() | st.integers() | uuids,
    max_size=5,
).filter(lambda d: sum(k in ("data", "payload") for k in d) != 1 or any(
    k not in ("data", "payload", "transactionId", "traceId") for k in d))


@SETTINGS
@given(good=st.lists(st.just({"data": 1}), max_size=3), bad=bad_key_items | st.none() | st.integers() | text,
       tail=valid_items)
def test_push_item_key_errors_identical(good: Any, bad: Any, tail: Any) -> None:
    """Strict item keys: both backends refuse the same items with the same text (item index
    and offending keys named), on every push path."""
    items = good + [bad] + tail
    texts = {same_error_text(name, "q", None, items)
             for name in ("build_push_items", "encode_push", "encode_push_fragment", "build_tx_push_op")}
    assert len(texts) == 1
    text = texts.pop()
    assert text.startswith("item %d: " % len(good)), text


@SETTINGS
@given(queue=st.text(max_size=8), partition=partitions, items=st.lists(push_item(), min_size=1, max_size=8))
def test_push_items_minted_ids_are_uuid7(queue: str, partition: Any, items: Any) -> None:
    for backend in (PY, CY):
        try:
            wire = backend.build_push_items(queue, partition, items)
        except Exception:  # noqa: BLE001 - bad items are covered by the parity test
            continue
        for src, w in zip(items, wire):
            if src.get("transactionId") is None:
                assert uuid.UUID(w["transactionId"]).version == 7


good_id = st.text(min_size=1, max_size=12)
dict_messages = st.fixed_dictionaries(
    {
        "transactionId": st.one_of(good_id, good_id, good_id, good_id, st.none(), st.just(""), st.integers()),
        "partitionId": st.one_of(good_id, good_id, good_id, good_id, st.none(), st.integers()),
    },
    optional={
        "leaseId": st.none() | st.just("") | uuids | st.integers(),
        "_status": st.sampled_from(GOOD_STATUSES + GOOD_STATUSES + ["bad", None, 1]),
        "_error": st.none() | text | st.integers(),
        "data": json_values,
        "id": uuids,
    },
)
messages = st.one_of(dict_messages, dict_messages, dict_messages, dict_messages, dict_messages, st.none(), text)
statuses = st.one_of(
    st.sampled_from(GOOD_STATUSES), st.sampled_from(GOOD_STATUSES), st.sampled_from(GOOD_STATUSES),
    st.sampled_from(["nope", None, 0, 1, 2.0, 1.0, 0.0, -0.0]), st.lists(st.integers(), max_size=1),
)
groups = st.one_of(st.none(), st.text(max_size=10), st.text(max_size=10), st.integers())
errors = st.one_of(st.none(), st.none(), text, st.integers(), st.builds(object))


@SETTINGS
@given(message=messages, status=statuses, group=groups, error=errors)
def test_ack_bodies_identical(message: Any, status: Any, group: Any, error: Any) -> None:
    same("encode_ack", message, status, group, error)
    same("build_tx_ack_op", message, status, group)
    same("build_tx_ack_op", message, status, group, error)
    same("normalize_status", status)


@SETTINGS
@given(batch=st.lists(messages, max_size=6) | st.none(), status=statuses, group=groups, error=errors)
def test_ack_batch_bodies_identical(batch: Any, status: Any, group: Any, error: Any) -> None:
    same("encode_ack_batch", batch, status, group, error)


class _BoundLike(dict):  # a dict subclass with dict's own get(), as queen_sync.Message
    pass


class _OwnGet(dict):  # a dict subclass whose get() differs from its items
    def get(self, key: Any, default: Any = None) -> Any:
        return "own-" + key if key in ("transactionId", "partitionId") else dict.get(self, key, default)


class _MappingMessage(Mapping):  # type: ignore[type-arg]  # a Mapping that is no dict
    def __init__(self, d: Any) -> None:
        self._d = dict(d)

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Any:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


wrapped_messages = st.tuples(st.sampled_from([dict, _BoundLike, _OwnGet, _MappingMessage]), dict_messages).map(
    lambda pair: pair[0](pair[1])
)


@SETTINGS
@given(batch=st.lists(wrapped_messages | messages, min_size=1, max_size=6), status=statuses, group=groups,
       error=errors)
def test_ack_batch_of_dict_subclasses_identical_with_the_same_error_text(
    batch: Any, status: Any, group: Any, error: Any
) -> None:
    # the compiled backend reads dicts whose get() is dict's own in C: same body, same text
    texts = []
    for backend in (PY, CY):
        try:
            texts.append(("ok", backend.encode_ack_batch(batch, status, group, error)))
        except Exception as exc:  # noqa: BLE001 - compared below
            texts.append((type(exc).__name__, str(exc)))
    assert texts[0] == texts[1], texts


@SETTINGS
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("push"), queues, partitions, st.lists(push_item(), min_size=0, max_size=4)),
            st.tuples(st.just("ack"), messages, statuses, groups, errors),
            st.tuples(st.just("raw"), json_values),
        ),
        max_size=5,
    )
)
def test_transaction_bodies_identical(ops: Any) -> None:
    built = []
    for op in ops:
        if op[0] == "push":
            kind, value = same("build_tx_push_op", *op[1:], ids=True)
        elif op[0] == "ack":
            kind, value = same("build_tx_ack_op", *op[1:])
        else:
            kind, value = "ok", op[1]
        if kind == "ok":
            built.append(value)
    same("encode_transaction", built)
    same("encode_transaction", tuple(built))


@SETTINGS
@given(value=payloads | st.lists(payloads, max_size=3), seconds=st.none() | st.integers() | st.booleans() | floats | text)
def test_json_and_renew_identical(value: Any, seconds: Any) -> None:
    same("encode_json", value)
    same("encode_renew", seconds)


@SETTINGS
@given(fragments=st.none() | st.lists(st.binary(max_size=6) | st.just(b"") | st.integers() | text, max_size=4)
       | st.lists(st.binary(min_size=1, max_size=8), max_size=4).map(tuple))
def test_join_fragments_identical(fragments: Any) -> None:
    same("join_push_fragments", fragments)


@SETTINGS
@given(value=st.none() | text | uuids | uuids.map(lambda u: u + "\n") | st.integers() | st.binary(max_size=36)
       | st.text(alphabet="0123456789abcdefABCDEF-g\n", min_size=30, max_size=40))
def test_is_uuid_identical(value: Any) -> None:
    same("is_uuid", value)


@SETTINGS
@given(n=st.integers(min_value=-3, max_value=50) | st.booleans() | st.floats() | st.none())
def test_minting_identical_with_fixed_randomness(n: Any, ) -> None:
    import os as _os
    import time as _time

    real_urandom, real_time_ns = _os.urandom, _time.time_ns
    _os.urandom = lambda k: bytes((i * 37 + 11) & 0xFF for i in range(k)) if k >= 0 else real_urandom(k)
    _time.time_ns = lambda: 1_796_019_420_836_123_456
    try:
        same("new_transaction_ids", n)
        same("new_transaction_id")
    finally:
        _os.urandom, _time.time_ns = real_urandom, real_time_ns


@contextlib.contextmanager
def fixed_randomness() -> Iterator[None]:
    """``os.urandom`` and ``time.time_ns`` fixed, so that minted ids are the same in both backends."""
    import os as _os
    import time as _time

    real_urandom, real_time_ns = _os.urandom, _time.time_ns
    _os.urandom = lambda k: bytes((i * 37 + 11) & 0xFF for i in range(k))
    _time.time_ns = lambda: 1_796_019_420_836_123_456
    try:
        yield
    finally:
        _os.urandom, _time.time_ns = real_urandom, real_time_ns


def minted_outcomes(names: Tuple[str, ...], queue: Any, partition: Any, items: Any, nan_as_null: bool) -> None:
    """Each push encoder, without an ``id_source``, gives the same value (or error class and
    text) in both backends."""
    with fixed_randomness():
        for name in names:
            extra = () if name == "build_push_items" else (None, nan_as_null)
            got = []
            for backend in (PY, CY):
                try:
                    got.append(("ok", getattr(backend, name)(queue, partition, items, *extra)))
                except Exception as exc:  # noqa: BLE001 - class and text are compared
                    got.append(("raised", type(exc), str(exc)))
            assert got[0] == got[1], (name, got)


@SETTINGS
@given(queue=queues, partition=partitions, items=items_seqs, nan_as_null=st.booleans())
def test_minted_push_bodies_identical(queue: Any, partition: Any, items: Any, nan_as_null: bool) -> None:
    """Without an ``id_source`` (the production path) both backends give the same bodies,
    and the same error text, once the randomness and the clock are fixed."""
    minted_outcomes(("build_push_items", "encode_push", "encode_push_fragment"), queue, partition, items, nan_as_null)


payload_only_items = st.lists(
    st.one_of(st.builds(lambda p: {"data": p}, payloads), st.builds(lambda p: {"payload": p}, payloads)),
    max_size=12,
)


@SETTINGS
@given(queue=queues, partition=partitions, items=payload_only_items, nan_as_null=st.booleans())
def test_spliced_push_bodies_identical(queue: Any, partition: Any, items: Any, nan_as_null: bool) -> None:
    """Items holding only a payload (the compiled backend splices those bodies from one
    orjson pass over the payloads): same bodies, ids and errors as the pure backend, for
    any payload (NaN, nesting at and beyond the limit, unserialisable values)."""
    minted_outcomes(("encode_push", "encode_push_fragment"), queue, partition, items, nan_as_null)


@pytest.mark.skipif(getattr(_json, "Fragment", None) is None, reason="orjson without Fragment")
def test_spliced_push_with_caller_fragments_identical() -> None:
    """A payload holding the caller's own ``orjson.Fragment`` (written as is), NUL bytes
    included: the compiled backend must not take its NUL for one of its own markers."""
    frag = _json.Fragment
    for inner in (b'{"pre":1}', b'"a\x00b"', b"\x00", b",\x00,", b'1,\x00,2'):
        items = [{"data": {"f": frag(inner)}}, {"data": [1, frag(inner)]}, {"payload": 3}]
        minted_outcomes(("encode_push", "encode_push_fragment"), "q", "p", items, False)
        minted_outcomes(("encode_push", "encode_push_fragment"), "q", None, items[:1], True)


def test_spliced_push_large_batch_identical() -> None:
    """A 2000-item batch of mixed payloads (None and floats in many places, one NaN at the
    end): same body and ids, and the same refusal."""
    items = [{"data": {"i": i, "f": i / 7, "n": None, "l": [None, "x" * (i % 50)]}} for i in range(2000)]
    minted_outcomes(("encode_push", "encode_push_fragment"), "orders", "p-1", items, False)
    items[-1] = {"data": {"deep": [[{"x": float("nan")}]]}}
    minted_outcomes(("encode_push", "encode_push_fragment"), "orders", "p-1", items, False)
    minted_outcomes(("encode_push", "encode_push_fragment"), "orders", None, items, True)


def refusal_texts(name: str, args: Any) -> List[str]:
    """The InvalidInputError texts of ``name(*args)`` in the pure and the compiled codec,
    checked identical."""
    texts = []
    for backend in (PY, CY):
        with pytest.raises(Exception) as info:
            getattr(backend, name)(*args)
        assert info.type.__name__ == "InvalidInputError"
        texts.append(str(info.value))
    assert texts[0] == texts[1], (name, texts)
    return texts


def test_non_finite_refusals_identical() -> None:
    """NaN / ±inf: same refusal text (the place named) on every encode path, both backends."""
    items = [{"data": {"a": 1.5, "b": None}}, {"data": [None, {"x": float("nan")}]}]
    op = {"type": "push", "items": [{"queue": "q", "payload": [float("-inf")], "transactionId": "t"}]}
    for name, args in (
        ("encode_push", ("q", "p", items)),
        ("encode_push_fragment", ("q", None, items)),
        ("encode_push_items", ([{"payload": float("inf")}],)),
        ("encode_json", ({"k": (1, float("nan"))},)),
        ("encode_transaction", ([op],)),
    ):
        texts = refusal_texts(name, args)
        assert "NaN / Infinity float at $" in texts[0]


def test_out_of_range_int_refusals_identical_and_located() -> None:
    """An int beyond 64 bits: the same refusal text on every encode path, both backends,
    naming where it sits in the request body as the NaN refusal does."""
    items = [{"data": {"a": 1.5, "b": None}}, {"data": [None, {"x": 2**64}]}]
    op = {"type": "push", "items": [{"queue": "q", "payload": [-(2**63) - 1], "transactionId": "t"}]}
    for name, args, where in (
        ("encode_push", ("q", "p", items), "$.items[1].payload[1].x"),
        ("encode_push_fragment", ("q", None, items), "$[1].payload[1].x"),
        ("encode_push_items", ([{"payload": {"n": 10**30}}],), "$.items[0].payload.n"),
        ("encode_json", ({"k": (1, 2**70)},), "$.k[1]"),
        ("encode_transaction", ([op],), "$.operations[0].items[0].payload[0]"),
    ):
        texts = refusal_texts(name, args)
        assert texts[0].startswith("payload is not JSON-serialisable: Integer exceeds 64-bit range at %s: " % where), texts[0]
        assert "-2**63 to 2**64 - 1" in texts[0]
    # the edges are no refusal, on either backend
    for backend in (PY, CY):
        assert backend.encode_json([2**64 - 1, -(2**63)]) == b"[18446744073709551615,-9223372036854775808]"


# --------------------------------------------------------------------------- decode parity

pop_messages = st.fixed_dictionaries(
    {
        "id": uuids,
        "transactionId": st.text(max_size=20),
        "partitionId": uuids,
        "partition": st.text(max_size=10),
        "data": json_values.filter(lambda v: True),
        "createdAt": st.just("2026-11-30T06:21:25.025905Z"),
        "leaseId": st.none() | uuids,
        "consumerGroup": st.sampled_from(["__QUEUE_MODE__", "g"]),
        "traceId": st.none() | uuids,
        "producerSub": st.none(),
    }
)
pop_docs = st.fixed_dictionaries(
    {},
    optional={
        "success": st.booleans(),
        "queue": st.text(max_size=8),
        "leaseId": st.none() | uuids,
        "messages": st.lists(pop_messages, max_size=5) | st.lists(json_values, max_size=3) | json_values,
        "error": st.none() | st.sampled_from(["no_available_partition", "partition_not_found", "lease_held", "boom"]) | json_values,
        "paused": st.booleans(),
    },
) | json_values


def _serialisable(doc: Any) -> bytes:
    try:
        return _json.dumps(doc)
    except Exception:  # noqa: BLE001 - e.g. 2**64 with orjson: use a body the broker could send
        return b'{"messages":[]}'


@SETTINGS
@given(doc=pop_docs, cut=st.integers(min_value=0, max_value=400), as_str=st.booleans())
def test_pop_decode_identical(doc: Any, cut: int, as_str: bool) -> None:
    body = _serialisable(doc)
    for variant in (body, body[:cut], body + b"x"):
        same("decode_pop", variant.decode("utf-8", "replace") if as_str else variant)
        same("decode_json", variant)


@SETTINGS
@given(doc=json_values | st.lists(st.dictionaries(st.text(max_size=5), json_values, max_size=4), max_size=4),
       cut=st.integers(min_value=0, max_value=200))
def test_result_decoders_identical(doc: Any, cut: int) -> None:
    body = _serialisable(doc)
    for variant in (body, body[:cut]):
        for name in ("decode_push_result", "decode_ack_result", "decode_renew_result", "decode_transaction_result"):
            same(name, variant)


push_statuses = st.sampled_from(["queued", "duplicate", "buffered", "failed", "FAILED", None, 1, True])
ack_successes = st.sampled_from([True, False, None, 1, 0, "true", 1.0])

#: the one-pass reply checks: their plain decoder and what each counts
COUNTED_REPLIES = {
    "decode_push_reply": ("decode_push_result", lambda r: r.get("status") == "failed",
                          "push reply has 1 results for 2 items; the outcome is unknown"),
    "decode_ack_reply": ("decode_ack_result", lambda r: r.get("success") is not True,
                         "ack reply has 1 results for 2 messages"),
}


@pytest.mark.parametrize("name", sorted(COUNTED_REPLIES))
@SETTINGS
@given(results=st.lists(st.fixed_dictionaries({"index": st.integers(0, 9)}, optional={
           "status": push_statuses, "success": ack_successes, "error": text}), max_size=6) | json_values,
       count=st.integers(min_value=0, max_value=7), cut=st.integers(min_value=0, max_value=200))
def test_counted_reply_decode_identical(name: str, results: Any, count: int, cut: int) -> None:
    plain, counted = COUNTED_REPLIES[name][:2]
    body = _serialisable(results)
    for variant in (body, body[:cut]):
        got = same(name, variant, count)
        if got[0] == "ok":  # the one-pass reply check agrees with decode + length + scan
            listed = getattr(PY, plain)(variant)
            assert got[1] == (listed, sum(1 for r in listed if counted(r)))
            assert len(listed) == count


@pytest.mark.parametrize("name", sorted(COUNTED_REPLIES))
def test_counted_reply_refusals_identical(name: str) -> None:
    """Wrong count, an item that is not an object, an error object: same class and text."""
    for body, count in ((b'[{"status":"queued","success":true}]', 2), (b'[{"success":false},3]', 2),
                        (b'{"error":"nope"}', 1), (b'{"x":1}', 1), (b'"s"', 1), (b"", 1)):
        texts = []
        for backend in (PY, CY):
            with pytest.raises(Exception) as info:
                getattr(backend, name)(body, count)
            texts.append((info.type, str(info.value), getattr(info.value, "body", None)))
        assert texts[0] == texts[1], (body, texts)
    with pytest.raises(Exception, match=COUNTED_REPLIES[name][2].replace("(", r"\(")):
        getattr(CY, name)(b'[{"status":"queued","success":true}]', 2)


def test_ack_reply_counts_what_is_not_a_json_true() -> None:
    body = (b'[{"index":0,"success":true},{"index":1,"success":false,"error":"Invalid or expired lease"},'
            b'{"index":2,"success":1},{"index":3}]')
    for backend in (PY, CY):
        results, refused = backend.decode_ack_reply(body, 4)
        assert [r["index"] for r in results] == [0, 1, 2, 3]
        assert refused == 3  # only a JSON true is an accepted ack: false, 1 and a missing one are not


@SETTINGS
@given(junk=st.binary(max_size=40) | st.none() | st.integers() | st.builds(object))
def test_garbage_bodies_identical(junk: Any) -> None:
    for name in ("decode_json", "decode_pop", "decode_push_result", "decode_ack_result", "decode_renew_result",
                 "decode_transaction_result"):
        same(name, junk)


def test_status_lookalikes_refused_alike() -> None:
    """1 / 0 / 1.0 hash like True / False: neither backend may take them for a status."""
    from queen_sync.errors import InvalidInputError

    for status in (1, 0, 1.0, 0.0, -0.0, True, False, "completed", "success", "failed", "retry", "dlq"):
        kind, value = same("normalize_status", status)
        if isinstance(status, bool) or isinstance(status, str):
            assert kind == "ok"
        else:
            assert (kind, value) == ("raised", InvalidInputError)


#: JSON number literals orjson refuses (beyond a double; past the int digit limit), mixed with
#: ordinary values, as raw JSON text
big_literals = st.one_of(
    st.integers(min_value=10**310, max_value=10**700).map(str),
    st.sampled_from(["1e400", "-1e400", "1E+999", "-" + "9" * 5000]),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
    safe_text.map(lambda t: _json.dumps(t).decode("utf-8")),
)


@SETTINGS
@given(literals=st.lists(big_literals, min_size=1, max_size=4), cut=st.integers(min_value=0, max_value=300))
def test_big_number_pop_decode_identical(literals: Any, cut: int) -> None:
    """Pop replies whose payloads hold numbers orjson cannot parse: both backends fall back
    alike (equal values), and cut bodies fail alike."""
    data = ("[" + ",".join(literals) + "]").encode("utf-8")
    body = b'{"success":true,"messages":[{"id":"a","transactionId":"t","partitionId":"p","data":%s}]}' % data
    for variant in (body, body[:cut], body.decode("utf-8")):
        same("decode_pop", variant)
        same("decode_json", variant)
    kind, msgs = same("decode_pop", body)
    assert kind == "ok" and len(msgs[0]["data"]) == len(literals)


def test_decode_pop_does_not_copy_messages() -> None:
    body = b'{"success":true,"messages":[{"id":"a","data":{"x":1}}]}'
    for backend in (PY, CY):
        assert isinstance(backend, types.ModuleType)
        msgs = backend.decode_pop(body)
        assert msgs == [{"id": "a", "data": {"x": 1}}]


# --------------------------------------------------------------------------- NaN walk / null scan


def _nest(leaf: Any, kinds: str) -> Any:
    """``leaf`` wrapped in containers, innermost first: d = dict, l = list, t = tuple."""
    for k in kinds:
        leaf = {"k": leaf, "n": 1} if k == "d" else [1, leaf, "s"] if k == "l" else ("s", leaf)
    return leaf


@SETTINGS
@given(
    kinds=st.text("dlt", max_size=40),
    leaf=st.sampled_from([float("nan"), float("inf"), float("-inf"), 1.5, 0.0, None, True, 7, "null"]),
    with_none=st.booleans(),
    n=st.sampled_from([1, 2, 5]),
)
def test_non_finite_found_at_any_depth(kinds: str, leaf: Any, with_none: bool, n: int) -> None:
    """The compiled walk (values classified inside each container's loop) finds a NaN / ±inf
    nested anywhere in dicts / lists / tuples, in any item of the batch, with or without a
    None elsewhere (no None: the body may hold no null at all), with the pure text."""
    payload = _nest(leaf, kinds)
    items = [{"data": {"a": 1, "b": None if with_none else 2}} for _ in range(n - 1)]
    items.append({"data": {"x": payload, "note": None} if with_none else {"x": payload}})
    for name in ("encode_push", "encode_push_fragment"):
        got = []
        for backend in (PY, CY):
            try:
                got.append(("ok", getattr(backend, name)("q", "p", items, counter_ids())))
            except Exception as exc:  # noqa: BLE001 - class and text are compared
                got.append(("raised", type(exc).__name__, str(exc)))
        assert got[0] == got[1], (name, got)
        finite = not isinstance(leaf, float) or leaf - leaf == 0.0
        assert (got[0][0] == "ok") == finite, got[0]


@pytest.mark.parametrize(
    "value, refused",
    [
        (float("nan"), True),  # the body is exactly b"null": the scan's last position
        (None, False),
        ("nul", False),
        (["n", "nu", float("inf")], True),
        ({"nnnn": "nulx", "v": float("-inf")}, True),
        ({"nnnn": "nulx", "v": 1.0}, False),
        ("null", False),  # a null inside a string: the walk runs and finds nothing
    ],
)
def test_null_scan_edges_identical(value: Any, refused: bool) -> None:
    """The compiled ``null`` scan (memchr per ``n``) agrees with ``b"null" in body`` at the
    edges: a body that is just ``null``, ``n`` / ``nul`` near the end, nulls inside strings."""
    got = [outcome(backend.encode_json, value) for backend in (PY, CY)]
    assert got[0] == got[1]
    assert (got[0][0] == "raised") == refused


# --------------------------------------------------------------------------- NaN check shortcut

# The compiled push encode stops looking for NaN / ±inf in a payload once it has met as many
# None values as its JSON text holds nulls (breadth first). These payloads put Nones, nulls
# inside strings, non-finite floats, many containers and unusual types where that shortcut
# could go wrong: both backends must still refuse (or send) exactly the same.
non_finite = st.sampled_from([float("nan"), float("inf"), float("-inf")])
NanEnum = enum.Enum("NanEnum", {"X": float("nan")})
shortcut_leaves = st.none() | non_finite | st.sampled_from(["null", "nullnull", "n", 1.5, 0, True])
shortcut_values = st.recursive(
    shortcut_leaves,
    lambda children: st.lists(children, max_size=4) | st.lists(children, max_size=4).map(tuple)
    | st.dictionaries(st.sampled_from(["a", "null", "b", "c"]), children, max_size=4),
    max_leaves=30,
)


def same_but_ids(name: str, *args: Any) -> str:
    """Both backends on the path that mints ids itself (the spliced one, where the shortcut
    is): the same exception class, or the same body once the minted ids are blanked."""
    got = []
    for backend in (PY, CY):
        kind, value = outcome(getattr(backend, name), *args)
        if kind == "ok":
            body, ids = value
            for tx in ids:
                body = body.replace(tx.encode(), b"<id>")
            value = (body, len(ids))
        got.append((kind, value))
    assert got[0] == got[1], (name, got)
    return got[0][0]


@SETTINGS
@given(payloads_=st.lists(shortcut_values, min_size=1, max_size=4), nan_as_null=st.booleans())
def test_nan_check_shortcut_refuses_alike(payloads_: Any, nan_as_null: bool) -> None:
    items = [{"data": p} for p in payloads_]
    same_but_ids("encode_push", "q", None, items, None, nan_as_null)
    same_but_ids("encode_push_fragment", "q", "p", items, None, nan_as_null)


@pytest.mark.parametrize(
    "payload, refused",
    [
        ({"a": None, "b": {"c": float("nan")}}, True),  # the None is met first, one null left
        ({"a": "null", "b": float("inf")}, True),  # a "null" in a string is no None
        ({"a": "null", "b": None}, False),
        ([None, [None, [float("-inf")]]], True),
        ([{"k": i} for i in range(300)] + [{"k": float("nan")}], True),  # past the breadth-first queue
        ([{"k": None} for i in range(300)] + [[float("nan")]], True),
        ([[None]] * 300 + [None], False),
        ({"a": NanEnum.X, "b": None}, True),  # an unusual type: orjson writes its value
        (None, False),
        (float("nan"), True),
    ],
)
def test_nan_check_shortcut_cases(payload: Any, refused: bool) -> None:
    assert (same_but_ids("encode_push", "q", None, [{"data": payload}]) == "raised") is refused
    assert (same("encode_json", payload)[0] == "raised") is refused  # the whole-body check stops early too
