"""Handlers for ``python manage.py queen_consume orders.handlers.handle_order --queue orders``.

A handler gets one message dict (``{"id", "transactionId", "partition", "data", ...}``);
returning acks it, raising nacks it (the broker redelivers it, then dead-letters it).
"""

import logging
from typing import Any, Dict

log = logging.getLogger("orders")


def handle_order(message: Dict[str, Any]) -> None:
    order = message["data"]
    log.info("order %s for %s handled (partition %s)", order.get("orderId"), order.get("order", {}).get("customer"), message.get("partition"))
