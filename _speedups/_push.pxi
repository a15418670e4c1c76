# Included by _ccodec.pyx (one extension module: this file is part of its text, compiled in
# its namespace). It owns the push encode: the wire-item builders (one pass for exact dicts,
# two passes otherwise, in the pure backend's error order), the body scans (``null``, NaN /
# +-inf walk, escaped NUL), and the spliced body of payload-only items (one orjson pass).


cdef inline object _mget(object m, object key, object default):
    if PyDict_CheckExact(m):
        return (<dict>m).get(key, default)
    return m.get(key, default)


cdef list _build_push_items(object queue, object partition, object items, object id_source, list payloads=None):
    """Wire items for ``items``: the one-pass fast path for the common case (exact dicts, ids
    minted here), else the two-pass builder, which also reports errors in the pure
    backend's order."""
    cdef list seq
    if id_source is None:
        len(items)  # a sized sequence, as in the pure backend (a generator raises TypeError)
        if type(items) is list:
            seq = <list>items
        else:
            seq = list(items)
        result = _build_push_fast(queue, partition, seq, payloads)
        if result is not None:
            return <list>result
        if payloads is not None:
            del payloads[:]
        items = seq
    return _build_push_two_pass(queue, partition, items, id_source)


cdef inline int _item_key(PyObject* key):
    """1: ``data`` / ``payload``, 2: ``transactionId``, 3: ``traceId``, 0: anything else.
    Interned keys (dict literals) match by pointer; others (decoded JSON) by value."""
    if key == <PyObject*>_K_DATA or key == <PyObject*>_K_PAYLOAD:
        return 1
    if key == <PyObject*>_K_TX:
        return 2
    if key == <PyObject*>_K_TRACE:
        return 3
    if not PyUnicode_Check(<object>key):
        return 0
    cdef str k = <str>key
    if k == _K_DATA or k == _K_PAYLOAD:
        return 1
    if k == _K_TX:
        return 2
    if k == _K_TRACE:
        return 3
    return 0


cdef object _build_push_fast(object queue, object partition, list seq, list payloads):
    """One pass per item: keys checked by a single walk of the item dict, the id minted
    from one urandom call per batch, the wire dict built. Returns ``None`` (nothing
    observable done) at the first item that is not an exact dict or breaks a rule: the
    two-pass builder then handles the batch and raises in the pure backend's order."""
    cdef Py_ssize_t n = len(seq)
    cdef Py_ssize_t i, pos, j = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef PyObject* pl
    cdef PyObject* txp
    cdef PyObject* trp
    cdef int kind
    cdef object item, tx
    cdef dict wire
    cdef list out = []
    cdef bint has_partition = partition is not None
    cdef bytes raw = _urandom(10 * n)
    cdef const unsigned char* buf = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef unsigned long long ms = _now_ms()
    # every key in its final place: a copy then only replaces values (no insertion). One
    # item: the module's constant template (never written to), queue / partition set on
    # the copy; more: a template for this call, so that each copy only needs two values.
    cdef dict template = _WIRE_QP if has_partition else _WIRE_Q
    cdef bint per_item = n == 1
    if not per_item:
        template = PyDict_Copy(template)
        PyDict_SetItem(template, _K_QUEUE, queue)
        if has_partition:
            PyDict_SetItem(template, _K_PARTITION, partition)
    for i in range(n):
        item = seq[i]
        if not PyDict_CheckExact(item):
            return None
        pl = txp = trp = NULL
        pos = 0
        while PyDict_Next(item, &pos, &key, &value):
            kind = _item_key(key)
            if kind == 1:
                if pl != NULL:
                    return None
                pl = value
            elif kind == 2:
                txp = value
            elif kind == 3:
                trp = value
            else:
                return None
        if pl == NULL:
            return None
        if txp == NULL or <object>txp is None:
            tx = _uuid7(ms, buf + 10 * j)
            j += 1
        elif PyUnicode_Check(<object>txp) and 0 < PyUnicode_GET_LENGTH(<object>txp) <= MAX_TRANSACTION_ID_LENGTH:
            tx = <object>txp
        else:
            return None
        # a copy of the template (its key table is cloned, not rebuilt)
        wire = PyDict_Copy(template)
        if per_item:
            PyDict_SetItem(wire, _K_QUEUE, queue)
            if has_partition:
                PyDict_SetItem(wire, _K_PARTITION, partition)
        PyDict_SetItem(wire, _K_PAYLOAD, <object>pl)
        PyDict_SetItem(wire, _K_TX, tx)
        if trp != NULL and <object>trp is not None:
            if not _is_uuid(<object>trp):
                return None
            PyDict_SetItem(wire, _K_TRACE, <object>trp)
        # Not tracked by the cycle collector: a wire dict holds str and the caller's payload,
        # so it can only be in a cycle if the caller later puts it inside that payload. This
        # spares the collector a traversal of every wire dict (about 20% of the build).
        PyObject_GC_UnTrack(wire)
        out.append(wire)
        if payloads is not None:
            payloads.append(<object>pl)  # for the NaN check: no lookup in the wire dict then
    return out


