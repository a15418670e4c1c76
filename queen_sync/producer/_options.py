"""The options of one push buffer: :class:`BufferOptions` (the batch triggers and the
bound), checked when they are made (:meth:`QueueBuilder.buffer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .._validate import int_arg
from ..errors import InvalidInputError

__all__ = ["BufferOptions"]


@dataclass(frozen=True)
class BufferOptions:
    """Options of a push buffer (see :meth:`QueueBuilder.buffer`).

    Attributes:
        message_count: send a batch when this many messages are buffered; also the largest
            batch (default 100).
        time_millis: send a batch this many **milliseconds** after the oldest buffered
            message arrived (default 1000).
        max_bytes: send a batch when this many bytes of encoded items are buffered; also the
            largest batch of encoded items (default 1 MiB): a list push is split to fit, and
            only an item alone over it goes in a larger batch (sent alone).
        max_messages: bound of the buffer: messages waiting or in flight (default
            ``max(10000, 10 * message_count)``; at least ``message_count``).
        block_timeout_millis: how long a push into a full buffer waits for room, in
            **milliseconds**, before raising :class:`BufferFullError` (default 10000; 0 = fail at once).

    Raises:
        InvalidInputError: a value that is not a positive int (``block_timeout_millis`` may be 0).
    """

    message_count: int = 100
    time_millis: int = 1000
    max_bytes: int = 1 << 20
    max_messages: Optional[int] = None
    block_timeout_millis: int = 10000

    def __post_init__(self) -> None:
        int_arg("message_count", self.message_count, 1)
        int_arg("time_millis", self.time_millis, 0)
        int_arg("max_bytes", self.max_bytes, 1)
        int_arg("block_timeout_millis", self.block_timeout_millis, 0)
        if self.max_messages is None:
            object.__setattr__(self, "max_messages", max(10000, 10 * self.message_count))
        else:
            int_arg("max_messages", self.max_messages, 1)
            if self.max_messages < self.message_count:
                raise InvalidInputError(
                    "max_messages (%d) must be >= message_count (%d)" % (self.max_messages, self.message_count)
                )

    @classmethod
    def of(
        cls,
        message_count: Any = 100,
        time_millis: int = 1000,
        max_bytes: int = 1 << 20,
        max_messages: Optional[int] = None,
        block_timeout_millis: int = 10000,
    ) -> "BufferOptions":
        """The options of ``QueueBuilder.buffer(...)``'s arguments; ``message_count`` may also
        be a dict of them (official-client style ``{"message_count": .., "time_millis": ..}``).

        Raises:
            InvalidInputError: an unknown key in that dict, or a bad value.
        """
        if isinstance(message_count, Mapping):
            opts = dict(message_count)
            unknown = set(opts) - {"message_count", "time_millis", "max_bytes", "max_messages", "block_timeout_millis"}
            if unknown:
                raise InvalidInputError("unknown buffer option(s) %s" % sorted(map(str, unknown)))
            return cls(**opts)
        return cls(
            message_count=message_count,
            time_millis=time_millis,
            max_bytes=max_bytes,
            max_messages=max_messages,
            block_timeout_millis=block_timeout_millis,
        )
