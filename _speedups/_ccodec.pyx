# cython: language_level=3, freethreading_compatible=True
# cython: wraparound=False, cdivision=True, embedsignature=True
"""Compiled twin of :mod:`queen_sync._pycodec` (built as ``queen_sync._ccodec``).

Every function here has the name, signature, behaviour and exceptions of its pure-Python
twin, and gives byte-identical bodies / equal decoded values for the same input (see
``tests/test_codec_parity.py``); the docstrings of ``queen_sync._pycodec`` are the contract.
The speed comes from direct C-API calls, minting UUIDv7 ids from one ``os.urandom`` call
per batch with the hex formatted in C, and a single ``orjson`` call per body: a push of
payload-only items is spliced from one orjson pass over the payloads, without wire dicts.
The push encode lives in ``_push.pxi`` and the decode of flat-object list replies (push
results, ack verdicts, lease extensions) in ``_replies.pxi``, both included below (one
extension module, three files).

The module keeps no mutable state of its own (it is declared free-threading compatible):
module globals are constants bound at import time; the one pool of random bytes for single
ids is a ``_pycodec.RandomPool`` (lock-free under the GIL, bypassed on a free-threaded build).
"""

from cpython.dict cimport PyDict_GetItemWithError, PyDict_Check, PyDict_CheckExact, PyDict_Contains, PyDict_Copy, PyDict_Next, PyDict_Values, PyDict_SetItem, PyDict_Size
from cpython.list cimport PyList_Check
from cpython.long cimport PyLong_CheckExact, PyLong_AsUnsignedLongLong
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
    PyTypeObject PyFloat_Type
    PyTypeObject PyUnicode_Type
    PyTypeObject PyLong_Type
    PyTypeObject PyBool_Type
    PyTypeObject PyDict_Type
    PyTypeObject PyList_Type
    PyTypeObject PyTuple_Type
from cpython.float cimport PyFloat_CheckExact
from cpython.tuple cimport PyTuple_CheckExact
from cpython.unicode cimport PyUnicode_Check, PyUnicode_CheckExact, PyUnicode_GET_LENGTH
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_New, PyUnicode_1BYTE_DATA
from libc.string cimport memchr, memcpy
from libc.math cimport isfinite
from cpython.float cimport PyFloat_AS_DOUBLE

import sys as _sys
import sysconfig as _sysconfig
import time as _time
from collections.abc import Mapping as _Mapping

from queen_sync import _json
from queen_sync import _pycodec
from queen_sync.errors import BrokerError, InvalidInputError, ProtocolError

__all__ = list(_pycodec.__all__)

QUEUE_MODE = "__QUEUE_MODE__"
cdef Py_ssize_t MAX_TRANSACTION_ID_LENGTH = _pycodec.MAX_TRANSACTION_ID_LENGTH
MAX_LEASE_SECONDS = _pycodec.MAX_LEASE_SECONDS

#: ``error`` values of a pop reply that mean "nothing to deliver right now", not a failure.
EMPTY_POP_ERRORS = frozenset({"no_available_partition", "partition_not_found", "lease_held"})

# orjson itself (NaN / inf written as null: checked here) or, without orjson, the stdlib
# engine of queen_sync._json, which does its own NaN check
cdef object _raw_dumps = _json.raw_dumps
cdef object _dumps = _json.dumps
cdef bint _ORJSON = _json.BACKEND == "orjson"
cdef int _MAX_DEPTH = _json.MAX_DEPTH
cdef object _py_has_non_finite = _json._has_non_finite
cdef object _non_finite_error = _json.non_finite_error
cdef object _encode_error_text = _json.encode_error_text
cdef object _nul_error_text = _json.nul_error_text
cdef bint _FREE_THREADED = bool(_sysconfig.get_config_var("Py_GIL_DISABLED"))
# the namespace of time (the dict object, not a copy of the attributes in it)
cdef dict _time_dict = _time.__dict__
cdef object _loads = _json.loads
cdef object _loads_fallback = _json.loads_fallback
cdef tuple _DECODE_ERRORS = (_json.DecodeError, ValueError, TypeError)
cdef tuple _FALLBACK_ERRORS = (ValueError, TypeError, RecursionError)
cdef tuple _ENCODE_ERRORS = (TypeError, ValueError, OverflowError)
cdef object _MISSING = object()
# error path of build_push_items: the pure backend builds the message (same text in both)
cdef object _push_item_key_error = _pycodec._push_item_key_error

# True / False are handled apart: 1 / 0 / 1.0 hash like them and must not pass
cdef dict _STATUS_ALIASES = {
    "completed": "completed",
    "success": "completed",
    "failed": "failed",
    "retry": "retry",
    "dlq": "dlq",
}

