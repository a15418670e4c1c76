"""Queue options: their names, units and broker defaults, the check of a ``config()`` dict,
and the read-merge-write of ``update_config``.

``POST /api/v1/configure`` is an upsert that **resets** every option it is not given, and a
0.15 broker reports only 7 of the 15 options back (``GET /api/v1/status/queues/{q}``). So
:func:`update_queue_config` reads what the broker reports, takes the other 8 from the last
configure reply this client saw for the queue (:class:`QueueOptionMemory`), merges the
changes over them and sends the full set.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Dict, Mapping, Optional

from ._validate import bool_arg, int_arg
from .errors import BrokerError, InvalidInputError, ProtocolError, QueenHTTPError
from .wire import admin as wire_admin
from .wire import resources as wire_resources
from .wire._base import Requester

__all__ = [
    "QUEUE_OPTIONS",
    "QUEUE_OPTION_DEFAULTS",
    "READABLE_QUEUE_OPTIONS",
    "UNREADABLE_QUEUE_OPTIONS",
    "check_options",
    "QueueOptionMemory",
    "update_queue_config",
]

# the logger these warnings had before they moved here (users may have configured it)
log = logging.getLogger("queen_sync.admin")

#: The broker's queue options (camelCase wire name → kind), as ``POST /api/v1/configure`` takes them.
QUEUE_OPTIONS: Dict[str, str] = {
    "leaseTime": "seconds",
    "retryLimit": "count",
    "retryDelay": "millis",
    "deadLetterQueue": "bool",
    "dlqAfterMaxRetries": "bool",
    "priority": "int",
    "delayedProcessing": "seconds",
    "windowBuffer": "seconds",
    "maxSize": "count",
    "ttl": "seconds",
    "retentionSeconds": "seconds",
    "completedRetentionSeconds": "seconds",
    "retentionEnabled": "bool",
    "encryptionEnabled": "bool",
    "maxWaitTimeSeconds": "seconds",
}

#: What a 0.15 broker resets every omitted option to (configure is an upsert that resets).
QUEUE_OPTION_DEFAULTS: Dict[str, Any] = {
    "leaseTime": 300,
    "retryLimit": 3,
    "retryDelay": 1000,
    "deadLetterQueue": False,
    "dlqAfterMaxRetries": False,
    "priority": 0,
    "delayedProcessing": 0,
    "windowBuffer": 0,
    "maxSize": 0,
    "ttl": 3600,
    "retentionSeconds": 0,
    "completedRetentionSeconds": 0,
    "retentionEnabled": False,
    "encryptionEnabled": False,
    "maxWaitTimeSeconds": 0,
}

#: Options ``GET /api/v1/status/queues/{q}`` reports (wire option → key under ``queue.config``,
#: or ``queue.priority``). The other 8 options a 0.15 broker never reports.
READABLE_QUEUE_OPTIONS: Dict[str, str] = {
    "leaseTime": "leaseTime",
    "retryLimit": "retryLimit",
    "retryDelay": "retryDelay",
    "ttl": "ttl",
    "deadLetterQueue": "deadLetterQueue",
    "maxSize": "maxQueueSize",
    "priority": "priority",
}

#: Options a 0.15 broker accepts on configure but never reports back (outside the configure reply).
UNREADABLE_QUEUE_OPTIONS = tuple(k for k in QUEUE_OPTION_DEFAULTS if k not in READABLE_QUEUE_OPTIONS)


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


_OPTION_ALIASES: Dict[str, str] = {}
for _camel in QUEUE_OPTIONS:
    _OPTION_ALIASES[_camel] = _camel
    _OPTION_ALIASES[_snake(_camel)] = _camel
_OPTION_ALIASES["dlq_after_max_retries"] = "dlqAfterMaxRetries"
del _camel


def check_options(options: Any) -> Dict[str, Any]:
    """Check a dict of queue options (snake_case or camelCase keys; see
    :meth:`queen_sync.queues.QueueBuilder.config` for units) and return it with camelCase keys.

    Raises:
        InvalidInputError: not a dict, an unknown key, or a value of the wrong type.
    """
    if not isinstance(options, Mapping):
        raise InvalidInputError("config() takes a dict of queue options, got %r" % (options,))
    out: Dict[str, Any] = {}
    for key, value in options.items():
        camel = _OPTION_ALIASES.get(key) if isinstance(key, str) else None
        if camel is None:
            raise InvalidInputError("unknown queue option %r; known: %s" % (key, ", ".join(sorted(QUEUE_OPTIONS))))
        kind = QUEUE_OPTIONS[camel]
        if camel in out:
            raise InvalidInputError("queue option %s given twice (as %r and another spelling)" % (camel, key))
        # the broker keeps options in PostgreSQL integer columns (32 bits)
        if kind == "bool":
            bool_arg(str(key), value)
        elif kind == "int":
            int_arg(str(key), value, -(2**31), 2**31 - 1)
        else:
            int_arg(str(key), value, 0, 2**31 - 1)
        out[camel] = value
    return out


class QueueOptionMemory:
    """The options of each queue's last configure reply one client saw (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: Dict[str, Dict[str, Any]] = {}

    def remember(self, reply: Any) -> None:
        """Record the options echoed by a configure reply ``{queue, options, ...}``."""
        if isinstance(reply, dict) and isinstance(reply.get("queue"), str) and isinstance(reply.get("options"), dict):
            with self._lock:
                self._known[reply["queue"]] = dict(reply["options"])

    def forget(self, queue: str) -> None:
        """Drop what was recorded for ``queue`` (after a delete)."""
        with self._lock:
            self._known.pop(queue, None)

    def get(self, queue: str) -> Dict[str, Any]:
        """A copy of what was recorded for ``queue`` (``{}`` when nothing)."""
        with self._lock:
            return dict(self._known.get(queue, {}))


