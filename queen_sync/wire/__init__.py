"""The wire layer: one function per broker route the client uses, every reply checked.

Each function takes a :class:`Requester` (anything with the
:meth:`queen_sync.transport.Transport.request` signature; the transport is one, and the
client hands out one that refuses calls once it is closed), builds its path, query and
body (bodies only through :mod:`queen_sync.codec`), sends one call and returns the decoded
reply, raising the :mod:`queen_sync.errors` tree. Nothing above this layer builds a path,
a query string or a body. Arguments arrive validated (see :mod:`queen_sync._validate`).

Push, ack, batch ack, lease extend and transaction take their body as bytes the caller got
from the codec (``codec.encode_push``, ``encode_ack``, ``encode_transaction``, ...): those
bodies must exist before the first send, so that bad input raises before anything is sent
(an ack of several consumer groups is encoded whole first) and every resend carries the
same client-minted ``transactionId`` s (buffered pushes, transaction retries).

Modules, by route family:

- :mod:`~queen_sync.wire.messages`: push, pop (:class:`PopSpec`), ack, batch ack, lease
  extend, transaction.
- :mod:`~queen_sync.wire.resources`: configure, queue delete, ``/api/v1/resources/*`` reads,
  ``/api/v1/messages/*``.
- :mod:`~queen_sync.wire.admin`: status, analytics, statistics refresh, maintenance,
  ``/health``, ``/metrics``.
- :mod:`~queen_sync.wire.groups`: consumer groups (list, read, lagging, delete,
  subscription, seek).
- :mod:`~queen_sync.wire.traces`: record and read traces.
- :mod:`~queen_sync.wire.dlq`: the dead-letter read.
- :mod:`~queen_sync.wire.streams`: the three Streams routes (register a query, one cycle,
  state read).

Shared helpers (:mod:`queen_sync.wire._base`), stable for new route modules of this package:

- ``Requester``: the :class:`typing.Protocol` above.
- ``checked(requester, method, path, *, what, body=None, query=None, idempotent=None,
  retry=None, timeout_millis=None, affinity_key=None, nan_as_null=False,
  require_success=False, refusal=None) -> Any``: send one call and return
  its decoded JSON body (``None`` for a 204 / empty body). ``body`` is a JSON-able object
  (encoded by the codec; a POST without one sends ``{}``); ``idempotent`` defaults to True
  for GET / DELETE, False for POST. Raises BrokerError for a 200 body with ``error`` /
  ``success: false`` (message ``"<what> refused by the broker: <error>"``),
  RouteNotFoundError naming ``what``, method and path for a missing route, ProtocolError
  for a body that is not JSON, and the transport's errors. ``require_success``: the route's
  every reply carries ``success`` (the streams routes), refused unless it is true;
  ``refusal(doc, status) -> QueenError`` builds the error raised instead of BrokerError.
- ``checked_object(...)``: the same, for routes always answered with a JSON object
  (ProtocolError otherwise).
- ``check_reply(doc, what, status, *, require_success=False, refusal=None) -> doc``: the body check alone, for a body decoded
  elsewhere.
- ``query_params(**params) -> Dict[str, str]``: query values as text, ``None`` dropped.
"""

from __future__ import annotations

from . import admin, dlq, groups, messages, resources, traces
from ._base import Requester, check_reply, checked, checked_object, query_params
from .messages import PopSpec

__all__ = [
    "Requester",
    "checked",
    "checked_object",
    "check_reply",
    "query_params",
    "PopSpec",
    "messages",
    "resources",
    "admin",
    "groups",
    "traces",
    "dlq",
]