cdef const char* _HEXDIGITS = b"0123456789abcdef"
cdef unsigned char _HEXPAIRS[512]
cdef int _b
for _b in range(256):
    _HEXPAIRS[2 * _b] = _HEXDIGITS[_b >> 4]
    _HEXPAIRS[2 * _b + 1] = _HEXDIGITS[_b & 0x0F]

# the push item keys, interned: keys written in a dict literal are these very objects
cdef str _K_DATA = _sys.intern("data")
cdef str _K_PAYLOAD = _sys.intern("payload")
cdef str _K_TX = _sys.intern("transactionId")
cdef str _K_TRACE = _sys.intern("traceId")
cdef str _K_QUEUE = _sys.intern("queue")
cdef str _K_PARTITION = _sys.intern("partition")
# wire item templates: the keys in wire order (read-only: only ever copied)
cdef dict _WIRE_QP = {_K_QUEUE: None, _K_PARTITION: None, _K_PAYLOAD: None, _K_TX: None}
cdef dict _WIRE_Q = {_K_QUEUE: None, _K_PAYLOAD: None, _K_TX: None}


# --------------------------------------------------------------------------- ids


cdef inline void _hex2(unsigned char* p, unsigned char b) noexcept:
    memcpy(p, &_HEXPAIRS[2 * b], 2)


cdef inline void _uuid7_into(unsigned char* p, unsigned long long ms, const unsigned char* r) noexcept:
    """Write one UUIDv7 (36 ASCII bytes) at ``p`` from a 48-bit millisecond time and 10
    random bytes (the same bit layout as the pure backend: version 7, 12 random bits,
    variant 0b10, 62 random bits)."""
    # unrolled: constant offsets let the compiler emit one 2-byte store per byte
    _hex2(p, <unsigned char>(ms >> 40))
    _hex2(p + 2, <unsigned char>(ms >> 32))
    _hex2(p + 4, <unsigned char>(ms >> 24))
    _hex2(p + 6, <unsigned char>(ms >> 16))
    p[8] = 45  # '-'
    _hex2(p + 9, <unsigned char>(ms >> 8))
    _hex2(p + 11, <unsigned char>ms)
    p[13] = 45
    _hex2(p + 14, <unsigned char>(0x70 | (r[0] >> 4)))
    _hex2(p + 16, <unsigned char>(((r[0] & 0x0F) << 4) | (r[1] >> 4)))
    p[18] = 45
    _hex2(p + 19, <unsigned char>(0x80 | (r[2] & 0x3F)))
    _hex2(p + 21, r[3])
    p[23] = 45
    _hex2(p + 24, r[4])
    _hex2(p + 26, r[5])
    _hex2(p + 28, r[6])
    _hex2(p + 30, r[7])
    _hex2(p + 32, r[8])
    _hex2(p + 34, r[9])


cdef inline str _uuid7(unsigned long long ms, const unsigned char* r):
    """One UUIDv7 string (see :func:`_uuid7_into`)."""
    cdef str s = PyUnicode_New(36, 127)
    _uuid7_into(<unsigned char*>PyUnicode_1BYTE_DATA(s), ms, r)
    return s


cdef inline str _ascii_str(const char* p, Py_ssize_t n):
    """A new ASCII ``str`` of the ``n`` bytes at ``p``."""
    cdef str s = PyUnicode_New(n, 127)
    memcpy(PyUnicode_1BYTE_DATA(s), p, n)
    return s


cdef inline unsigned long long _now_ms() except? 0xFFFFFFFFFFFFFFFF:
    """``time.time_ns() // 1_000_000``, looked up at call time (tests fix the clock by
    patching ``time.time_ns``) but divided in C."""
    cdef object ns = _module_attr(_time_dict, _time, "time_ns")()
    return PyLong_AsUnsignedLongLong(ns) // 1000000


cdef object _pool_take = _pycodec.RandomPool().take  # this backend's own pool


cdef inline bytes _urandom(Py_ssize_t n):
    """``os.urandom(n)``, through this backend's ``_pycodec.RandomPool`` (pooled for one id's
    10 bytes; ``os.urandom`` looked up at call time: tests fix the randomness by patching it)."""
    return _pool_take(n)


cdef inline object _module_attr(dict namespace, object module, str name):
    """``module.name`` for a plain module: one lookup in its ``__dict__`` instead of the
    generic attribute machinery (the free-threaded build keeps the generic path, whose
    reference handling is safe against a concurrent patch)."""
    cdef PyObject* found
    if not _FREE_THREADED:
        found = PyDict_GetItemWithError(namespace, name)
        if found != NULL:
            return <object>found
    return getattr(module, name)


