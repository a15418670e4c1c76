"""The JSON library behind the codec: orjson where it is installed, else the stdlib ``json``.

Both give compact UTF-8 bytes that decode to the same values. orjson is declared as a
dependency on the interpreters it has wheels for; elsewhere (PyPy, free-threaded builds)
the stdlib is used. ``BACKEND`` says which one is active.

Both backends agree on the two places where JSON and Python numbers do not meet:

- **Encoding NaN / ±Infinity** (which JSON cannot represent): written as ``null``. orjson
  does so itself; the stdlib backend, on its failure path only, re-encodes a copy of the
  value with every non-finite float replaced by ``None``.
- **Decoding numbers beyond a double** (``1e400``, a 401-digit integer): orjson refuses the
  whole body. The codec then calls :func:`loads_fallback` (stdlib ``json``: big integers
  exact, ``1e400`` as ``inf``) before it gives up with ``ProtocolError``, so one such
  payload cannot stop every pop. The fallback runs only after ``loads`` failed: it costs
  nothing on the success path.
"""

from __future__ import annotations

import json as _stdjson
import math as _math
from typing import Any, Callable, Set, Type

__all__ = ["dumps", "loads", "loads_fallback", "DecodeError", "BACKEND"]

dumps: Callable[[Any], bytes]
loads: Callable[[Any], Any]


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
    return _std_decoder.decode(_text(body))


def loads_fallback(body: Any) -> Any:
    """Second attempt at a body ``loads`` refused (see the module docstring): stdlib ``json``
    with strict UTF-8 and no ``NaN`` / ``Infinity`` literals; integers exact (beyond
    ``sys.get_int_max_str_digits()`` digits they become a float), numbers beyond a double
    become ``inf`` / ``-inf``.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``).
        TypeError: ``body`` is not bytes / bytearray / memoryview / str.
        RecursionError: nested too deeply.
    """
    return _lenient_decoder.decode(_text(body))


def _finite_copy(obj: Any, path: Set[int]) -> Any:
    """A copy of ``obj`` with NaN / ±inf floats replaced by ``None`` (dicts, lists, tuples)."""
    if isinstance(obj, float):
        return obj if _math.isfinite(obj) else None
    if isinstance(obj, (dict, list, tuple)):
        key = id(obj)
        if key in path:
            raise ValueError("Circular reference detected")
        path.add(key)
        try:
            if isinstance(obj, dict):
                return {k: _finite_copy(v, path) for k, v in obj.items()}
            return [_finite_copy(v, path) for v in obj]
        finally:
            path.discard(key)
    return obj


try:  # pragma: no branch - which branch runs depends on the interpreter
    import orjson as _orjson

    dumps = _orjson.dumps
    loads = _orjson.loads
    DecodeError: Type[ValueError] = _orjson.JSONDecodeError
    BACKEND = "orjson"
except ImportError:  # pragma: no cover - exercised on interpreters without orjson (and by tests)
    _encoder = _stdjson.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def dumps(obj: Any) -> bytes:
        try:
            text = _encoder.encode(obj)
        except ValueError:  # NaN / ±inf (or a cycle): write non-finite floats as null, as orjson does
            try:
                clean = _finite_copy(obj, set())
            except RecursionError:
                raise ValueError("value is nested too deeply to serialise") from None
            text = _encoder.encode(clean)
        return text.encode("utf-8")

    loads = _std_loads
    DecodeError = ValueError
    BACKEND = "json"
