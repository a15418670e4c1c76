"""Where a stream gets its broker access from: the client that made its source builder.

The one place the streams runtime reaches into a queue builder. ``requester_of`` returns
what the wire functions (:mod:`queen_sync.wire.streams`) call; ``client_of`` the Queen
client (to release popped messages with ``ack(..., "retry")`` and to key the runner
registry that ``Queen.close()`` stops).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from ..errors import InvalidInputError

__all__ = ["client_of", "requester_of"]


def client_of(builder: Any) -> Any:
    """The :class:`~queen_sync.Queen` client of a queue builder (``q.queue("x")``)."""
    client = getattr(builder, "_client", None)
    if client is None:
        raise InvalidInputError("Stream.from_() needs a queue builder made by a Queen client (q.queue('name'))")
    return client


class _ClientRequester:
    """Adapts a Queen client to the wire layer's requester protocol (its private
    ``_request`` checks that the client is open, then calls the transport)."""

    __slots__ = ("_client",)

    def __init__(self, client: Any) -> None:
        self._client = client

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        query: Optional[Mapping[str, Any]] = None,
        idempotent: bool = False,
        timeout_millis: Optional[int] = None,
        retry: Optional[str] = None,
        affinity_key: Optional[str] = None,
    ) -> Any:
        return self._client._request(
            method,
            path,
            body=body,
            query=query,
            idempotent=idempotent,
            timeout_millis=timeout_millis,
            retry=retry,
            affinity_key=affinity_key,
        )


def requester_of(builder: Any) -> Any:
    """The requester for the streams wire calls of the client that made ``builder``."""
    return _ClientRequester(client_of(builder))