def new_transaction_ids(Py_ssize_t n):
    """Mint ``n`` UUIDv7 strings (RFC 9562): 48-bit Unix milliseconds, version 7, 74 random
    bits from ``os.urandom``. Ids minted in a later millisecond sort after earlier ones."""
    cdef unsigned long long ms = _now_ms()
    cdef bytes raw = _urandom(10 * n)
    cdef const unsigned char* buf = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t i
    cdef list out = []
    for i in range(n):
        out.append(_uuid7(ms, buf + 10 * i))
    return out


def new_transaction_id():
    """Mint one UUIDv7 string (see :func:`new_transaction_ids`)."""
    cdef unsigned long long ms = _now_ms()
    cdef bytes raw = _urandom(10)
    return _uuid7(ms, <const unsigned char*>PyBytes_AS_STRING(raw))


cdef bint _is_uuid(object value):
    cdef str s
    cdef Py_UCS4 c
    cdef Py_ssize_t i = 0
    if not isinstance(value, str):
        return False
    s = <str>value
    if len(s) != 36:
        return False
    for c in s:
        if i == 8 or i == 13 or i == 18 or i == 23:
            if c != u'-':
                return False
        elif not ((u'0' <= c <= u'9') or (u'a' <= c <= u'f') or (u'A' <= c <= u'F')):
            return False
        i += 1
    return True


def is_uuid(value):
    """True when ``value`` is a str in canonical 8-4-4-4-12 hex UUID form (any version)."""
    return _is_uuid(value)


cdef inline str _normalize_status(object status):
    cdef object v
    if status is True:
        return "completed"
    if status is False:
        return "failed"
    if isinstance(status, str):
        v = _STATUS_ALIASES.get(status)
        if v is not None:
            return <str>v
    raise InvalidInputError(
        "ack status must be True, False, 'completed', 'success', 'failed', 'retry' or 'dlq', got %r" % (status,)
    )


def normalize_status(status):
    """Map an ack status to its wire string (see ``queen_sync._pycodec.normalize_status``)."""
    return _normalize_status(status)


# --------------------------------------------------------------------------- push


include "_push.pxi"


# --------------------------------------------------------------------------- ack


_DICT_GET = dict.get


cdef tuple _ack_ids(object message, str where):
    if not isinstance(message, _Mapping):
        raise InvalidInputError(
            "%s: a message must be a dict as returned by pop(), got %s" % (where, type(message).__name__)
        )
    tx = _mget(message, "transactionId", None)
    pid = _mget(message, "partitionId", None)
    if not isinstance(tx, str) or not tx:
        raise InvalidInputError("%s: message has no transactionId" % where)
    if not isinstance(pid, str) or not pid:
        raise InvalidInputError("%s: message has no partitionId" % where)
    return tx, pid


def encode_ack(message, status, group, error=None):
    """Encode a ``POST /api/v1/ack`` body for one message (see
    ``queen_sync._pycodec.encode_ack``)."""
    tx, pid = _ack_ids(message, "ack")
    st = _normalize_status(_mget(message, "_status", status))
    err = _mget(message, "_error", error)
    cdef dict body = {"transactionId": tx, "partitionId": pid, "status": st}
    if group is not None:
        body["consumerGroup"] = group
    lease = _mget(message, "leaseId", None)
    if lease:
        body["leaseId"] = lease
    if err is not None:
        body["error"] = str(err)
    return _encode(body)


def encode_ack_batch(messages, status, group, error=None):
    """Encode a ``POST /api/v1/ack/batch`` body ``{"acknowledgments": [...],
    "consumerGroup"?}`` (see ``queen_sync._pycodec.encode_ack_batch``)."""
    if not messages:
        raise InvalidInputError("refusing to send an empty batch ack (a Queen 0.15 broker never answers one)")
    cdef list acks = []
    cdef dict item
    cdef Py_ssize_t i = 0
    cdef object plain = dict  # a dict type whose get() is dict's own (read in C below)
    for message in messages:
        t = type(message)
        if t is not plain and PyDict_Check(message) and t.get is _DICT_GET:
            plain = t  # e.g. queen_sync.Message: its get() is dict.get
        if t is plain:
            # the common case, in C: the same checks as _ack_ids, its error text made only
            # when one fails (a %-format per item cost as much as the rest of the item)
            tx = (<dict>message).get("transactionId")
            pid = (<dict>message).get("partitionId")
            if not (PyUnicode_Check(tx) and PyUnicode_GET_LENGTH(tx) > 0
                    and PyUnicode_Check(pid) and PyUnicode_GET_LENGTH(pid) > 0):
                _ack_ids(message, "ack item %d" % i)  # raises
            item = {"transactionId": tx, "partitionId": pid,
                    "status": _normalize_status((<dict>message).get("_status", status))}
            lease = (<dict>message).get("leaseId")
            err = (<dict>message).get("_error", error)
        else:
            tx, pid = _ack_ids(message, "ack item %d" % i)
            item = {"transactionId": tx, "partitionId": pid,
                    "status": _normalize_status(_mget(message, "_status", status))}
            lease = _mget(message, "leaseId", None)
            err = _mget(message, "_error", error)
        if lease:
            item["leaseId"] = lease
        if err is not None:
            item["error"] = str(err)
        acks.append(item)
        i += 1
    cdef dict body = {"acknowledgments": acks}
    if group is not None:
        body["consumerGroup"] = group
    return _encode(body)


