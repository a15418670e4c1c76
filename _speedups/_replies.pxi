# Included by _ccodec.pyx (part of its text, compiled in its namespace). It owns the decode of
# the replies that are a JSON array of flat objects: push results, ack verdicts, lease
# extensions. Such a reply repeats one shape: the same keys in the same order and, in a
# push reply, the same queue name, partition id and status in every item. orjson builds
# every dict from scratch (a key table per dict, a new str per value); here each dict is
# a copy of the one before (its key table cloned, not rebuilt) in which only the values
# that differ are replaced, and a value equal to the one before is that very object. The
# result equals ``orjson.loads(body)`` (same dicts, same key order, same values); anything
# this parser does not handle exactly as orjson does (an escape, a float, a nested value, a
# duplicate key, a non-ASCII key, ...) returns ``None``, and the caller decodes the body the
# generic way, which also gives the error a bad body deserves.

from cpython.long cimport PyLong_FromLongLong

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object)

cdef enum:
    _FLAT_MAX_KEYS = 32
    _V_STR = 0
    _V_INT = 1
    _V_TRUE = 2
    _V_FALSE = 3
    _V_NULL = 4


cdef struct _Pair:
    const char* key
    Py_ssize_t key_len
    bint key_ascii
    bint key_same  # the key of the item before at this position (that very str)
    int kind
    const char* val
    Py_ssize_t val_len
    bint val_ascii
    bint val_same  # the value of the item before at this position, a str (that very str)
    long long num


cdef inline const char* _ws(const char* p, const char* end) noexcept:
    while p < end and (p[0] == 32 or p[0] == 10 or p[0] == 13 or p[0] == 9):
        p += 1
    return p


cdef inline const char* _str_end(const char* p, const char* end, bint* ascii) noexcept:
    """``p`` just past an opening quote: the closing quote, or NULL when the string holds
    an escape or a control character (orjson's business) or is not closed."""
    cdef unsigned char c
    cdef bint a = True
    cdef unsigned long long w
    # eight bytes at a time while none of them is a quote, a backslash, a control
    # character or non-ASCII (bit tricks: a zero byte of w ^ "\"\"..." is a quote)
    while end - p >= 8:
        memcpy(&w, p, 8)
        if ((((w ^ 0x2222222222222222ULL) - 0x0101010101010101ULL) & ~(w ^ 0x2222222222222222ULL))
                | (((w ^ 0x5C5C5C5C5C5C5C5CULL) - 0x0101010101010101ULL) & ~(w ^ 0x5C5C5C5C5C5C5C5CULL))
                | ((w - 0x2020202020202020ULL) & ~w) | w) & 0x8080808080808080ULL:
            break
        p += 8
    while p < end:
        c = <unsigned char>p[0]
        if c == 34:  # '"'
            ascii[0] = a
            return p
        if c == 92 or c < 32:  # '\\', or a control character (invalid JSON: orjson raises)
            return NULL
        if c >= 128:
            a = False
        p += 1
    return NULL


cdef inline bint _is_end_of_value(const char* p, const char* end) noexcept:
    return p < end and (p[0] == 44 or p[0] == 125 or p[0] == 32 or p[0] == 10 or p[0] == 13 or p[0] == 9)


cdef inline bint _eq(const char* a, const char* b, Py_ssize_t n) noexcept:
    """``memcmp(a, b, n) == 0`` inline: the texts compared here are short."""
    cdef unsigned long long x, y
    while n >= 8:
        memcpy(&x, a, 8)
        memcpy(&y, b, 8)
        if x != y:
            return False
        a += 8
        b += 8
        n -= 8
    while n > 0:
        if a[0] != b[0]:
            return False
        a += 1
        b += 1
        n -= 1
    return True


cdef inline Py_ssize_t _quoted_is(const char* p, const char* end, PyObject* s) noexcept:
    """The length of the JSON string at ``p`` when it is ``"text of s"`` (``s`` an ASCII
    str without a quote, backslash or control character: one this parser made), else 0."""
    cdef Py_ssize_t n
    if s == NULL or Py_TYPE(<object>s) != &PyUnicode_Type or not PyUnicode_IS_ASCII(<object>s):
        return 0
    n = PyUnicode_GET_LENGTH(<object>s)
    if end - p < n + 2 or p[0] != 34 or p[n + 1] != 34:
        return 0
    if not _eq(p + 1, <const char*>PyUnicode_1BYTE_DATA(<object>s), n):
        return 0
    return n + 2