cdef list _build_push_two_pass(object queue, object partition, object items, object id_source):
    cdef Py_ssize_t n = len(items)
    cdef Py_ssize_t i, missing = 0
    cdef list seq
    cdef list out
    cdef dict d, wire
    cdef object item, payload, tx, trace
    cdef list minted = None
    cdef bytes raw = None
    cdef const unsigned char* buf = NULL
    cdef unsigned long long ms = 0
    cdef Py_ssize_t j = 0
    cdef bint has_partition = partition is not None
    cdef bint has_data, has_tx

    if type(items) is list:
        seq = <list>items
    else:
        seq = list(items)
    n = len(seq)
    for i in range(n):
        item = seq[i]
        if PyDict_CheckExact(item):
            # exactly one of data / payload, and no key but those and transactionId / traceId:
            # count the known keys found and compare with the dict's size
            d = <dict>item
            has_data = PyDict_Contains(d, "data")
            tx = d.get("transactionId", _MISSING)
            if (has_data == PyDict_Contains(d, "payload")
                    or PyDict_Size(d) != 1 + (tx is not _MISSING) + PyDict_Contains(d, "traceId")):
                raise _push_item_key_error(i, item)
        elif isinstance(item, _Mapping):
            has_data = "data" in item
            has_tx = "transactionId" in item
            if has_data == ("payload" in item) or len(item) != 1 + has_tx + ("traceId" in item):
                raise _push_item_key_error(i, item)
            tx = item["transactionId"] if has_tx else None
        else:
            raise InvalidInputError(
                "item %d: a push item must be a dict such as {'data': ...}, got %s" % (i, type(item).__name__)
            )
        if tx is None or tx is _MISSING:
            missing += 1

    if missing:
        if id_source is not None:
            # like the pure backend: every missing id is asked for before anything is built
            minted = [id_source() for _ in range(missing)]
        else:
            ms = _now_ms()
            raw = _urandom(10 * missing)
            buf = <const unsigned char*>PyBytes_AS_STRING(raw)

    out = []
    for i in range(n):
        item = seq[i]
        if PyDict_CheckExact(item):
            d = <dict>item
            payload = d.get("data", _MISSING)
            if payload is _MISSING:
                payload = d["payload"]
            tx = d.get("transactionId")
        else:
            payload = item["data"] if "data" in item else item["payload"]
            tx = item.get("transactionId")
        if tx is None:
            if j >= missing:  # items changed under us (id_source side effect or another thread)
                raise IndexError("push items changed while being encoded")
            if minted is not None:
                tx = minted[j]
            else:
                tx = _uuid7(ms, buf + 10 * j)
            j += 1
        elif not isinstance(tx, str) or not tx:
            raise InvalidInputError("item %d: transactionId must be a non-empty str, got %r" % (i, tx))
        elif len(tx) > MAX_TRANSACTION_ID_LENGTH:
            raise InvalidInputError(
                "item %d: transactionId is %d characters; the broker stores at most %d (a longer one fails the "
                "whole push there)" % (i, len(tx), MAX_TRANSACTION_ID_LENGTH)
            )
        wire = {"queue": queue}
        if has_partition:
            wire["partition"] = partition
        wire["payload"] = payload
        wire["transactionId"] = tx
        trace = _mget(item, "traceId", None)
        if trace is not None:
            if not _is_uuid(trace):
                raise InvalidInputError(
                    "item %d: traceId must be a UUID string (a 0.15 broker loops forever on any other), got %r"
                    % (i, trace)
                )
            wire["traceId"] = trace
        out.append(wire)
    return out


def build_push_items(queue, partition, items, id_source=None):
    """Turn user items into wire push items, in order (see
    ``queen_sync._pycodec.build_push_items``)."""
    return _build_push_items(queue, partition, items, id_source)


