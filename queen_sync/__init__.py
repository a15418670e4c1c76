"""queen_sync: a synchronous, thread-safe client for the Queen MQ broker.

>>> from queen_sync import Queen
>>> with Queen("http://localhost:6632") as q:                      # doctest: +SKIP
...     q.queue("orders").partition("acme").push({"data": {"id": 1}})

``codec_backend`` says which codec is active: ``"cython"`` (compiled) or ``"python"``;
``json_backend`` which JSON engine it uses: ``"orjson"`` or ``"json"`` (the stdlib, where
orjson has no wheels: PyPy, free-threaded builds; it accepts and refuses what orjson does).
"""

from __future__ import annotations

import logging

from . import _json
from . import codec as _codec
from .admin import Admin
from .client import Queen
from .dlq import DLQBuilder
from .tracing import Message
from .streams import Stream
from .errors import (
    AckError,
    AuthenticationError,
    BrokerError,
    BufferFullError,
    ClientClosedError,
    InvalidInputError,
    LeaseError,
    ProtocolError,
    QueenConnectionError,
    QueenError,
    QueenHTTPError,
    QueenTimeoutError,
    RouteNotFoundError,
    TransactionError,
)

__version__ = "0.1.0"

#: ``"cython"`` when the compiled codec is active, else ``"python"``.
codec_backend: str = _codec.BACKEND

#: ``"orjson"`` when orjson encodes and decodes JSON, else ``"json"`` (the stdlib engine).
json_backend: str = _json.BACKEND

logging.getLogger("queen_sync").addHandler(logging.NullHandler())

__all__ = [
    "Queen",
    "Admin",
    "DLQBuilder",
    "Message",
    "Stream",
    "codec_backend",
    "json_backend",
    "QueenError",
    "InvalidInputError",
    "ProtocolError",
    "ClientClosedError",
    "BufferFullError",
    "QueenConnectionError",
    "QueenTimeoutError",
    "BrokerError",
    "QueenHTTPError",
    "AuthenticationError",
    "RouteNotFoundError",
    "AckError",
    "LeaseError",
    "TransactionError",
]