# --------------------------------------------------------------------------- transaction


def build_tx_push_op(queue, partition, items, id_source=None):
    """Build a transaction push operation ``{"type": "push", "items": [...]}``."""
    if not items:
        raise InvalidInputError("a transaction push needs at least one item")
    return {"type": "push", "items": _build_push_items(queue, partition, items, id_source)}


def build_tx_ack_op(message, status, group, error=None):
    """Build a transaction ack operation (see ``queen_sync._pycodec.build_tx_ack_op``)."""
    tx, pid = _ack_ids(message, "transaction ack")
    cdef dict op = {"type": "ack", "transactionId": tx, "partitionId": pid, "status": _normalize_status(status)}
    if group is not None:
        op["consumerGroup"] = group
    lease = _mget(message, "leaseId", None)
    if lease:
        op["leaseId"] = lease
    if error is not None:
        op["error"] = str(error)
    return op


def encode_transaction(operations, nan_as_null=False):
    """Encode a ``POST /api/v1/transaction`` body ``{"operations": [...]}``."""
    if not operations:
        raise InvalidInputError("Transaction has no operations to commit")
    return _encode({"operations": list(operations)}, nan_as_null)


# --------------------------------------------------------------------------- lease


def encode_renew(seconds=None):
    """Encode a ``POST /api/v1/lease/{leaseId}/extend`` body: ``{}`` or ``{"seconds": N}``.
    ``N`` is 1 to ``MAX_LEASE_SECONDS`` (the broker's 32-bit integer), else InvalidInputError."""
    if seconds is None:
        return b"{}"
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_LEASE_SECONDS:
        raise InvalidInputError(
            "lease extension must be an int of seconds >= 1 and <= %d, got %r" % (MAX_LEASE_SECONDS, seconds)
        )
    return _encode({"seconds": seconds})


# --------------------------------------------------------------------------- decoding


cdef inline object _raw(object body):
    return body if isinstance(body, bytes) else None


cdef object _decode(object body):
    if not body:
        raise ProtocolError("empty response body", body)
    cdef str reason
    try:
        return _loads(body)
    except _DECODE_ERRORS as exc:
        reason = str(exc)
    # numbers beyond a double (1e400, a 401-digit int): see queen_sync._json.loads_fallback
    try:
        return _loads_fallback(body)
    except _FALLBACK_ERRORS:
        raise ProtocolError("response body is not JSON: %s" % reason, _raw(body)) from None


def decode_json(body):
    """Parse a response body (bytes / str). Raises :class:`ProtocolError` on invalid JSON."""
    return _decode(body)


cdef object _refusal(dict doc, str what):
    err = doc.get("error")
    return BrokerError("%s refused by the broker: %s" % (what, err), status=200, error=err, body=doc)


def decode_pop(body):
    """Decode a pop reply into its list of message dicts (see
    ``queen_sync._pycodec.decode_pop``)."""
    cdef object doc = _decode(body)
    cdef object messages, err, m
    if not PyDict_Check(doc):
        raise ProtocolError("pop reply is not a JSON object", _raw(body))
    messages = (<dict>doc).get("messages")
    err = (<dict>doc).get("error")
    if err is not None and not (isinstance(err, str) and err in EMPTY_POP_ERRORS):
        raise _refusal(<dict>doc, "pop")
    if messages is None:
        if err is not None:
            return []
        raise ProtocolError("pop reply has no 'messages' list", _raw(body))
    if type(messages) is not list:
        if not isinstance(messages, list):
            raise ProtocolError("pop reply 'messages' is not a list", _raw(body))
    for m in <list>messages:
        if not PyDict_Check(m):
            raise ProtocolError("pop reply holds a message that is not an object", _raw(body))
    return messages


