"""``POST /orders/`` pushes the order to Queen (a direct push: answered once the broker stored it).

Answers 201 when stored; 400 with ``{"error": ...}`` for bad input (not a JSON object, an
``id`` / ``customer`` that is not a str or int, a customer name that cannot be a partition
name); 503 when the broker cannot be reached; 502 when it refuses the push. Nothing here
configures the queue (the broker's configure resets every option not given; a push creates a
missing queue).
"""

import json
import uuid

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from queen_sync import BrokerError, InvalidInputError, QueenConnectionError
from queen_sync.contrib.django import get_client


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    try:
        order = json.loads(request.body)
    except ValueError:
        order = None
    if not isinstance(order, dict):
        return JsonResponse({"error": "the body must be a JSON object"}, status=400)
    order_id = order.get("id") or str(uuid.uuid4())
    customer = order.get("customer") or "default"
    for field, value in (("id", order_id), ("customer", customer)):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return JsonResponse({"error": "%s must be a string or an integer" % field}, status=400)
    order_id, customer = str(order_id), str(customer)
    try:
        [result] = get_client().queue(settings.ORDERS_QUEUE).partition(customer).push(
            {"data": {"orderId": order_id, "order": order}}
        )
    except InvalidInputError as exc:  # e.g. a customer name that cannot be a partition name
        return JsonResponse({"error": str(exc)}, status=400)
    except QueenConnectionError as exc:  # the broker cannot be reached (or timed out)
        return JsonResponse({"error": "queue unavailable: %s" % type(exc).__name__}, status=503)
    except BrokerError as exc:  # the broker answered but refused the push
        return JsonResponse({"error": "the broker refused the order: %s" % type(exc).__name__}, status=502)
    return JsonResponse({"orderId": order_id, "transactionId": result.get("transaction_id"), "status": result.get("status")}, status=201)
