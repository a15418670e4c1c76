"""Unit tests of the codec: exact wire bodies of every encode function, decoding of real
broker replies (from the Queen 0.15 captures), UUIDv7 ids, and backend selection.

Every test taking the ``backend`` fixture runs against both the pure-Python codec and the
compiled one (the compiled param is skipped when it is not built, and fails instead when
``QUEEN_SYNC_REQUIRE_EXTENSIONS=1``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Mapping
from typing import Any, Iterator, List

import pytest

import queen_sync
from queen_sync import _json, _pycodec, codec
from queen_sync.errors import BrokerError, InvalidInputError, ProtocolError

REQUIRE = os.environ.get("QUEEN_SYNC_REQUIRE_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no", "off")
NO_EXT = os.environ.get("QUEEN_SYNC_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no", "off")

UUID7_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

TRACE = "7d444840-9dc0-11d1-b245-5ffdce74fad2"  # a UUIDv1
LEASE = "01a22b1d-8835-7000-a5fb-1167bb476180"
PID = "f5ed7400-97a4-4a04-b0fb-d206d1384b11"
TX = "dabf3b13-9446-4ff7-be92-52f2a7338203"


def compiled_or_skip() -> types.ModuleType:
    try:
        return codec.load_backend("cython")
    except ImportError:
        if REQUIRE:
            pytest.fail("QUEEN_SYNC_REQUIRE_EXTENSIONS=1 but queen_sync._ccodec is not importable")
        pytest.skip("compiled codec not built (python setup.py build_ext --inplace)")


@pytest.fixture(params=["python", "cython"])
def backend(request: pytest.FixtureRequest) -> types.ModuleType:
    if request.param == "cython":
        return compiled_or_skip()
    return codec.load_backend("python")


def counter_ids(prefix: str = "tx") -> Any:
    state = {"n": 0}

    def next_id() -> str:
        state["n"] += 1
        return "%s-%d" % (prefix, state["n"])

    return next_id


# --------------------------------------------------------------------------- selection


def test_compiled_exports_every_pure_name() -> None:
    cc = compiled_or_skip()
    missing = [name for name in _pycodec.__all__ if not hasattr(cc, name)]
    assert missing == []
    # names appended to _pycodec after the last mirror are borrowed, not compiled: not done
    assert cc._BORROWED == ()
    for name in _pycodec.__all__:
        pure = getattr(_pycodec, name)
        if callable(pure):
            assert getattr(cc, name) is not pure
            assert type(getattr(cc, name)).__name__ == "cython_function_or_method", name
        else:
            assert getattr(cc, name) == pure, name


def test_codec_reexports_active_backend() -> None:
    assert queen_sync.codec_backend == codec.BACKEND
    assert codec.BACKEND in ("cython", "python")
    assert codec.is_compiled() == (codec.BACKEND == "cython")
    for name in _pycodec.__all__:
        assert getattr(codec, name) is getattr(codec.IMPL, name)


def test_required_extension_is_active() -> None:
    """In CI (QUEEN_SYNC_REQUIRE_EXTENSIONS=1) the compiled codec must be built and chosen."""
    if not REQUIRE:
        pytest.skip("QUEEN_SYNC_REQUIRE_EXTENSIONS not set")
    compiled_or_skip()
    assert queen_sync.codec_backend == ("python" if NO_EXT else "cython")


def test_load_backend_rejects_unknown_name() -> None:
    with pytest.raises(ValueError):
        codec.load_backend("rust")


_CHILD = """
import sys
if {hide!r}:
    sys.modules["queen_sync._ccodec"] = None  # as if it were not built
try:
    import queen_sync
except ImportError as exc:
    print("ImportError", exc)
else:
    print(queen_sync.codec_backend)