include "_replies.pxi"


cdef list _decode_list(object body, str what):
    cdef object doc = _decode_flat_list(body)
    if doc is not None:
        return <list>doc  # a list of dicts, by construction
    doc = _decode(body)
    cdef object r
    if PyDict_Check(doc):
        if "error" in <dict>doc:
            raise _refusal(<dict>doc, what)
        raise ProtocolError("%s reply is an object, expected a list" % what, _raw(body))
    if not isinstance(doc, list):
        raise ProtocolError("%s reply is not a list" % what, _raw(body))
    for r in <list>doc:
        if not PyDict_Check(r):
            raise ProtocolError("%s reply holds an item that is not an object" % what, _raw(body))
    return <list>doc


def decode_push_result(body):
    """Decode a push reply: a list of result dicts in input order."""
    return _decode_list(body, "push")


def decode_push_reply(body, Py_ssize_t count):
    """Decode and check the reply to a push of ``count`` items in one pass: ``(results,
    failed)`` (see ``queen_sync._pycodec.decode_push_reply``)."""
    cdef object doc = _decode_flat_list(body)
    cdef object r
    cdef Py_ssize_t failed = 0
    if doc is None:
        doc = _decode(body)
    if PyDict_Check(doc):
        if "error" in <dict>doc:
            raise _refusal(<dict>doc, "push")
        raise ProtocolError("push reply is an object, expected a list", _raw(body))
    if not isinstance(doc, list):
        raise ProtocolError("push reply is not a list", _raw(body))
    for r in <list>doc:  # one pass: the item check and the failed count
        if not PyDict_Check(r):
            raise ProtocolError("push reply holds an item that is not an object", _raw(body))
        if (<dict>r).get("status") == "failed":
            failed += 1
    if len(<list>doc) != count:
        raise ProtocolError(
            "push reply has %d results for %d items; the outcome is unknown" % (len(<list>doc), count), _raw(body)
        )
    return doc, failed


def decode_ack_result(body):
    """Decode an ack / batch-ack reply: a list of per-item result dicts."""
    return _decode_list(body, "ack")


def decode_ack_reply(body, Py_ssize_t count):
    """Decode and check the reply to an ack of ``count`` messages in one pass: ``(results,
    refused)`` (see ``queen_sync._pycodec.decode_ack_reply``)."""
    cdef list results = _decode_list(body, "ack")
    cdef object r
    cdef Py_ssize_t refused = 0
    if len(results) != count:
        raise ProtocolError("ack reply has %d results for %d messages" % (len(results), count), _raw(body))
    for r in results:
        if (<dict>r).get("success") is not True:
            refused += 1
    return results, refused


def decode_renew_result(body):
    """Decode a lease-extend reply: a list of ``{index, leaseId, success, error, expiresAt}``."""
    return _decode_list(body, "lease extend")


def decode_transaction_result(body):
    """Decode a transaction reply ``{success, transactionId, results, error?}``."""
    cdef object doc = _decode(body)
    if not PyDict_Check(doc):
        raise ProtocolError("transaction reply is not a JSON object", _raw(body))
    return doc


# --------------------------------------------------------------------------- buffered push


def encode_push_fragment(queue, partition, items, id_source=None, nan_as_null=False):
    """Build and encode push items as a fragment: the comma-separated JSON objects of a
    ``{"items": [...]}`` body without the brackets (see
    ``queen_sync._pycodec.encode_push_fragment``). Returns ``(fragment, transaction_ids)``."""
    cdef list ids = []
    cdef object frag = _encode_push_seq(queue, partition, items, id_source, nan_as_null, False, ids)
    return frag, ids


def join_push_fragments(fragments):
    """Join fragments from :func:`encode_push_fragment` into one ``POST /api/v1/push`` body
    ``{"items":[...]}`` (see ``queen_sync._pycodec.join_push_fragments``)."""
    if not fragments or not all(fragments):
        raise InvalidInputError("join_push_fragments needs at least one non-empty fragment")
    return b'{"items":[' + b",".join(fragments) + b"]}"


# Names appended to the pure backend's ``__all__`` after this file was last mirrored are
# borrowed from it so ``queen_sync.codec`` keeps working; ``_BORROWED`` lists them and
# ``tests/test_codec_parity.py`` fails until they are compiled here too.
_BORROWED = tuple(_name for _name in _pycodec.__all__ if _name not in globals())
for _name in _BORROWED:
    globals()[_name] = getattr(_pycodec, _name)