cdef const char* _scan_pair(const char* p, const char* end, _Pair* pair, PyObject* key_before,
                            PyObject* val_before) noexcept:
    """One ``"key": value`` at ``p`` into ``pair``; the position after it, or NULL. The key
    and value of the item before at this position are tried first, by a plain compare."""
    cdef const char* q
    cdef long long num = 0
    cdef bint neg = False
    cdef int digits = 0
    cdef Py_ssize_t n
    pair.val_same = False
    n = _quoted_is(p, end, key_before)
    if n:
        pair.key_same = True
        pair.key_ascii = True
        q = p + n - 1
    else:
        pair.key_same = False
        if p >= end or p[0] != 34:
            return NULL
        q = _str_end(p + 1, end, &pair.key_ascii)
        if q == NULL:
            return NULL
    pair.key = p + 1
    pair.key_len = q - (p + 1)
    p = q + 1
    if p >= end or p[0] != 58:  # ':' right after the key (compact JSON), else after blanks
        p = _ws(p, end)
        if p >= end or p[0] != 58:
            return NULL
    p = _ws(p + 1, end)
    if p >= end:
        return NULL
    if p[0] == 34:
        pair.kind = _V_STR
        n = _quoted_is(p, end, val_before)
        if n:
            pair.val_same = True
            pair.val_ascii = True
            pair.val = p + 1
            pair.val_len = n - 2
            return p + n
        q = _str_end(p + 1, end, &pair.val_ascii)
        if q == NULL:
            return NULL
        pair.val = p + 1
        pair.val_len = q - (p + 1)
        return q + 1
    if p[0] == 45 or 48 <= p[0] <= 57:  # '-' or a digit: an integer of at most 18 digits
        if p[0] == 45:
            neg = True
            p += 1
        if p >= end or not (48 <= p[0] <= 57) or (p[0] == 48 and p + 1 < end and 48 <= p[1] <= 57):
            return NULL  # no digit, or a leading zero
        while p < end and 48 <= p[0] <= 57:
            num = num * 10 + (p[0] - 48)
            digits += 1
            if digits > 18:
                return NULL
            p += 1
        if not _is_end_of_value(p, end):
            return NULL  # a fraction or an exponent: a float, orjson's business
        pair.kind = _V_INT
        pair.num = -num if neg else num
        return p
    if end - p >= 4 and _eq(p, b"null", 4) and _is_end_of_value(p + 4, end):
        pair.kind = _V_NULL
        return p + 4
    if end - p >= 4 and _eq(p, b"true", 4) and _is_end_of_value(p + 4, end):
        pair.kind = _V_TRUE
        return p + 4
    if end - p >= 5 and _eq(p, b"false", 5) and _is_end_of_value(p + 5, end):
        pair.kind = _V_FALSE
        return p + 5
    return NULL  # an object, an array, or not JSON


cdef object _pair_value(_Pair* pair, PyObject* before):
    """The value of ``pair``: ``before`` itself when it is equal (a str of the same text,
    the same singleton), else a new object."""
    if pair.kind == _V_STR:
        if pair.val_same:
            return <object>before
        if pair.val_ascii:
            return _ascii_str(pair.val, pair.val_len)
        return pair.val[:pair.val_len].decode("utf-8")  # UnicodeDecodeError: the caller refuses
    if pair.kind == _V_INT:
        return PyLong_FromLongLong(pair.num)
    if pair.kind == _V_NULL:
        return None
    return pair.kind == _V_TRUE


cdef object _decode_flat_list(object body):
    """``orjson.loads(body)`` for a ``bytes`` body holding a JSON array of flat objects, or
    ``None`` (nothing observable done) when the body is anything else."""
    cdef _Pair pairs[_FLAT_MAX_KEYS]
    cdef PyObject* keys[_FLAT_MAX_KEYS]  # borrowed: held by ``prev``, which ``out`` holds
    cdef PyObject* values[_FLAT_MAX_KEYS]
    cdef Py_ssize_t n, i, prev_n = -1
    cdef const char* p
    cdef const char* end
    cdef list out
    cdef dict d
    cdef dict prev = None
    cdef object k, v
    cdef bint same
    if type(body) is not bytes:
        return None
    p = PyBytes_AS_STRING(body)
    end = p + PyBytes_GET_SIZE(body)
    p = _ws(p, end)
    if p >= end or p[0] != 91:  # '['
        return None
    p = _ws(p + 1, end)
    out = []
    if p < end and p[0] == 93:  # ']': an empty list
        return out if _ws(p + 1, end) == end else None
    try:
        while True:
            if p >= end or p[0] != 123:  # '{'
                return None
            p = _ws(p + 1, end)
            n = 0
            if p < end and p[0] == 125:  # '}'
                p += 1
            else:
                while True:
                    if n == _FLAT_MAX_KEYS:
                        return None
                    if n < prev_n:
                        p = _scan_pair(p, end, &pairs[n], keys[n], values[n])
                    else:
                        p = _scan_pair(p, end, &pairs[n], NULL, NULL)
                    if p == NULL:
                        return None
                    n += 1
                    p = _ws(p, end)
                    if p < end and p[0] == 44:  # ','
                        p = _ws(p + 1, end)
                        continue
                    if p < end and p[0] == 125:
                        p += 1
                        break
                    return None
            # the same keys as the item before, in the same order: copy it, then replace
            # the values that differ
            same = n == prev_n
            i = 0
            while same and i < n:
                same = pairs[i].key_same
                i += 1
            if same:
                d = PyDict_Copy(prev)
                for i in range(n):
                    v = _pair_value(&pairs[i], values[i])
                    if <PyObject*>v != values[i]:
                        PyDict_SetItem(d, <object>keys[i], v)
                        values[i] = <PyObject*>v
            else:
                d = {}
                for i in range(n):
                    if pairs[i].key_ascii:
                        if pairs[i].key_same:
                            k = <object>keys[i]
                        else:
                            k = _ascii_str(pairs[i].key, pairs[i].key_len)
                    else:
                        k = pairs[i].key[:pairs[i].key_len].decode("utf-8")
                    v = _pair_value(&pairs[i], values[i] if pairs[i].val_same else NULL)
                    PyDict_SetItem(d, k, v)
                    keys[i] = <PyObject*>k
                    values[i] = <PyObject*>v
                # a key twice: orjson's last-wins rule, left to it (and values[] would
                # hold a replaced value, freed by now: never read past this return)
                if PyDict_Size(d) != n:
                    return None
                prev_n = n
            out.append(d)
            prev = d
            p = _ws(p, end)
            if p < end and p[0] == 44:
                p = _ws(p + 1, end)
                continue
            if p < end and p[0] == 93:
                return out if _ws(p + 1, end) == end else None
            return None
    except UnicodeDecodeError:
        return None  # not UTF-8: the generic decode raises the error