"""


def _child_backend(env_extra: dict, hide: bool = False) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEEN_SYNC_")}
    env.update(env_extra)
    root = os.path.dirname(os.path.dirname(os.path.abspath(queen_sync.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(hide=hide)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_backend_selection_by_environment() -> None:
    assert _child_backend({"QUEEN_SYNC_NO_EXTENSIONS": "1"}) == "python"
    assert _child_backend({"QUEEN_SYNC_NO_EXTENSIONS": "0"}, hide=True) == "python"
    out = _child_backend({"QUEEN_SYNC_REQUIRE_EXTENSIONS": "1"}, hide=True)
    assert out.startswith("ImportError") and "queen_sync._ccodec" in out
    assert _child_backend({"QUEEN_SYNC_NO_EXTENSIONS": "1", "QUEEN_SYNC_REQUIRE_EXTENSIONS": "1"}).startswith(
        "ImportError"
    )
    try:
        codec.load_backend("cython")
    except ImportError:
        return
    assert _child_backend({}) == "cython"
    assert _child_backend({"QUEEN_SYNC_REQUIRE_EXTENSIONS": "1"}) == "cython"


def test_constants(backend: types.ModuleType) -> None:
    assert backend.QUEUE_MODE == "__QUEUE_MODE__"
    assert backend.EMPTY_POP_ERRORS == frozenset({"no_available_partition", "partition_not_found", "lease_held"})


# --------------------------------------------------------------------------- ids


def test_uuid7_format_version_variant(backend: types.ModuleType) -> None:
    before = time.time_ns() // 1_000_000
    ids = backend.new_transaction_ids(200)
    after = time.time_ns() // 1_000_000
    assert len(ids) == 200 and len(set(ids)) == 200
    for value in ids + [backend.new_transaction_id()]:
        assert UUID7_RE.match(value), value
        parsed = uuid.UUID(value)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert before <= int(value.replace("-", "")[:12], 16) <= after + 1
    assert backend.new_transaction_ids(0) == []


def test_uuid7_time_order(backend: types.ModuleType) -> None:
    first = backend.new_transaction_id()
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= start + 1:  # wait for the clock, not a guessed sleep
        pass
    second = backend.new_transaction_ids(3)
    assert all(first < later for later in second)


def test_uuid7_bit_layout(backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: 0x0123456789AB * 1_000_000 + 999_999)
    monkeypatch.setattr(os, "urandom", lambda n: bytes(range(10)) * (n // 10) if n >= 0 else os.urandom(n))
    assert backend.new_transaction_id() == "01234567-89ab-7000-8203-040506070809"
    monkeypatch.setattr(os, "urandom", lambda n: b"\xff" * n)
    assert backend.new_transaction_ids(2) == ["01234567-89ab-7fff-bfff-ffffffffffff"] * 2
    body, _ = backend.encode_push("q", None, [{"data": 1}])
    assert body == b'{"items":[{"queue":"q","payload":1,"transactionId":"01234567-89ab-7fff-bfff-ffffffffffff"}]}'


def test_new_transaction_ids_bad_count(backend: types.ModuleType) -> None:
    with pytest.raises(ValueError):
        backend.new_transaction_ids(-1)
    with pytest.raises(TypeError):
        backend.new_transaction_ids(2.0)


def _random_part(tx: str) -> str:
    """The 74 random bits of a UUIDv7 string, as hex (the time prefix left out)."""
    return tx[15:]


def test_single_ids_draw_urandom_once_per_pool(backend: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    real, draws = os.urandom, []

    def counting(n: int) -> bytes:
        draws.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", counting)
    n = 2 * _pycodec.POOL_IDS + 5
    ids = [backend.new_transaction_id() for _ in range(n // 2)]
    ids += [backend.encode_push_fragment("q", None, [{"data": i}])[1][0] for i in range(n - n // 2)]
    assert draws == [10 * _pycodec.POOL_IDS] * 3  # a fresh pool for the patched function, then two more
    assert len({_random_part(t) for t in ids}) == n
    backend.new_transaction_ids(3)  # more than one id: its own draw, the pool untouched
    assert draws[3:] == [30]


def test_single_ids_from_many_threads_are_all_distinct(backend: types.ModuleType) -> None:
    import threading

    out: List[List[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def mint(k: int) -> None:
        start.wait()
        out[k].extend(backend.new_transaction_id() for _ in range(3 * _pycodec.POOL_IDS))

    threads = [threading.Thread(target=mint, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [_random_part(t) for part in out for t in part]
    assert len(every) == 24 * _pycodec.POOL_IDS and len(set(every)) == len(every)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libc fork via ctypes: Linux only")
def test_a_child_forked_without_hooks_mints_its_own_ids(backend: types.ModuleType) -> None:
    from _helpers import libc_fork_child

    backend.new_transaction_id()  # the pool is drawn: the child inherits it
    r, w = os.pipe()

    def child() -> bool:
        os.write(w, backend.new_transaction_id().encode())
        return True

    assert libc_fork_child(child) == 0
    os.close(w)
    theirs = os.read(r, 100).decode()
    os.close(r)
    ours = backend.new_transaction_id()  # the parent's next slot: the one the child would have taken
    assert uuid.UUID(theirs).version == 7
    assert _random_part(theirs) != _random_part(ours)


@pytest.mark.parametrize(
    "value, expected",
    [
        (TRACE, True),
        (TRACE.upper(), True),
        ("01a22b1d-8835-7000-a5fb-1167bb476180", True),
        (TRACE + "\n", False),
        (TRACE[:-1], False),
        (TRACE + "0", False),
        (TRACE.replace("-", ""), False),
        ("g" + TRACE[1:], False),
        ("7d444840-9dc0-11d1-b245_5ffdce74fad2", False),
        ("７d444840-9dc0-11d1-b245-5ffdce74fad2", False),  # fullwidth digit
        ("", False),
        (None, False),
        (uuid.UUID(TRACE), False),
        (TRACE.encode(), False),
    ],
)
def test_is_uuid(backend: types.ModuleType, value: Any, expected: bool) -> None:
    assert backend.is_uuid(value) is expected


@pytest.mark.parametrize(
    "status, wire",
    [(True, "completed"), (False, "failed"), ("completed", "completed"), ("success", "completed"),
     ("failed", "failed"), ("retry", "retry"), ("dlq", "dlq")],
)
def test_normalize_status(backend: types.ModuleType, status: Any, wire: str) -> None:
    assert backend.normalize_status(status) == wire


@pytest.mark.parametrize("status", ["ok", "COMPLETED", None, [], {}, 2, "pending", 1, 0, 1.0, 0.0, -0.0, 1 + 0j])
def test_normalize_status_rejects(backend: types.ModuleType, status: Any) -> None:
    with pytest.raises(InvalidInputError):
        backend.normalize_status(status)


# --------------------------------------------------------------------------- push


def test_encode_push_exact_bodies(backend: types.ModuleType) -> None:
    items = [
        {"data": {"i": 0}},
        {"payload": "text", "traceId": TRACE},
        {"data": None, "transactionId": "explicit-1"},
        {"payload": None},
        {"payload": {"orderId": 7}, "transactionId": "explicit-2", "traceId": None},  # None traceId = none
        {"data": {"x": [1, 2.5, True, "é☃𝄞"]}},
        {"data": {}},
    ]
    body, ids = backend.encode_push("orders", "acme", items, counter_ids())
    assert body == (
        b'{"items":['
        b'{"queue":"orders","partition":"acme","payload":{"i":0},"transactionId":"tx-1"},'
        b'{"queue":"orders","partition":"acme","payload":"text","transactionId":"tx-2",'
        b'"traceId":"7d444840-9dc0-11d1-b245-5ffdce74fad2"},'
        b'{"queue":"orders","partition":"acme","payload":null,"transactionId":"explicit-1"},'
        b'{"queue":"orders","partition":"acme","payload":null,"transactionId":"tx-3"},'
        b'{"queue":"orders","partition":"acme","payload":{"orderId":7},"transactionId":"explicit-2"},'
        b'{"queue":"orders","partition":"acme","payload":{"x":[1,2.5,true,"\xc3\xa9\xe2\x98\x83\xf0\x9d\x84\x9e"]},'
        b'"transactionId":"tx-4"},'
        b'{"queue":"orders","partition":"acme","payload":{},"transactionId":"tx-5"}]}'
    )
    assert ids == ["tx-1", "tx-2", "explicit-1", "tx-3", "explicit-2", "tx-4", "tx-5"]
    assert _json.loads(body) == {"items": backend.build_push_items("orders", "acme", items, counter_ids())}
    wire = backend.build_push_items("orders", "acme", items, counter_ids())
    assert wire[0]["payload"] is items[0]["data"]  # payloads are not copied
    assert wire[4]["payload"] is items[4]["payload"]


def test_encode_push_without_partition_mints_uuid7(backend: types.ModuleType) -> None:
    body, ids = backend.encode_push("q", None, [{"data": 1}, {"data": 2}])
    assert all(UUID7_RE.match(tx) for tx in ids) and len(ids) == 2
    assert ids[0] != ids[1]
    assert body == b'{"items":[{"queue":"q","payload":1,"transactionId":"%s"},{"queue":"q","payload":2,"transactionId":"%s"}]}' % (
        ids[0].encode(),
        ids[1].encode(),
    )


def test_encode_push_items_and_empty(backend: types.ModuleType) -> None:
    assert backend.encode_push("q", "p", []) == (b'{"items":[]}', [])
    assert backend.encode_push_items([{"queue": "q", "payload": 1, "transactionId": "t"}]) == (
        b'{"items":[{"queue":"q","payload":1,"transactionId":"t"}]}'
    )


class _ReadOnlyMapping(Mapping):
    def __init__(self, **kw: Any) -> None:
        self._d = dict(kw)

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


def test_build_push_items_accepts_any_mapping_and_sequence(backend: types.ModuleType) -> None:
    items = (
        _ReadOnlyMapping(data=1, transactionId="a"),
        types.MappingProxyType({"payload": {"b": 2}}),
        {"payload": 3, "traceId": TRACE},
    )
    wire = backend.build_push_items("q", None, items, counter_ids())
    assert wire == [
        {"queue": "q", "payload": 1, "transactionId": "a"},
        {"queue": "q", "payload": {"b": 2}, "transactionId": "tx-1"},
        {"queue": "q", "payload": 3, "transactionId": "tx-2", "traceId": TRACE},
    ]


@pytest.mark.parametrize(
    "item",
    [
        "just a string",
        42,
        None,
        [("data", 1)],
        {"data": 1, "transactionId": ""},
        {"data": 1, "transactionId": 17},
        {"data": 1, "transactionId": b"bytes"},
        {"data": 1, "traceId": "not-a-uuid"},
        {"data": 1, "traceId": TRACE + "\n"},
        {"data": 1, "traceId": 5},
    ],
)
def test_build_push_items_rejects(backend: types.ModuleType, item: Any) -> None:
    with pytest.raises(InvalidInputError):
        backend.build_push_items("q", None, [{"data": 0}, item], counter_ids())
    with pytest.raises(InvalidInputError):
        backend.encode_push("q", "p", [item])


@pytest.mark.parametrize(
    "item, index, words",
    [
        ({"data": 1, "transactionID": "order-42"}, 1, ["item 1", "'transactionID'", "did you mean 'transactionId'"]),
        ({"data": 1, "trace_id": TRACE}, 1, ["item 1", "'trace_id'", "did you mean 'traceId'"]),
        ({"orderId": 7}, 1, ["item 1", "'orderId'", "no 'data' (or 'payload')"]),
        ({"transactionId": "t"}, 1, ["item 1", "no 'data' (or 'payload')"]),
        ({}, 1, ["item 1", "no 'data' (or 'payload')"]),
        ({"data": 1, "payload": 2}, 1, ["item 1", "both 'data' and 'payload'"]),
        ({"data": 1, "extra": 2, 3: 4}, 1, ["item 1", "unknown keys 'extra', 3"]),
        (types.MappingProxyType({"data": 1, "meta": 2}), 1, ["item 1", "'meta'"]),
        (_ReadOnlyMapping(payload=1, data=2), 1, ["item 1", "both"]),
        ("text", 1, ["item 1", "must be a dict", "str"]),
    ],
)
def test_build_push_items_strict_keys(backend: types.ModuleType, item: Any, index: int, words: List[str]) -> None:
    """Unknown keys, both or neither of data / payload are refused (naming index and keys),
    before any transactionId is minted, on every push path of the codec."""
    calls = []

    def ids() -> str:
        calls.append(1)
        return "tx"

    for fn in (backend.build_push_items, backend.encode_push, backend.encode_push_fragment, backend.build_tx_push_op):
        with pytest.raises(InvalidInputError) as info:
            fn("q", "p", [{"data": 0}, item, {"data": 2}], ids)
        for w in words:
            assert w in str(info.value), (fn.__name__, str(info.value))
    assert calls == []


def test_build_push_items_key_error_comes_first(backend: types.ModuleType) -> None:
    """Items are checked for shape before ids / traceIds: a later unknown key wins over an
    earlier bad traceId (same order in both backends)."""
    with pytest.raises(InvalidInputError, match="item 1: unknown key 'x'"):
        backend.build_push_items("q", None, [{"data": 0, "traceId": "nope"}, {"data": 1, "x": 1}])
    with pytest.raises(InvalidInputError, match="item 0: traceId"):
        backend.build_push_items("q", None, [{"data": 0, "traceId": "nope"}, {"data": 1}])


def test_build_push_items_rejects_non_sequence(backend: types.ModuleType) -> None:
    with pytest.raises(TypeError):
        backend.build_push_items("q", None, None)
    with pytest.raises(TypeError):
        backend.build_push_items("q", None, ({"data": i} for i in range(2)))


@pytest.mark.parametrize(
    "payload",
    [object(), {1, 2}, {"k": b"bytes"}, "\ud800", {1: "int key"}],
)
def test_encode_push_rejects_unserialisable_payload(backend: types.ModuleType, payload: Any) -> None:
    with pytest.raises(InvalidInputError):
        backend.encode_push("q", None, [{"data": payload}], counter_ids())


def test_non_finite_floats_are_refused_unless_opted_in(backend: types.ModuleType) -> None:
    """JSON has no NaN / Infinity: refused before sending (naming where), or ``null`` on opt-in."""
    nan, inf = float("nan"), float("inf")
    items = [{"data": {"a": nan, "b": [inf, -inf, 1.5]}, "transactionId": "t"}]
    with pytest.raises(InvalidInputError, match=r"NaN / Infinity float at \$\.items\[0\]\.payload\.a\b"):
        backend.encode_push("q", None, items)
    with pytest.raises(InvalidInputError, match=r"at \$\.b\[1\]"):
        backend.encode_json({"a": None, "b": [1.5, -inf]})
    with pytest.raises(InvalidInputError):
        backend.encode_push_fragment("q", None, items)
    with pytest.raises(InvalidInputError):
        backend.encode_transaction([backend.build_tx_push_op("q", None, items)])
    for value in (nan, inf, -inf, [None, nan], {"k": (None, inf)}):
        with pytest.raises(InvalidInputError):
            backend.encode_json(value)
    body, _ = backend.encode_push("q", None, items, None, True)
    assert body == b'{"items":[{"queue":"q","payload":{"a":null,"b":[null,null,1.5]},"transactionId":"t"}]}'
    assert backend.encode_push("q", None, items, nan_as_null=True)[0] == body
    assert backend.encode_json(nan, nan_as_null=True) == b"null"
    assert backend.encode_push_fragment("q", None, items, nan_as_null=True)[0] == body[10:-2]
    # a None (null) or the text "null" beside finite floats is no NaN
    assert backend.encode_json({"a": None, "s": "null", "f": [1.5, -0.0, 1e308]}) == (
        b'{"a":null,"s":"null","f":[1.5,-0.0,1e+308]}'
    )


def test_encode_json(backend: types.ModuleType) -> None:
    assert backend.encode_json({"a": [1, None, "x"], "b": {}}) == b'{"a":[1,null,"x"],"b":{}}'
    assert backend.encode_json(2**63 - 1) == b"9223372036854775807"
    with pytest.raises(InvalidInputError):
        backend.encode_json({"a": object()})
    with pytest.raises(InvalidInputError):  # both JSON engines refuse ints beyond 64 bits
        backend.encode_json({"big": 2**64})


def test_push_fragments(backend: types.ModuleType) -> None:
    items1 = [{"data": 1}, {"payload": "é"}]
    items2 = [{"data": {"x": [1]}, "traceId": TRACE}]
    frag1, ids1 = backend.encode_push_fragment("q", "p", items1, counter_ids())
    assert ids1 == ["tx-1", "tx-2"]
    assert frag1 == (
        b'{"queue":"q","partition":"p","payload":1,"transactionId":"tx-1"},'
        b'{"queue":"q","partition":"p","payload":"\xc3\xa9","transactionId":"tx-2"}'
    )
    frag2, ids2 = backend.encode_push_fragment("r", None, items2, counter_ids("b"))
    wire = backend.build_push_items("q", "p", items1, counter_ids()) + backend.build_push_items(
        "r", None, items2, counter_ids("b")
    )
    joined = backend.join_push_fragments([frag1, frag2])
    assert joined == backend.encode_push_items(wire)
    assert _json.loads(joined) == {"items": wire}
    assert [w["transactionId"] for w in wire] == ids1 + ids2
    assert backend.join_push_fragments((frag2,)) == b'{"items":[' + frag2 + b"]}"
    assert backend.encode_push_fragment("q", None, []) == (b"", [])
    for bad in ([], (), [b""], [frag1, b""], None):
        with pytest.raises(InvalidInputError):
            backend.join_push_fragments(bad)
    with pytest.raises(InvalidInputError):
        backend.encode_push_fragment("q", None, [{"data": object()}])
    with pytest.raises(InvalidInputError):
        backend.encode_push_fragment("q", None, [{"data": 1, "traceId": "nope"}])


def test_tx_push_op(backend: types.ModuleType) -> None:
    op = backend.build_tx_push_op("inv", "acme", [{"data": {"n": 1}}], counter_ids())
    assert op == {"type": "push", "items": [{"queue": "inv", "partition": "acme", "payload": {"n": 1}, "transactionId": "tx-1"}]}
    with pytest.raises(InvalidInputError):
        backend.build_tx_push_op("inv", None, [])


# --------------------------------------------------------------------------- ack


def _msg(**extra: Any) -> dict:
    m = {
        "id": "01a22b1d-869c-7000-9a1b-010ce9462dc6",
        "transactionId": TX,
        "partitionId": PID,
        "partition": "p",
        "data": {"i": 0},
        "createdAt": "2026-11-30T06:21:25.025905Z",
        "leaseId": LEASE,
        "consumerGroup": "g",
        "traceId": None,
        "producerSub": None,
    }
    m.update(extra)
    return m


def test_encode_ack_matches_capture(backend: types.ModuleType) -> None:
    # scenario-ack-success.jsonl: the body a Queen 0.15 broker accepted
    assert backend.encode_ack(_msg(), True, "g") == (
        b'{"transactionId":"dabf3b13-9446-4ff7-be92-52f2a7338203",'
        b'"partitionId":"f5ed7400-97a4-4a04-b0fb-d206d1384b11","status":"completed",'
        b'"consumerGroup":"g","leaseId":"01a22b1d-8835-7000-a5fb-1167bb476180"}'
    )


def test_encode_ack_variants(backend: types.ModuleType) -> None:
    base = b'{"transactionId":"%s","partitionId":"%s"' % (TX.encode(), PID.encode())
    assert backend.encode_ack(_msg(leaseId=None), "failed", None) == base + b',"status":"failed"}'
    assert backend.encode_ack(_msg(leaseId=""), False, "grp", "boom") == (
        base + b',"status":"failed","consumerGroup":"grp","error":"boom"}'
    )
    assert backend.encode_ack(_msg(_status="retry", _error=42), True, None) == (
        base + b',"status":"retry","leaseId":"%s","error":"42"}' % LEASE.encode()
    )
    assert backend.encode_ack({"transactionId": TX, "partitionId": PID}, "dlq", "g", "bad") == (
        base + b',"status":"dlq","consumerGroup":"g","error":"bad"}'
    )


@pytest.mark.parametrize(
    "message",
    [None, "tx", [TX, PID], {"partitionId": PID}, {"transactionId": TX}, {"transactionId": "", "partitionId": PID},
     {"transactionId": TX, "partitionId": 5}],
)
def test_encode_ack_rejects_bad_messages(backend: types.ModuleType, message: Any) -> None:
    with pytest.raises(InvalidInputError):
        backend.encode_ack(message, True, "g")
    with pytest.raises(InvalidInputError):
        backend.encode_ack_batch([_msg(), message], True, "g")
    with pytest.raises(InvalidInputError):
        backend.build_tx_ack_op(message, True, "g")


def test_encode_ack_rejects_bad_status(backend: types.ModuleType) -> None:
    with pytest.raises(InvalidInputError):
        backend.encode_ack(_msg(), "ok", "g")
    with pytest.raises(InvalidInputError):
        backend.encode_ack(_msg(_status="nope"), True, "g")
    with pytest.raises(InvalidInputError):
        backend.encode_ack_batch([_msg(), _msg(_status=None)], True, "g")


def test_encode_ack_batch(backend: types.ModuleType) -> None:
    second = _msg(transactionId="t2", leaseId=None, _status="retry", _error="later")
    assert backend.encode_ack_batch([_msg(), second], True, "billing") == (
        b'{"acknowledgments":['
        b'{"transactionId":"%s","partitionId":"%s","status":"completed","leaseId":"%s"},'
        b'{"transactionId":"t2","partitionId":"%s","status":"retry","error":"later"}],'
        b'"consumerGroup":"billing"}' % (TX.encode(), PID.encode(), LEASE.encode(), PID.encode())
    )
    assert backend.encode_ack_batch((_msg(leaseId=None),), "failed", None, "e") == (
        b'{"acknowledgments":[{"transactionId":"%s","partitionId":"%s","status":"failed","error":"e"}]}'
        % (TX.encode(), PID.encode())
    )
    with pytest.raises(InvalidInputError):
        backend.encode_ack_batch([], True, "g")


def test_transaction_matches_capture(backend: types.ModuleType) -> None:
    # tutorial03.q26.jsonl: push op + ack op carrying its leaseId (requiredLeases is not needed)
    push = backend.build_tx_push_op(
        "inv", "acme", [{"data": {"invoiceId": "INV-A-1", "amount": 120.5}, "transactionId": "354d"}]
    )
    ack = backend.build_tx_ack_op(_msg(), "completed", "tut-py-invoicing")
    assert ack == {"type": "ack", "transactionId": TX, "partitionId": PID, "status": "completed",
                   "consumerGroup": "tut-py-invoicing", "leaseId": LEASE}
    assert backend.encode_transaction([push, ack]) == (
        b'{"operations":[{"type":"push","items":[{"queue":"inv","partition":"acme",'
        b'"payload":{"invoiceId":"INV-A-1","amount":120.5},"transactionId":"354d"}]},'
        b'{"type":"ack","transactionId":"%s","partitionId":"%s","status":"completed",'
        b'"consumerGroup":"tut-py-invoicing","leaseId":"%s"}]}' % (TX.encode(), PID.encode(), LEASE.encode())
    )
    assert backend.build_tx_ack_op(_msg(leaseId=None), False, None) == {
        "type": "ack", "transactionId": TX, "partitionId": PID, "status": "failed"}
    # an error text is carried for the dead-letter row (last key, as in encode_ack)
    assert backend.build_tx_ack_op(_msg(), "dlq", "g", "bad invoice") == {
        "type": "ack", "transactionId": TX, "partitionId": PID, "status": "dlq", "consumerGroup": "g",
        "leaseId": LEASE, "error": "bad invoice"}
    assert backend.build_tx_ack_op(_msg(leaseId=None), "failed", None, error=404)["error"] == "404"
    assert "error" not in backend.build_tx_ack_op(_msg(), "failed", None, error=None)
    assert backend.encode_transaction((ack,)) == backend.encode_transaction([ack])
    with pytest.raises(InvalidInputError):
        backend.encode_transaction([])
    with pytest.raises(InvalidInputError):
        backend.build_tx_ack_op(_msg(), "maybe", "g")


def test_encode_renew(backend: types.ModuleType) -> None:
    assert backend.encode_renew() == b"{}"
    assert backend.encode_renew(None) == b"{}"
    assert backend.encode_renew(30) == b'{"seconds":30}'
    assert backend.encode_renew(2**31 - 1) == b'{"seconds":2147483647}'
    for bad in (0, -5, True, 1.5, "30", [30], 2**31, 2**64):
        with pytest.raises(InvalidInputError):
            backend.encode_renew(bad)


# --------------------------------------------------------------------------- decoding


POP_OK = (
    b'{"consumerGroup":"g","leaseId":"01a22b1d-8835-7000-a5fb-1167bb476180","messages":[{"consumerGroup":"g",'
    b'"createdAt":"2026-11-30T06:21:25.025905Z","data":{"i":0},"id":"01a22b1d-869c-7000-9a1b-010ce9462dc6",'
    b'"leaseId":"01a22b1d-8835-7000-a5fb-1167bb476180","partition":"p",'
    b'"partitionId":"f5ed7400-97a4-4a04-b0fb-d206d1384b11","producerSub":null,"traceId":null,'
    b'"transactionId":"dabf3b13-9446-4ff7-be92-52f2a7338203"}],"partition":"p",'
    b'"partitionId":"f5ed7400-97a4-4a04-b0fb-d206d1384b11","partitionsClaimed":1,"queue":"q","success":true}'
)


def test_decode_pop_messages(backend: types.ModuleType) -> None:
    msgs = backend.decode_pop(POP_OK)
    assert msgs == [{k: v for k, v in _msg().items()}]
    assert backend.decode_pop(POP_OK.decode()) == msgs  # str bodies too
    assert backend.decode_pop(bytearray(POP_OK)) == msgs


@pytest.mark.parametrize(
    "body",
    [
        b'{"success":false,"error":"no_available_partition","messages":[]}',
        b'{"success":false,"error":"partition_not_found","messages":[]}',
        b'{"success":false,"error":"lease_held","messages":[]}',
        b'{"success":false,"error":"lease_held"}',
        b'{"success":true,"queue":"q","partition":"p","partitionId":"x","leaseId":"l","partitionsClaimed":1,"messages":[]}',
        b'{"success":true,"queue":"q","partition":"","partitionId":null,"leaseId":null,"consumerGroup":"g","messages":[]}',
        b'{"messages":[],"paused":true}',  # pop maintenance (HTTP 204 with a body)
    ],
)
def test_decode_pop_empty_variants(backend: types.ModuleType, body: bytes) -> None:
    assert backend.decode_pop(body) == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"success":false,"error":"Queue paused","messages":[]}',
        b'{"error":"internal"}',
        b'{"success":false,"error":{"code":1}}',
        b'{"success":false,"error":["x"],"messages":[]}',
    ],
)
def test_decode_pop_refusals(backend: types.ModuleType, body: bytes) -> None:
    with pytest.raises(BrokerError) as info:
        backend.decode_pop(body)
    assert info.value.error == _json.loads(body)["error"]
    assert info.value.status == 200


@pytest.mark.parametrize(
    "body",
    [
        b"",
        None,
        b"<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>",
        POP_OK[:-1],
        POP_OK[: len(POP_OK) // 2],
        b"[]",
        b"null",
        b'"messages"',
        b"{}",
        b'{"success":true}',
        b'{"messages":{}}',
        b'{"messages":[1]}',
        b'{"messages":[{"id":1},null]}',
        b"\xff\xfe",
        12,
    ],
)
def test_decode_pop_malformed(backend: types.ModuleType, body: Any) -> None:
    with pytest.raises(ProtocolError):
        backend.decode_pop(body)


# POP_OK with a payload holding numbers beyond a double, as a broker with a JSONB payload sends it
BIG_INT = "1" + "0" * 400
POP_BIG = POP_OK.replace(b'"data":{"i":0}', b'"data":{"i":0,"big":%s,"huge":1e400,"tiny":-1E+400}' % BIG_INT.encode())


def test_decode_pop_numbers_beyond_double(backend: types.ModuleType) -> None:
    """orjson refuses ``1e400`` and a 401-digit int; the stdlib fallback decodes them (exact
    int, ``inf``) instead of failing the whole pop forever."""
    if _json.BACKEND == "orjson":  # the fast parser refuses it: the fallback is what decodes it
        with pytest.raises(ValueError):
            _json.loads(POP_BIG)
    msgs = backend.decode_pop(POP_BIG)
    assert len(msgs) == 1
    data = msgs[0]["data"]
    assert data["i"] == 0 and data["big"] == int(BIG_INT) and type(data["big"]) is int
    assert data["huge"] == float("inf") and data["tiny"] == float("-inf")
    assert {k: v for k, v in msgs[0].items() if k != "data"} == {k: v for k, v in _msg().items() if k != "data"}
    assert backend.decode_pop(POP_BIG.decode()) == msgs
    assert backend.decode_json(b"[1e400, %s]" % (b"9" * 5000)) == [float("inf"), float("inf")]  # past int digit limit
    # the fallback is no licence for non-JSON: NaN literals, UTF-16, trailing junk still refused
    for bad in (b'{"messages":[],"x":NaN}', b"[Infinity]", "[1]".encode("utf-16"), POP_BIG + b"x", b"[1e400"):
        with pytest.raises(ProtocolError):
            backend.decode_pop(bad)


@pytest.fixture
def stdlib_json(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A fresh copy of ``queen_sync._json`` imported with orjson hidden (the interpreters
    without orjson: PyPy, free-threaded builds)."""
    import importlib.util

    monkeypatch.setitem(sys.modules, "orjson", None)  # import orjson -> ImportError
    spec = importlib.util.spec_from_file_location("_queen_sync_json_stdlib", _json.__file__)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.BACKEND == "json"
    return mod


