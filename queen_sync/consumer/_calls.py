"""The consumer's broker calls, and everything else it takes from the rest of the package.

This is the one door between the consumer package and the client: pop, ack / ack batch /
release (one ack route, by status), lease renewal (extend), binding popped messages to the
client (so a handler can record traces on them), the client's ``closed`` flag, and the
consume settings read from a queue builder. Every other module of the package talks to a
:class:`Broker` and a :class:`BuilderSettings`, never to the client or the builder: moving
the consumer onto another layer of calls is a change to this file only.

The calls are made exactly as :mod:`queen_sync.client` / :mod:`queen_sync.builders` make
them (same routes, bodies, retries and error mapping); nothing is added or translated here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from ..builders import PopSpec, execute_pop
from ..tracing import Message as BoundMessage
from ..tracing import bind_messages

if TYPE_CHECKING:  # pragma: no cover
    from ..builders import QueueBuilder
    from ..client import Queen

__all__ = ["Broker", "BuilderSettings", "PopSpec", "read_builder"]

Message = Dict[str, Any]


class Broker:
    """The broker calls of one consumer, on its :class:`~queen_sync.Queen` client.

    Every method blocks and raises what the client raises (the error tree of
    :mod:`queen_sync.errors`; :class:`~queen_sync.errors.ClientClosedError` once the client is
    closed).
    """

    __slots__ = ("_client",)

    def __init__(self, client: "Queen") -> None:
        self._client = client

    @property
    def closed(self) -> bool:
        """True once the client was closed (``Queen.closed``)."""
        return self._client.closed

    def pop(self, spec: PopSpec) -> List[Message]:
        """One pop (``GET /api/v1/pop/...`` per ``spec``: queue, partition, group, batch,
        long-poll ``timeout_millis``...); returns the popped message dicts (maybe empty)."""
        return execute_pop(self._client, spec)

    def bind(self, popped: Sequence[Message]) -> List[BoundMessage]:
        """The popped messages as ``queen_sync.Message`` objects bound to the client (dicts
        that can record traces on themselves); no wire call."""
        return bind_messages(self._client, popped)

    def ack(self, target: Any, status: Any, context: Optional[Dict[str, Any]]) -> Any:
        """``Queen.ack``: one message dict (``POST /api/v1/ack``) or a list (``POST
        /api/v1/ack/batch``); ``status`` True (``completed``), False (``failed``) or
        ``"retry"`` (a release); ``context`` carries ``group`` / ``error``. Returns the
        broker's result dict (one message) or list of them; raises
        :class:`~queen_sync.errors.AckError` (with ``failed`` / ``results``) when the broker
        refuses some."""
        return self._client.ack(target, status, context)

    def renew(self, lease_id: str, seconds: int) -> Any:
        """``Queen.renew``: ``POST /api/v1/lease/{lease_id}/extend`` ``{"seconds": N}``;
        returns the reply dict (with ``expiresAt``); raises
        :class:`~queen_sync.errors.LeaseError` when the broker refuses the lease."""
        return self._client.renew(lease_id, seconds)


class BuilderSettings(NamedTuple):
    """The consume settings of a queue builder, as the builder holds them (not yet
    defaulted: ``auto_ack`` None means "not set")."""

    spec: PopSpec  #: the pop settings (queue, partition, group, batch, wait, timeout...)
    each: bool  #: ``each()`` was called
    auto_ack: Optional[bool]
    on_success: Optional[Callable[[Any, Any], Any]]
    on_error: Optional[Callable[[Any, BaseException], Any]]
    renew_interval_millis: Optional[int]  #: None unless ``renew_lease(True)``
    limit: Optional[int]
    idle_millis: Optional[int]
    concurrency: int


def read_builder(builder: "QueueBuilder") -> BuilderSettings:
    """Read the consume settings of ``builder`` (``pop_spec(for_consume=True)`` validates
    the pop settings and raises :class:`~queen_sync.errors.InvalidInputError` on bad ones)."""
    spec = builder.pop_spec(for_consume=True)
    return BuilderSettings(
        spec=spec,
        each=bool(builder._each),
        auto_ack=builder._auto_ack,
        on_success=getattr(builder, "_on_success", None),
        on_error=getattr(builder, "_on_error", None),
        renew_interval_millis=getattr(builder, "_renew_interval", None) if getattr(builder, "_renew", False) else None,
        limit=builder._limit,
        idle_millis=builder._idle,
        concurrency=builder._concurrency,
    )