cdef inline Py_ssize_t _count_null(bytes body) noexcept:
    """How many ``null`` in ``body`` (:func:`_span_count_null`)."""
    cdef const char* p = PyBytes_AS_STRING(body)
    return _span_count_null(p, p + PyBytes_GET_SIZE(body))


cdef inline Py_ssize_t _span_count_null(const char* p, const char* end) noexcept:
    """How many ``null`` within ``[p, end)`` (a ``"null"`` inside a string counts too):
    memchr for each ``n`` (portable C, where ``memmem`` is not)."""
    cdef Py_ssize_t k = 0
    end -= 3
    while p < end:
        p = <const char*>memchr(p, 110, end - p)  # 'n'
        if p == NULL:
            break
        if p[1] == 117 and p[2] == 108 and p[3] == 108:  # "ull"
            k += 1
            p += 4
        else:
            p += 1
    return k


cdef inline bint _has_nul_escape(bytes body) noexcept:
    """``queen_sync._json.has_nul_escape``: an escaped U+0000 (``\\u0000`` after an odd run of
    backslashes). Bodies rarely hold a backslash at all, so this is mostly one memchr."""
    cdef const char* p = PyBytes_AS_STRING(body)
    cdef const char* end = p + PyBytes_GET_SIZE(body)
    cdef const char* q
    while p < end:
        p = <const char*>memchr(p, 92, end - p)  # '\\'
        if p == NULL:
            return False
        q = p
        while q < end and q[0] == 92:
            q += 1
        if (q - p) % 2 == 1 and end - q >= 5 and q[0] == 117 and q[1] == 48 and q[2] == 48 and q[3] == 48 and q[4] == 48:
            return True  # "u0000" after an odd run: the last backslash escapes it
        p = q
    return False


cdef inline int _value_non_finite(PyObject* v, int depth) except -1:
    """:func:`_has_non_finite` for a value inside a container, its type classified here
    (exact type pointers, most common first) so that only containers cost a call."""
    cdef PyTypeObject* t = Py_TYPE(<object>v)
    if t == &PyUnicode_Type or t == &PyLong_Type or v == <PyObject*>None or t == &PyBool_Type:
        return 0
    if t == &PyFloat_Type:
        return 0 if isfinite(PyFloat_AS_DOUBLE(<object>v)) else 1
    return _has_non_finite(v, depth)


cdef int _has_non_finite(PyObject* o, int depth) except -1:
    """1 when ``o`` holds a NaN / ±inf float where orjson would write it (compiled form of
    ``queen_sync._json._has_non_finite``, which handles the unusual types: subclasses,
    Enum, dataclass). Walks borrowed references without running Python code (GIL builds;
    free-threaded ones use the pure walk)."""
    cdef PyTypeObject* t = Py_TYPE(<object>o)
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t i
    cdef PyObject* v
    if t == &PyFloat_Type:
        return 0 if isfinite(PyFloat_AS_DOUBLE(<object>o)) else 1
    if depth >= _MAX_DEPTH:
        return 0
    depth += 1
    if t == &PyDict_Type:
        while PyDict_Next(<object>o, &pos, NULL, &v):
            if _value_non_finite(v, depth):
                return 1
        return 0
    if t == &PyList_Type:
        # by index, the size read each time: nothing here can change the list, but the
        # walk does not rely on it
        i = 0
        while i < PyList_GET_SIZE(<object>o):
            v = PyList_GET_ITEM(<object>o, i)
            i += 1
            if _value_non_finite(v, depth):
                return 1
        return 0
    if t == &PyTuple_Type:
        for i in range(PyTuple_GET_SIZE(<object>o)):
            if _value_non_finite(PyTuple_GET_ITEM(<object>o, i), depth):
                return 1
        return 0
    if t == &PyUnicode_Type or t == &PyLong_Type or o == <PyObject*>None or t == &PyBool_Type:
        return 0
    return 1 if _py_has_non_finite(<object>o, depth - 1) else 0


cdef enum:
    _BFS_MAX = 256


