"""The consumer's broker calls, and everything else it takes from the rest of the package.

This is the one door between the consumer package and the layers below it: pop (the wire
layer's :func:`~queen_sync.wire.messages.pop`), ack / ack batch / release (one ack route, by
status: :func:`queen_sync.acks.ack`), lease renewal (:func:`queen_sync.acks.renew`), binding
popped messages so a handler can record traces on them (:func:`queen_sync.tracing.trace`),
the client's ``closed`` flag, all through the client's :class:`~queen_sync._session.Session`;
and :class:`BuilderSettings`, the plain record of consume settings a queue builder hands the
consumer (the builder makes it: nothing here knows the builder). Every other module of the
package talks to a :class:`Broker` and a :class:`BuilderSettings`, never to the session.

The calls are made exactly as :class:`~queen_sync.Queen` makes them (same routes, bodies,
retries and error mapping); nothing is added or translated here.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

from .. import acks as acks_calls
from .. import tracing
from .._session import Session
from ..tracing import Message as BoundMessage
from ..wire import messages as wire_messages
from ..wire.messages import PopSpec

__all__ = ["Broker", "BuilderSettings", "PopSpec"]

Message = Dict[str, Any]


class _MessageActions:
    """What a consumed message's ``ack()`` / ``nack()`` / ``renew()`` / ``trace()`` go
    through: the same calls as ``Queen.ack`` / ``renew`` / ``trace``, on the session."""

    __slots__ = ("_session",)

    def __init__(self, session: Session) -> None:
        self._session = session

    def trace(
        self,
        message: Dict[str, Any],
        names: Union[str, Sequence[str], None] = None,
        data: Optional[Mapping[str, Any]] = None,
        event_type: str = "info",
    ) -> Dict[str, Any]:
        return tracing.trace(self._session, message, names, data, event_type)

    def ack(
        self,
        message: Dict[str, Any],
        status: Union[bool, str] = True,
        context: Optional[Mapping[str, Any]] = None,
        *,
        group: Optional[str] = None,
        error: Optional[str] = None,
    ) -> Dict[str, Any]:
        return acks_calls.ack(self._session, message, status, context, group=group, error=error)  # type: ignore[return-value]

    def renew(self, target: Dict[str, Any], seconds: Optional[int] = None) -> Dict[str, Any]:
        return acks_calls.renew(self._session, target, seconds)  # type: ignore[return-value]


class Broker:
    """The broker calls of one consumer, through its client's :class:`Session`.

    Every method blocks and raises the error tree of :mod:`queen_sync.errors`
    (:class:`~queen_sync.errors.ClientClosedError` once the client is closed). A Broker
    binds popped messages so that their ``ack()`` / ``nack()`` / ``renew()`` / ``trace()``
    work through the same session.
    """

    __slots__ = ("_session", "_messages")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._messages = _MessageActions(session)

    @property
    def closed(self) -> bool:
        """True once the client was closed (``Queen.closed``)."""
        return self._session.closed

    def pop(self, spec: PopSpec) -> List[Message]:
        """One pop (``GET /api/v1/pop/...`` per ``spec``: queue, partition, group, batch,
        long-poll ``timeout_millis``...); returns the popped message dicts (maybe empty)."""
        return wire_messages.pop(self._session, spec)

    def bind(self, popped: Sequence[Message]) -> List[BoundMessage]:
        """The popped messages as ``queen_sync.Message`` objects bound to this Broker (dicts
        that can record traces on themselves); no wire call."""
        return tracing.bind_messages(self._messages, popped)

    def ack(self, target: Any, status: Any, context: Optional[Dict[str, Any]]) -> Any:
        """``Queen.ack``: one message dict (``POST /api/v1/ack``) or a list (``POST
        /api/v1/ack/batch``); ``status`` True (``completed``), False (``failed``) or
        ``"retry"`` (a release); ``context`` carries ``group`` / ``error``. Returns the
        broker's result dict (one message) or list of them; raises
        :class:`~queen_sync.errors.AckError` (with ``failed`` / ``results``) when the broker
        refuses some."""
        return acks_calls.ack(self._session, target, status, context)

    def renew(self, lease_id: str, seconds: int) -> Any:
        """``Queen.renew``: ``POST /api/v1/lease/{lease_id}/extend`` ``{"seconds": N}``;
        returns the reply dict (with ``expiresAt``); raises
        :class:`~queen_sync.errors.LeaseError` when the broker refuses the lease."""
        return acks_calls.renew(self._session, lease_id, seconds)


class BuilderSettings(NamedTuple):
    """The consume settings of a queue builder, as the builder holds them (not yet
    defaulted: ``auto_ack`` None means "not set"); made by the builder's ``consume()``
    (the pop settings already validated), read by :class:`~queen_sync.consumer.Consumer`."""

    spec: PopSpec  #: the pop settings (queue, partition, group, batch, wait, timeout...)
    each: bool  #: ``each()`` was called
    auto_ack: Optional[bool]
    on_success: Optional[Callable[[Any, Any], Any]]
    on_error: Optional[Callable[[Any, BaseException], Any]]
    renew_interval_millis: Optional[int]  #: None unless ``renew_lease(True)``
    limit: Optional[int]
    idle_millis: Optional[int]
    concurrency: int

