"""The :class:`Message` that ``pop()`` returns and ``consume()`` handlers get: the broker's
message dict, bound to the client that delivered it, so it can ack, nack, renew and trace
itself::

    for m in q.queue("orders").group("billing").batch(10).pop():
        try:
            handle(m["data"])
            m.ack()                        # = q.ack(m, "completed")
        except ValueError as exc:
            m.nack(str(exc))               # = q.ack(m, "failed", error=str(exc))

A :class:`Message` is a ``dict`` subclass with exactly the broker's keys: it compares,
serialises and behaves like a plain dict (pickling or ``copy.copy`` gives a plain dict).
The calls go through the client (:class:`MessageClient`: :meth:`queen_sync.Queen.ack`,
:meth:`~queen_sync.Queen.renew`, :meth:`~queen_sync.Queen.trace`), with their arguments,
return values and exceptions.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence, Type, Union

from .errors import InvalidInputError

__all__ = ["Message", "MessageClient", "bind_messages", "bound_type", "note_settled", "settled_count", "settled_status"]

Names = Union[str, Sequence[str], None]


class MessageClient(Protocol):
    """What a :class:`Message` acts through: the :class:`~queen_sync.Queen` that delivered it."""

    def trace(
        self,
        message: Dict[str, Any],
        names: Names = None,
        data: Optional[Mapping[str, Any]] = None,
        event_type: str = "info",
        *,
        group: Optional[str] = None,
    ) -> Dict[str, Any]: ...

    def ack(
        self,
        message: Dict[str, Any],
        status: Union[bool, str] = True,
        context: Optional[Mapping[str, Any]] = None,
        *,
        group: Optional[str] = None,
        error: Optional[str] = None,
    ) -> Dict[str, Any]: ...

    def renew(self, target: Dict[str, Any], seconds: Optional[int] = None) -> Dict[str, Any]: ...


class Message(Dict[str, Any]):
    """A message dict (exactly the broker's keys) bound to the client that popped it.

    ``pop()`` returns these and consume handlers get them; they compare, serialise and
    behave like plain dicts. Pickling or ``copy.copy`` gives a plain dict (unbound).

    Within ``consume()`` with auto-ack (the default) the consumer acks for the handler: call
    :meth:`ack` / :meth:`nack` yourself only with ``auto_ack(False)`` (or on popped messages).
    A message the handler did ack (or nack) itself is not acked a second time by the consumer.
    """

    # _settled: the status of an accepted ack of this message object (see note_settled);
    # unset until then (bind_messages uses dict's own __init__, which does not set it)
    __slots__ = ("_queen", "_settled")
    _settled: str

    def __init__(
        self, fields: Union[Mapping[str, Any], Iterable[Any]] = (), client: Optional[MessageClient] = None
    ) -> None:
        super().__init__(fields)
        self._queen = client

    def _client(self) -> MessageClient:
        if self._queen is None:
            raise InvalidInputError("this message is not bound to a client; use Queen.ack / renew / trace(msg, ...)")
        return self._queen

    def trace(
        self,
        names: Names = None,
        data: Optional[Mapping[str, Any]] = None,
        event_type: str = "info",
        *,
        group: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Record a trace on this message; :meth:`queen_sync.Queen.trace`, which this calls.

        Args:
            names: a trace name or a list of them, or None.
            data: the trace content, a JSON dict (required).
            event_type: a free label, default ``"info"``.
            group: the consumer group the trace is recorded under (``consumerGroup`` on the
                wire; ``"__QUEUE_MODE__"`` for queue mode); default: this message's own
                ``consumerGroup``, which the broker sets to the group that popped it (so a
                message a consumer of group ``g`` handles traces under ``g``), queue mode
                when it has none.

        Returns:
            ``{success: True, traceId}``.

        Raises:
            InvalidInputError: no ``data`` dict, bad names or event type, a ``group`` that
                is not a valid consumer-group name (a non-empty str of ``A-Z a-z 0-9 . _ ~
                -``, at most 255 characters), or the message is not bound to a client
                (nothing sent). BrokerError: ``Message not found``. ClientClosedError,
                QueenConnectionError as :meth:`queen_sync.Queen.trace`.

        Wire: ``POST /api/v1/traces`` ``{transactionId, partitionId, consumerGroup,
        traceNames, eventType, data}``.
        """
        return self._client().trace(self, names, data, event_type, group=group)

    def ack(
        self, status: Union[bool, str] = True, *, group: Optional[str] = None, error: Optional[str] = None
    ) -> Dict[str, Any]:
        """Acknowledge this message (``completed`` by default); ``status``, ``group`` and
        ``error`` as :meth:`queen_sync.Queen.ack`, which this calls.

        Returns:
            the broker's result dict ``{index, transactionId, success, error, ...}``.

        Raises:
            AckError: the broker refused it (e.g. the lease expired); InvalidInputError (also
            for a message popped with ``auto_ack(True)``: it has no lease, nothing is sent),
            ClientClosedError, QueenConnectionError as :meth:`queen_sync.Queen.ack`.

        Wire: ``POST /api/v1/ack``.
        """
        return self._client().ack(self, status, group=group, error=error)

    def nack(self, error: Optional[str] = None, *, group: Optional[str] = None) -> Dict[str, Any]:
        """Nack this message (status ``failed``: redelivered until the queue's retry limit,
        then dead-lettered), with ``error`` as the reason; see :meth:`ack`.

        Note the broker's rule: a nack releases the lease of the **whole pop**, so the other
        messages of that pop from its partition are redelivered too.
        """
        return self._client().ack(self, "failed", group=group, error=error)

    def renew(self, seconds: Optional[int] = None) -> Dict[str, Any]:
        """Extend this message's lease (its pop's lease) to ``seconds`` **seconds** from now
        (None: the broker default, 60); see :meth:`queen_sync.Queen.renew`.

        Returns ``{index, leaseId, success, error, expiresAt}``. Raises LeaseError (refused)
        or InvalidInputError (no lease: popped with ``auto_ack(True)``; ``seconds`` not an
        int of 1..2147483647), nothing sent then.
        Wire: ``POST /api/v1/lease/{leaseId}/extend``.
        """
        return self._client().renew(self, seconds)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class _BoundMessage(Message):
    """A :class:`Message` made by :func:`bind_messages`: dict's own C ``__init__`` (no Python
    call per message on the pop path: about 2.5x cheaper than ``Message(m, client)``)."""

    __slots__ = ()
    __init__ = dict.__init__


def bound_type(client: Optional[MessageClient]) -> Type[Message]:
    """A :class:`Message` subclass whose instances are bound to ``client``: ``bound_type(c)(m)``
    is a shallow copy of the dict ``m`` bound to ``c``, made in C. The consume loop makes one
    per consumer and maps it over each pop (``list(map(cls, popped))``: no Python call per
    message, where :func:`bind_messages` runs a loop of its own). Its instances behave as any
    bound :class:`Message` (``type(m).__name__`` is ``"Message"``); their client is read-only.
    """
    return type("Message", (_BoundMessage,), {"__slots__": (), "_queen": client, "__module__": __name__,
                                              "__qualname__": "Message"})


_settle_lock = threading.Lock()
_settle_total = 0


def note_settled(message: Any, status: str) -> None:
    """Record that the broker accepted an ack of ``message`` with ``status`` (a normalised
    status: ``completed``, ``failed``, ``retry``, ``dlq``), when it is a :class:`Message`;
    anything else is ignored. The consumer reads it (:func:`settled_status`) so that a
    handler that acked its message itself under auto-ack gets no second ack."""
    global _settle_total
    if isinstance(message, Message):
        message._settled = status
        with _settle_lock:  # a lost increment could hide an ack from a consumer's before/after check
            _settle_total += 1


def settled_count() -> int:
    """How many :func:`note_settled` calls this process made so far (any thread): a consumer
    compares it before and after a handler call, and looks at the messages only if it moved."""
    return _settle_total


def settled_status(message: Any) -> Optional[str]:
    """The status :func:`note_settled` recorded for ``message``, or None."""
    return getattr(message, "_settled", None)


def bind_messages(client: Optional[MessageClient], messages: Sequence[Mapping[str, Any]]) -> List[Message]:
    """Wrap popped message dicts as :class:`Message` objects bound to ``client`` (a shallow
    copy each; no request). ``pop()`` and the consume loop call this on every pop result."""
    out: List[Message] = []
    append = out.append
    for m in messages:
        if isinstance(m, Message) and m._queen is client:
            append(m)
        else:
            b = _BoundMessage(m)
            b._queen = client
            append(b)
    return out