cdef int _counted_non_finite(PyObject* o, Py_ssize_t nulls) except -1:
    """:func:`_has_non_finite` (``o`` at depth 0) for an object whose JSON text holds at most
    ``nulls`` nulls, done as soon as that many ``None`` were met: each None is written as
    one null, so none is left for a NaN. Breadth first (an object's own None fields are
    met before its nested containers are walked); past ``_BFS_MAX`` queued containers, or
    at an unusual type, the depth-first walk from the top instead."""
    cdef PyObject* queue[_BFS_MAX]
    cdef int depths[_BFS_MAX]
    cdef Py_ssize_t head = 0, tail = 1, nones = 0, pos, i, n = 0
    cdef PyObject* c
    cdef PyObject* v
    cdef PyTypeObject* t
    cdef PyTypeObject* tc
    cdef int d
    if o == <PyObject*>None:
        return 0
    tc = Py_TYPE(<object>o)
    if tc != &PyDict_Type and tc != &PyList_Type and tc != &PyTuple_Type:
        return _has_non_finite(o, 0)
    queue[0] = o
    depths[0] = 0
    while head < tail:
        c = queue[head]
        d = depths[head] + 1  # the depth of c's items
        head += 1
        if d > _MAX_DEPTH:
            continue  # as _has_non_finite: not walked
        tc = Py_TYPE(<object>c)
        pos = 0
        i = 0
        if tc == &PyTuple_Type:
            n = PyTuple_GET_SIZE(<object>c)
        while True:
            if tc == &PyDict_Type:
                if not PyDict_Next(<object>c, &pos, NULL, &v):
                    break
            elif tc == &PyList_Type:
                if i >= PyList_GET_SIZE(<object>c):
                    break
                v = PyList_GET_ITEM(<object>c, i)
                i += 1
            else:
                if i >= n:
                    break
                v = PyTuple_GET_ITEM(<object>c, i)
                i += 1
            if v == <PyObject*>None:
                nones += 1
                if nones >= nulls:
                    return 0
                continue
            t = Py_TYPE(<object>v)
            if t == &PyUnicode_Type or t == &PyLong_Type or t == &PyBool_Type:
                continue
            if t == &PyFloat_Type:
                if not isfinite(PyFloat_AS_DOUBLE(<object>v)):
                    return 1
                continue
            if tail < _BFS_MAX and (t == &PyDict_Type or t == &PyList_Type or t == &PyTuple_Type):
                queue[tail] = v
                depths[tail] = d
                tail += 1
                continue
            # an unusual type (its check runs Python code, which must not find borrowed
            # pointers queued here), or too many containers: the whole depth-first walk
            return _has_non_finite(o, 0)
    return 0


cdef bint _wire_has_non_finite(list wire, list payloads) except -1:
    """The payloads of wire items (the only place a float can be: ids and names are str);
    ``payloads`` lists them when the builder collected them (else they are looked up)."""
    cdef Py_ssize_t i
    cdef object item
    if not payloads or len(payloads) != len(wire):
        payloads = [(<dict>item)["payload"] for item in wire]
    if _FREE_THREADED:
        return any(_py_has_non_finite(item, 3) for item in payloads)
    for i in range(len(payloads)):
        if _has_non_finite(PyList_GET_ITEM(payloads, i), 3):
            return True
    return False


cdef inline bytes _encode_wire(object body, list wire, bint nan_as_null, list payloads=None):
    """``body`` (``{"items": wire}`` or ``wire``): one orjson call, then the NaN check on the
    payloads only, and only when the body holds a ``null``."""
    cdef bytes out
    if not _ORJSON:
        return _encode(body, nan_as_null)
    try:
        out = _raw_dumps(body)
    except _ENCODE_ERRORS as exc:
        raise InvalidInputError("payload is not JSON-serialisable: %s" % _encode_error_text(exc, body)) from None
    if not nan_as_null and _count_null(out) and _wire_has_non_finite(wire, payloads):
        raise InvalidInputError("payload is not JSON-serialisable: %s" % _non_finite_error(body))
    if _has_nul_escape(out):
        raise InvalidInputError("payload cannot be sent: %s" % _nul_error_text(body))
    return out


# The spliced push body. orjson writes one flat list ``[queue, partition?, p0, p1, ...]``
# with a raw NUL byte (a Fragment) between the parts; orjson escapes every control character
# it writes, so those NULs are the only ones in its output and they mark where each part's
# JSON starts and ends. The body is then written in one buffer: the constant wire keys, the
# queue / partition JSON once per item, each payload's JSON and the minted id, which is never
# a Python object unless the caller asks for the ids. The payloads sit three containers
# deep, as they do in ``{"items": [{..., "payload": p}]}``, so orjson's nesting limit and
# every error are the same; any surprise (an error, a NaN, a NUL from the caller's own
# Fragment) returns ``None`` before an id is minted, and the wire-dict path then does the
# batch and raises its own error.
cdef object _SEP = _json.Fragment(b"\x00") if _ORJSON and _json.Fragment is not None else None
cdef bytes _KQ = b'{"queue":'
cdef bytes _KP = b',"partition":'
cdef bytes _KPL = b',"payload":'
cdef bytes _KTX = b',"transactionId":"'
cdef bytes _KEND = b'"}'
cdef bytes _BODY_OPEN = b'{"items":['
cdef bytes _BODY_CLOSE = b']}'


