"""The dead-letter read route.

A Queen 0.15 broker does not apply ``limit`` here and answers ``offset >= 1`` with
``{"success": true, "value": null}``, so neither is sent: the caller pages client-side.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..errors import ProtocolError
from ._base import Requester, checked, query_params

__all__ = ["read"]


def read(requester: Requester, queue: str, group: Optional[str]) -> List[Dict[str, Any]]:
    """Every dead-letter row of ``queue`` (of consumer group ``group``, or of every group),
    newest failure first.

    Raises:
        BrokerError: the broker answered with ``error``.
        ProtocolError: the reply has no ``messages`` list.

    Wire: ``GET /api/v1/dlq?queue={q}[&consumerGroup={g}]``.
    """
    doc = checked(
        requester,
        "GET",
        "/api/v1/dlq",
        what="dead-letter read of queue %r" % queue,
        query=query_params(queue=queue, consumerGroup=group),
    )
    if doc is None or (isinstance(doc, dict) and doc.get("messages") is None and "value" in doc):
        return []  # a 0.15 broker's {"success": true, "value": null}
    if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        rows: List[Dict[str, Any]] = doc["messages"]
        return rows
    raise ProtocolError("dead-letter reply has no 'messages' list")
