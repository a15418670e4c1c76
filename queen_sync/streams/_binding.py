"""Where a stream gets its broker access from: the client session behind its source builder.

The one place the streams runtime reaches into a queue builder. ``session_of`` returns the
client's :class:`~queen_sync._session.Session` (made by ``q.queue("x")``): it is the
requester the wire functions (:mod:`queen_sync.wire.streams`) call, refuses calls once the
client is closed, and keys the runner registry that ``Queen.close()`` stops. ``release``
hands popped but unprocessed messages back (ack status ``retry``) through the acks feature.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from .. import acks
from ..errors import InvalidInputError

__all__ = ["owner_of", "release", "session_of"]


def session_of(builder: Any) -> Any:
    """The client session of a queue builder (``q.queue("x")``).

    Raises:
        InvalidInputError: ``builder`` was not made by a Queen client.
    """
    session = getattr(builder, "_session", None)
    if session is None:
        raise InvalidInputError("Stream.from_() needs a queue builder made by a Queen client (q.queue('name'))")
    return session


def owner_of(client_or_session: Any) -> Any:
    """The session a runner registry entry is keyed by: a Queen client's session, or the
    session itself."""
    return getattr(client_or_session, "_session", client_or_session)


def release(session: Any, messages: List[Dict[str, Any]], context: Optional[Mapping[str, Any]]) -> None:
    """Release popped messages (ack status ``retry``: redelivered at once, no retry counted).

    Wire: ``POST /api/v1/ack/batch`` (one per consumer group). Raises the ack errors.
    """
    acks.ack(session, list(messages), "retry", context)