cdef inline char* _put(char* w, bytes b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(w, PyBytes_AS_STRING(b), n)
    return w + n


cdef object _encode_push_spliced(object queue, object partition, list seq, bint nan_as_null,
                                 bint whole_body, list ids):
    """The push body (``whole_body``) or fragment of ``seq`` when every item is an exact
    dict holding only ``data`` / ``payload``; ``None`` (nothing observable done) otherwise.
    Appends the minted ids to ``ids``."""
    cdef Py_ssize_t n = len(seq)
    cdef Py_ssize_t heads = 1 if partition is None else 2
    cdef Py_ssize_t parts = heads + n
    cdef Py_ssize_t i, k, pos, size, total, head_len, nulls
    cdef PyObject* key
    cdef PyObject* value
    cdef object item, out, body
    cdef list flat
    cdef const char* base
    cdef const char* p
    cdef const char* q
    cdef const char* end
    cdef char* w
    cdef Py_ssize_t* spans
    cdef bytes raw
    cdef const unsigned char* rnd
    cdef unsigned long long ms
    if _SEP is None or n == 0:
        return None
    flat = PyList_New(2 * parts - 1)
    Py_INCREF(queue)
    PyList_SET_ITEM(flat, 0, queue)
    if heads == 2:
        Py_INCREF(partition)
        PyList_SET_ITEM(flat, 2, partition)
    for k in range(1, 2 * parts - 1, 2):
        Py_INCREF(_SEP)
        PyList_SET_ITEM(flat, k, _SEP)
    for i in range(n):
        item = seq[i]
        if not PyDict_CheckExact(item) or PyDict_Size(item) != 1:
            return None
        pos = 0
        PyDict_Next(item, &pos, &key, &value)
        if _item_key(key) != 1:
            return None
        Py_INCREF(<object>value)
        PyList_SET_ITEM(flat, 2 * (heads + i), <object>value)
    try:
        out = _raw_dumps([[flat]])
    except _ENCODE_ERRORS:
        return None
    # out is b"[[[" part0 ",\0," part1 ... "]]]": spans[2k], spans[2k+1] = part k's bounds
    base = PyBytes_AS_STRING(out)
    size = PyBytes_GET_SIZE(out)
    end = base + size - 3
    spans = <Py_ssize_t*>PyMem_Malloc(2 * parts * sizeof(Py_ssize_t))
    if spans == NULL:
        raise MemoryError()
    try:
        p = base + 3
        for k in range(parts - 1):
            q = <const char*>memchr(p, 0, end - p)
            if q == NULL or q <= p + 1 or q + 2 >= end or q[-1] != 44 or q[1] != 44:  # ','
                return None
            spans[2 * k] = p - base
            spans[2 * k + 1] = (q - 1) - base
            p = q + 2
        if memchr(p, 0, end - p) != NULL or _has_nul_escape(out):  # a NUL: the fallback refuses it
            return None
        spans[2 * parts - 2] = p - base
        spans[2 * parts - 1] = end - base
        if not nan_as_null:
            for k in range(heads, parts):
                nulls = _span_count_null(base + spans[2 * k], base + spans[2 * k + 1])
                if nulls and _obj_has_non_finite(<object>PyList_GET_ITEM(flat, 2 * k), nulls):
                    return None
        head_len = PyBytes_GET_SIZE(_KQ) + (spans[1] - spans[0]) + PyBytes_GET_SIZE(_KPL)
        if heads == 2:
            head_len += PyBytes_GET_SIZE(_KP) + (spans[3] - spans[2])
        total = (n * (head_len + PyBytes_GET_SIZE(_KTX) + 36 + PyBytes_GET_SIZE(_KEND)) + (n - 1)
                 + (spans[2 * parts - 1] - spans[2 * heads]) - 3 * (n - 1))
        if whole_body:
            total += PyBytes_GET_SIZE(_BODY_OPEN) + PyBytes_GET_SIZE(_BODY_CLOSE)
        ms = _now_ms()
        raw = _urandom(10 * n)
        rnd = <const unsigned char*>PyBytes_AS_STRING(raw)
        body = PyBytes_FromStringAndSize(NULL, total)
        w = PyBytes_AS_STRING(body)
        if whole_body:
            w = _put(w, _BODY_OPEN)
        for i in range(n):
            if i:
                w[0] = 44
                w += 1
            w = _put(w, _KQ)
            memcpy(w, base + spans[0], spans[1] - spans[0])
            w += spans[1] - spans[0]
            if heads == 2:
                w = _put(w, _KP)
                memcpy(w, base + spans[2], spans[3] - spans[2])
                w += spans[3] - spans[2]
            w = _put(w, _KPL)
            k = heads + i
            memcpy(w, base + spans[2 * k], spans[2 * k + 1] - spans[2 * k])
            w += spans[2 * k + 1] - spans[2 * k]
            w = _put(w, _KTX)
            _uuid7_into(<unsigned char*>w, ms, rnd + 10 * i)
            ids.append(_ascii_str(w, 36))
            w += 36
            w = _put(w, _KEND)
        if whole_body:
            w = _put(w, _BODY_CLOSE)
        if w - PyBytes_AS_STRING(body) != total:  # the sizes above are wrong: never send it
            raise AssertionError("spliced push body size mismatch")
        return body
    finally:
        PyMem_Free(spans)


cdef bint _obj_has_non_finite(object obj, Py_ssize_t nulls) except -1:
    """NaN / ±inf in ``obj``, whose JSON text holds ``nulls`` (>= 1) nulls."""
    if _FREE_THREADED:
        return bool(_py_has_non_finite(obj, 0))
    return _counted_non_finite(<PyObject*>obj, nulls) == 1


cdef inline bytes _encode(object obj, bint nan_as_null=False):
    cdef bytes body
    cdef Py_ssize_t nulls
    try:
        # the stdlib engine does its own NaN check; orjson writes NaN / inf as null
        body = _raw_dumps(obj) if _ORJSON else _dumps(obj, nan_as_null)
    except _ENCODE_ERRORS as exc:
        raise InvalidInputError("payload is not JSON-serialisable: %s" % _encode_error_text(exc, obj)) from None
    # look for NaN / inf only when the body holds a null
    if _ORJSON and not nan_as_null:
        nulls = _count_null(body)
        if nulls and _obj_has_non_finite(obj, nulls):
            raise InvalidInputError("payload is not JSON-serialisable: %s" % _non_finite_error(obj))
    if _has_nul_escape(body):
        raise InvalidInputError("payload cannot be sent: %s" % _nul_error_text(obj))
    return body


def encode_json(obj, nan_as_null=False):
    """Serialise any body to compact JSON bytes (see ``queen_sync._pycodec.encode_json``);
    NaN / ±Infinity raise :class:`InvalidInputError` unless ``nan_as_null``, and so does a
    NUL character (U+0000) in any string."""
    return _encode(obj, nan_as_null)


def encode_push_items(wire_items, nan_as_null=False):
    """Encode already-built wire items as a ``POST /api/v1/push`` body ``{"items": [...]}``."""
    return _encode({"items": wire_items}, nan_as_null)


def encode_push(queue, partition, items, id_source=None, nan_as_null=False):
    """Build and encode a push body. Returns ``(body, transaction_ids)``."""
    cdef list ids = []
    cdef object body = _encode_push_seq(queue, partition, items, id_source, nan_as_null, True, ids)
    return body, ids


cdef object _encode_push_seq(object queue, object partition, object items, object id_source,
                             bint nan_as_null, bint whole_body, list ids):
    """The spliced body when it applies, else the wire-dict one (``ids`` filled either way)."""
    cdef list seq, payloads, wire
    cdef object body
    cdef bytes frag
    if id_source is None:
        len(items)  # a sized sequence, as in the pure backend (a generator raises TypeError)
        seq = <list>items if type(items) is list else list(items)
        body = _encode_push_spliced(queue, partition, seq, nan_as_null, whole_body, ids)
        if body is not None:
            return body
        items = seq
    payloads = []
    wire = _build_push_items(queue, partition, items, id_source, payloads)
    if whole_body:
        body = _encode_wire({"items": wire}, wire, nan_as_null, payloads)
    else:
        frag = _encode_wire(wire, wire, nan_as_null, payloads)
        body = frag[1:len(frag) - 1]
    for item in wire:
        ids.append((<dict>item)[_K_TX])
    return body