def update_queue_config(
    requester: Requester,
    memory: QueueOptionMemory,
    queue: str,
    changes: Mapping[str, Any],
    namespace: Optional[str] = None,
    task: Optional[str] = None,
) -> Dict[str, Any]:
    """Change some options of ``queue`` (a validated name) and keep the others (see
    :meth:`queen_sync.queues.QueueBuilder.update_config`).

    Steps: ``GET /api/v1/status/queues/{q}`` (the only 0.15 route reporting a queue's
    options, namespace and task), merge, then ``POST /api/v1/configure`` with all 15 options.

    The options a 0.15 broker never reports (:data:`UNREADABLE_QUEUE_OPTIONS`) are taken
    from ``changes``, else from ``memory`` (the last configure reply this client saw for the
    queue), else reset to the broker defaults (logged as a warning).

    Returns:
        the configure reply ``{configured, queue, queueId, partitionId, namespace, task, options}``.

    Raises:
        InvalidInputError: a bad key or value in ``changes`` (nothing sent).
        BrokerError: the queue does not exist (the status read answered ``Queue not found``;
            nothing is configured), or the broker refused the read or the configure.
        ProtocolError: a reply has an unexpected shape (the configure reply is not an object).
    """
    validated = check_options(changes)
    merged: Dict[str, Any] = dict(QUEUE_OPTION_DEFAULTS)
    ns, tk = namespace, task
    path = "/api/v1/status/queues/%s" % queue
    try:
        detail = wire_admin.queue_detail(requester, queue, what="read of queue %r" % queue)
    except BrokerError as exc:
        if exc.error != "Queue not found" or isinstance(exc, QueenHTTPError):
            raise
        # configure is an upsert: sending it would create the queue with defaults (a typo'd
        # name would become a new queue); the read already told, so nothing more is sent
        raise BrokerError(
            "update_config(%r): queue %r does not exist (GET %s answered 'Queue not found'); "
            "nothing was configured. Create it with queue(%r).config({...}).create()"
            % (queue, queue, path, queue),
            status=exc.status,
            error=exc.error,
            body=exc.body,
        ) from None
    remembered = memory.get(queue)
    qd = detail.get("queue") if isinstance(detail, dict) else None
    if not isinstance(qd, dict):
        raise ProtocolError("queue status reply has no 'queue' object")
    raw_cfg = qd.get("config")
    cfg = raw_cfg if isinstance(raw_cfg, dict) else {}
    for opt in UNREADABLE_QUEUE_OPTIONS:
        if opt in remembered:
            merged[opt] = remembered[opt]
    for opt, key in READABLE_QUEUE_OPTIONS.items():
        src = qd if opt == "priority" else cfg
        if src.get(key) is not None:
            merged[opt] = src[key]
    if ns is None and isinstance(qd.get("namespace"), str):
        ns = qd["namespace"]
    if tk is None and isinstance(qd.get("task"), str):
        tk = qd["task"]
    reset = [o for o in UNREADABLE_QUEUE_OPTIONS if o not in validated and o not in remembered]
    if reset:
        log.warning(
            "update_config(%r): a Queen 0.15 broker does not report %s; they are sent as the "
            "broker defaults (pass them to update_config() to keep other values)",
            queue,
            ", ".join(reset),
        )
    merged.update(validated)
    reply = wire_resources.configure(requester, queue, merged, namespace=ns or None, task=tk or None)
    memory.remember(reply)
    return reply
