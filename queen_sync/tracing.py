"""Message traces: short records (``data``, trace names, event type) attached to a message
and readable later with ``Queen.admin.get_traces_for_message`` / ``get_traces_by_name``.

>>> q.trace(msg, "checkout", {"step": "charged"})                              # doctest: +SKIP
>>> def handler(msg):                       # popped / consumed: msg is a queen_sync.Message
...     msg.trace(["checkout", "audit"], {"step": "received"}, event_type="info")

Traces carry no trace id of their own (the broker mints one); a message's ``traceId`` is
never sent by these calls.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .codec import QUEUE_MODE as _QUEUE_MODE
from ._validate import validate_name
from .errors import InvalidInputError
from .message import Message, MessageClient, bind_messages  # their earlier home: re-exported
from .wire import traces as wire_traces
from .wire._base import Requester

__all__ = ["Message", "Tracer", "trace", "bind_messages"]

Names = Union[str, Sequence[str], None]


#: what a :class:`Message` records its traces through (the client that delivered it)
Tracer = MessageClient


def _names(names: Names) -> Optional[List[str]]:
    if names is None:
        return None
    lst = [names] if isinstance(names, str) else names
    if isinstance(lst, (bytes, Mapping)) or not isinstance(lst, Sequence):
        raise InvalidInputError("trace names must be a str or a list of str, got %r" % (names,))
    out = []
    for n in lst:
        if not isinstance(n, str) or not n:
            raise InvalidInputError("a trace name must be a non-empty str, got %r" % (n,))
        out.append(n)
    return out or None


def trace(
    requester: Requester,
    message: Mapping[str, Any],
    names: Names = None,
    data: Optional[Mapping[str, Any]] = None,
    event_type: str = "info",
    *,
    group: Optional[str] = None,
) -> Dict[str, Any]:
    """Record a trace on a popped or consumed message.

    Args:
        message: a message dict (needs ``transactionId`` and ``partitionId``; its
            ``consumerGroup`` is recorded unless ``group`` is given; queue mode otherwise).
        names: a trace name or a list of them (group traces across messages), or None.
        data: the trace content, a JSON-serialisable dict (required by the broker).
        event_type: a free label such as ``"info"`` (default), ``"error"``, ``"processing"``.
        group: the consumer group to record the trace under (a consumer-group name, or
            ``"__QUEUE_MODE__"`` for queue mode); default: the message's own
            ``consumerGroup``, queue mode when it has none. The broker stores it as the
            trace's ``consumer_group`` and does not check it against the message.

    Returns:
        ``{success: True, traceId}`` (the id the broker gave the trace).

    Raises:
        InvalidInputError: a message without ids, no ``data``, bad names, a ``group`` that
            is not a valid consumer-group name (a non-empty str of ``A-Z a-z 0-9 . _ ~ -``,
            at most 255 characters), NaN / ±Infinity in ``data`` unless the client has
            ``nan_as_null`` (nothing sent).
        BrokerError: ``Message not found`` (e.g. the message was deleted).

    Wire: ``POST /api/v1/traces`` ``{transactionId, partitionId, consumerGroup, traceNames,
    eventType, data}``.
    """
    if not isinstance(message, Mapping):
        raise InvalidInputError("trace() needs a message dict, got %s" % type(message).__name__)
    tx, pid = message.get("transactionId"), message.get("partitionId")
    if not isinstance(tx, str) or not tx or not isinstance(pid, str) or not pid:
        raise InvalidInputError("trace() needs a message with transactionId and partitionId")
    if data is None or not isinstance(data, Mapping):
        raise InvalidInputError("trace data must be a dict (the broker requires it), got %r" % (data,))
    if not isinstance(event_type, str) or not event_type:
        raise InvalidInputError("event_type must be a non-empty str, got %r" % (event_type,))
    if group is None:
        g = message.get("consumerGroup")
        group = g if isinstance(g, str) and g else _QUEUE_MODE
    else:
        group = validate_name("consumer group", group)
    reply: Dict[str, Any] = wire_traces.record(
        requester,
        transaction_id=tx,
        partition_id=pid,
        group=group,
        names=_names(names),
        event_type=event_type,
        data=data,
        # the client's nan_as_null (its session carries it), as for pushes and transactions
        nan_as_null=getattr(requester, "nan_as_null", False) is True,
    )
    return reply
