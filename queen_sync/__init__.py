"""queen_sync: a synchronous, thread-safe client for the Queen MQ broker.

>>> from queen_sync import Queen
>>> with Queen("http://localhost:6632") as q:                      # doctest: +SKIP
...     q.queue("orders").partition("acme").push({"data": {"id": 1}})

Where the methods are (each call blocks and returns a value):

* :class:`Queen` — the client: ``queue(name)``, ``transaction()``, ``ack`` / ``renew``,
  ``trace``, ``admin``, ``flush_all_buffers``, ``close``.
* :class:`QueueBuilder` (``Queen.queue(name)``) — ``create`` / ``update_config`` /
  ``delete``; ``partition(p).push(...)``; ``buffer(...)``; pop settings (``group``,
  ``batch``, ``wait``, ``timeout_millis``, ...) then ``pop()``; consume settings (``each``,
  ``concurrency``, ``limit``, ``idle_millis``, ``renew_lease``) then ``consume(handler)``;
  ``dlq(group)``.
* :class:`Consumer` (``consume(handler, background=True)``) — ``stop``, ``join``, live
  counters; :class:`ConsumeResult` — what a consume run did.
* :class:`TransactionBuilder` (``Queen.transaction()``) — ``queue(q).push(...)``,
  ``ack(...)``, ``commit()``.
* :class:`Message` — what ``pop()`` returns and consume handlers get: a message dict with
  ``ack`` / ``nack`` / ``renew`` / ``trace`` through the client that delivered it.

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
from .consumer import ConsumeResult, Consumer
from .dlq import DLQBuilder
from .message import Message
from .queues import QueueBuilder
from .running import RunningConsumer
from .streams import Stream
from .transactions import TransactionBuilder
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
    "QueueBuilder",
    "TransactionBuilder",
    "Consumer",
    "ConsumeResult",
    "Admin",
    "DLQBuilder",
    "Message",
    "Stream",
    "RunningConsumer",
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
