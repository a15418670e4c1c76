"""The JSON library behind the codec: orjson where it is installed, else the stdlib ``json``.

Both give compact UTF-8 bytes that decode to the same values. orjson is declared as a
dependency on the interpreters it has wheels for; elsewhere (PyPy, free-threaded builds)
the stdlib is used. ``BACKEND`` says which one is active.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["dumps", "loads", "DecodeError", "BACKEND"]

dumps: Callable[[Any], bytes]
loads: Callable[[Any], Any]

try:  # pragma: no branch - which branch runs depends on the interpreter
    import orjson as _orjson

    dumps = _orjson.dumps
    loads = _orjson.loads
    DecodeError: type = _orjson.JSONDecodeError
    BACKEND = "orjson"
except ImportError:  # pragma: no cover - exercised on interpreters without orjson
    import json as _json

    _encoder = _json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def dumps(obj: Any) -> bytes:  # type: ignore[misc]
        return _encoder.encode(obj).encode("utf-8")

    loads = _json.loads
    DecodeError = ValueError
    BACKEND = "json"
