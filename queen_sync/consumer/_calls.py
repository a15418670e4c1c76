"""The consumer's broker calls, and everything else it takes from the rest of the package.

This is the one door between the consumer package and the layers below it: pop (the wire
layer's :func:`~queen_sync.wire.messages.pop`), ack / ack batch / release of the messages it
popped (:meth:`Broker.ack_popped`: the codec's ack bodies on the wire layer's ack routes, the
bodies :func:`queen_sync.acks.ack` sends for them), lease renewal (:func:`queen_sync.acks.renew`), binding
popped messages so a handler can record traces on them (:func:`queen_sync.tracing.trace`),
whether a handler acked its message itself (:func:`~queen_sync.message.settled_status`),
the client's ``closed`` flag, all through the client's :class:`~queen_sync._session.Session`;
and :class:`BuilderSettings`, the plain record of consume settings a queue builder hands the
consumer (the builder makes it: nothing here knows the builder). Every other module of the
package talks to a :class:`Broker` and a :class:`BuilderSettings`, never to the session.

The calls are made exactly as :class:`~queen_sync.Queen` makes them (same routes, bodies,
retries and error mapping); nothing is added or translated here. The one shortcut is
:meth:`Broker.ack_popped`: the consumer acks messages the broker just gave it, each
partition's in pop order and all for its one consumer group, so the public ack's checks and
reordering (a pass over every message) are left out; a refusal comes back as results, not as
an :class:`~queen_sync.errors.AckError`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from .. import acks as acks_calls
from .. import codec, tracing
from .._session import Session
from .._validate import resolve_group
from ..message import bound_type, settled_count, settled_status
from ..tracing import Message as BoundMessage
from ..wire import messages as wire_messages
from ..wire.messages import PopSpec

__all__ = ["Broker", "BuilderSettings", "PopSpec", "settled_count", "settled_status"]

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
        *,
        group: Optional[str] = None,
    ) -> Dict[str, Any]:
        return tracing.trace(self._session, message, names, data, event_type, group=group)

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

    __slots__ = ("_session", "_messages", "_bound")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._messages = _MessageActions(session)
        self._bound = bound_type(self._messages)  # what bind() makes of each popped dict

    @property
    def closed(self) -> bool:
        """True once the client was closed (``Queen.closed``)."""
        return self._session.closed

    def pop(self, spec: PopSpec) -> List[Message]:
        """One pop (``GET /api/v1/pop/...`` per ``spec``: queue, partition, group, batch,
        long-poll ``timeout_millis``...); returns the popped message dicts (maybe empty)."""
        return wire_messages.pop(self._session, spec)

    def call_timeout_millis(self) -> Optional[int]:
        """The read timeout of the calls that hold a partition or a worker (acks, releases, a
        worker's own pop): the client's ``ack_timeout_millis``, None when unknown."""
        timeout = getattr(self._session, "ack_timeout_millis", None)  # a Session has it
        return timeout if isinstance(timeout, int) else None

    def pool_maxsize(self) -> Optional[int]:
        """The client's ``pool_maxsize`` (connections per broker host), None when unknown."""
        size = getattr(self._session, "pool_maxsize", None)  # a Session has it
        return size if isinstance(size, int) else None

    def bind(self, popped: Sequence[Message]) -> List[BoundMessage]:
        """The popped messages as ``queen_sync.Message`` objects bound to this Broker (dicts
        that can record traces on themselves); no wire call."""
        return list(map(self._bound, popped))  # one C loop: no Python call per message

    def ack(self, target: Any, status: Any, context: Optional[Dict[str, Any]]) -> Any:
        """``Queen.ack``: one message dict (``POST /api/v1/ack``) or a list (``POST
        /api/v1/ack/batch``); ``status`` True (``completed``), False (``failed``) or
        ``"retry"`` (a release); ``context`` carries ``group`` / ``error``. Returns the
        broker's result dict (one message) or list of them; raises
        :class:`~queen_sync.errors.AckError` (with ``failed`` / ``results``) when the broker
        refuses some."""
        return acks_calls.ack(self._session, target, status, context)

    def ack_popped(self, msgs: Sequence[Message], status: Any, group: Optional[str],
                   error: Optional[str]) -> Tuple[List[Dict[str, Any]], int]:
        """Ack messages this consumer popped: one message ``POST /api/v1/ack``, more ``POST
        /api/v1/ack/batch``, the bodies :meth:`ack` would send for them. ``msgs`` are the
        consumer's (dicts from the pop reply, each partition's in pop order); ``group`` its
        consumer group (None: queue mode), ``status`` True / False / ``"retry"``, ``error`` the
        nack's text or None. Returns ``(results, refused)``: one result per message (the
        broker's, in its order), refused ones with ``success`` not True, never raised, and
        how many were refused; raises what the wire call raises (connection errors,
        :class:`~queen_sync.errors.BrokerError` for a refused body)."""
        eff = resolve_group(msgs[0], group)
        timeout = self.call_timeout_millis()
        if len(msgs) == 1:
            result, _status = wire_messages.ack(self._session, codec.encode_ack(msgs[0], status, eff, error), timeout)
            return [result], 0 if result.get("success") is True else 1
        body = codec.encode_ack_batch(msgs, status, eff, error)
        return wire_messages.ack_batch(self._session, body, len(msgs), timeout)

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