def test_stdlib_json_refuses_non_finite_floats(stdlib_json: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    nan, inf = float("nan"), float("inf")
    value = {"a": nan, "b": [inf, (-inf, 2.5)], "c": {"d": [nan]}, "e": "é", "f": None}
    expected = b'{"a":null,"b":[null,[null,2.5]],"c":{"d":[null]},"e":"\xc3\xa9","f":null}'
    with pytest.raises(stdlib_json.NonFiniteFloatError, match=r"at \$\.a\b"):
        stdlib_json.dumps(value)
    assert stdlib_json.dumps(value, nan_as_null=True) == expected
    if _json.BACKEND == "orjson":
        assert _json.dumps(value, nan_as_null=True) == expected  # same bytes as orjson
        with pytest.raises(_json.NonFiniteFloatError, match=r"at \$\.a\b"):
            _json.dumps(value)
    assert stdlib_json.dumps(nan, True) == b"null"
    assert stdlib_json.dumps({"x": 1.5}) == b'{"x":1.5}'
    loop: list = [nan]
    loop.append(loop)
    with pytest.raises(TypeError):  # a cycle is still refused (orjson: "Recursion limit reached")
        stdlib_json.dumps(loop, True)
    # through the pure codec, as on an interpreter without orjson
    monkeypatch.setattr(_pycodec, "_json", stdlib_json)
    with pytest.raises(InvalidInputError, match="NaN"):
        _pycodec.encode_push("q", None, [{"data": [nan, 1], "transactionId": "t"}])
    body, _ = _pycodec.encode_push("q", None, [{"data": [nan, 1], "transactionId": "t"}], nan_as_null=True)
    assert body == b'{"items":[{"queue":"q","payload":[null,1],"transactionId":"t"}]}'
    with pytest.raises(InvalidInputError):
        _pycodec.encode_json({"a": object()})


def test_stdlib_json_decodes_like_orjson(stdlib_json: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert stdlib_json.loads(POP_OK) == _json.loads(POP_OK)
    assert stdlib_json.loads(bytearray(b"[1]")) == [1]
    for bad in (b"NaN", b"[-Infinity]", "[1]".encode("utf-16"), b"\xff", b"[1] x"):
        with pytest.raises(ValueError):
            stdlib_json.loads(bad)
    monkeypatch.setattr(_pycodec, "_json", stdlib_json)
    assert _pycodec.decode_pop(POP_BIG)[0]["data"]["big"] == int(BIG_INT)  # via the fallback
    with pytest.raises(ProtocolError):
        _pycodec.decode_pop(b'{"messages":[NaN]}')


def test_decode_lists(backend: types.ModuleType) -> None:
    push = b'[{"index":0,"status":"queued","message_id":"m","partition_id":"p","transaction_id":"t","trace_id":null,"queueName":"q"}]'
    assert backend.decode_push_result(push) == _json.loads(push)
    assert backend.decode_push_result(b"[]") == []
    ack = b'[{"dlq":false,"error":null,"index":0,"leaseReleased":true,"success":true,"transactionId":"t"}]'
    assert backend.decode_ack_result(ack) == _json.loads(ack)
    renew = b'[{"index":0,"leaseId":"l","success":false,"error":"Lease not found","expiresAt":null}]'
    assert backend.decode_renew_result(renew) == _json.loads(renew)
    for fn in (backend.decode_push_result, backend.decode_ack_result, backend.decode_renew_result):
        with pytest.raises(BrokerError) as info:
            fn(b'{"error":"items array is required"}')
        assert info.value.error == "items array is required"
        for bad in (b"{}", b'{"success":true}', b"1", b'"x"', b"[1]", b"[{}, []]", b"", b"[", b"<html>"):
            with pytest.raises(ProtocolError):
                fn(bad)


def test_decode_transaction_result(backend: types.ModuleType) -> None:
    body = b'{"success":false,"error":"Lease expired","transactionId":"t","results":[]}'
    assert backend.decode_transaction_result(body) == _json.loads(body)
    for bad in (b"[]", b"null", b"", b"{", b"true"):
        with pytest.raises(ProtocolError):
            backend.decode_transaction_result(bad)


def test_decode_json(backend: types.ModuleType) -> None:
    assert backend.decode_json(b'{"a":[1,2.5,"\xc3\xa9"]}') == {"a": [1, 2.5, "é"]}
    assert backend.decode_json("[]") == []
    with pytest.raises(ProtocolError) as info:
        backend.decode_json(b"{oops")
    assert info.value.body == b"{oops"
    for bad in (b"", "", None, b"nan?", object()):
        with pytest.raises(ProtocolError):
            backend.decode_json(bad)


def test_concurrent_use_gives_same_bodies(backend: types.ModuleType) -> None:
    """The codec keeps no shared mutable state: threads encoding at once get the bodies a
    single thread gets (run on a free-threaded build this exercises real parallelism)."""
    import threading

    items = [{"data": {"n": i, "s": "x" * (i % 7)}, "traceId": TRACE if i % 3 else None} for i in range(50)]
    items = [{k: v for k, v in item.items() if v is not None} for item in items]
    expected = backend.encode_push("q", "p", items, counter_ids())[0]
    pop_body = POP_OK
    start = threading.Barrier(4)
    results: list = []
    lock = threading.Lock()

    def work() -> None:
        start.wait(timeout=30)
        got = [(backend.encode_push("q", "p", items, counter_ids())[0], backend.decode_pop(pop_body)) for _ in range(200)]
        with lock:
            results.extend(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 800
    assert all(body == expected for body, _ in results)
    assert all(msgs == [_msg()] for _, msgs in results)
    minted = backend.new_transaction_ids(1000)
    assert len(set(minted)) == 1000


# --------------------------------------------------------------------------- what PostgreSQL cannot store


@pytest.mark.parametrize(
    "payload, where",
    [
        ("a\x00b", "$.items[0].payload"),
        ({"k": ["x", "y\x00"]}, "$.items[0].payload.k[1]"),
        ({"k\x00": 1}, "$.items[0].payload['k\\x00']"),
    ],
)
def test_a_nul_character_is_refused_naming_where(backend: types.ModuleType, payload: Any, where: str) -> None:
    """PostgreSQL's jsonb cannot hold U+0000: the broker would fail the whole push (and retry
    it from its file buffer forever), so the codec refuses it, on every encode path."""
    items = [{"data": payload}, {"data": 2}]
    for call in (
        lambda: backend.encode_push("q", "p", items),
        lambda: backend.encode_push("q", None, items, counter_ids()),
        lambda: backend.encode_push_fragment("q", "p", items),
        lambda: backend.encode_json({"items": [{"payload": payload}]}),
    ):
        with pytest.raises(InvalidInputError, match="NUL character") as info:
            call()
        assert where.replace("$.items[0]", "") in str(info.value)
    fragment_error = pytest.raises(InvalidInputError, match=r"at \$\[0\]\.payload")
    with fragment_error:
        backend.encode_push_fragment("q", "p", items)


def test_the_text_backslash_u0000_is_not_a_nul(backend: types.ModuleType) -> None:
    """A payload holding the six characters ``\\u0000`` (an escaped backslash on the wire) is sent."""
    for text in ("\\u0000", "a\\\\\\u0000", "\\"):
        body, _ = backend.encode_push("q", None, [{"data": text}], counter_ids())
        assert _json.loads(body)["items"][0]["payload"] == text
    assert backend.encode_json({"e": "\\u0000"}) == b'{"e":"\\\\u0000"}'


def test_a_transaction_id_longer_than_the_broker_stores_is_refused(backend: types.ModuleType) -> None:
    ok = [{"data": 1, "transactionId": "t" * 255}]
    assert backend.encode_push("q", None, ok)[1] == ["t" * 255]
    too_long = [{"data": 1}, {"data": 2, "transactionId": "é" * 256}]
    for fn in (backend.build_push_items, backend.encode_push, backend.encode_push_fragment, backend.build_tx_push_op):
        with pytest.raises(InvalidInputError, match=r"item 1: transactionId is 256 characters; the broker stores at most 255"):
            fn("q", None, too_long)
