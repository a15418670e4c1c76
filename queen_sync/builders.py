"""The builders under their earlier import path.

:class:`QueueBuilder` lives in :mod:`queen_sync.queues`, the transaction builders in
:mod:`queen_sync.transactions`, queue options in :mod:`queen_sync.options`, name checks in
:mod:`queen_sync._validate` and :class:`PopSpec` in :mod:`queen_sync.wire.messages`; they
are re-exported here.
"""

from __future__ import annotations

from ._validate import group_from_context, resolve_group, validate_name, validate_path_token
from .options import QUEUE_OPTION_DEFAULTS, QUEUE_OPTIONS
from .queues import QueueBuilder
from .transactions import TransactionBuilder, TransactionQueueBuilder
from .wire.messages import PopSpec

__all__ = [
    "QueueBuilder",
    "TransactionBuilder",
    "TransactionQueueBuilder",
    "PopSpec",
    "validate_name",
    "validate_path_token",
    "resolve_group",
    "group_from_context",
    "QUEUE_OPTIONS",
    "QUEUE_OPTION_DEFAULTS",
]

