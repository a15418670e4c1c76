"""``POST /orders/`` pushes the order to Queen (a direct push: answered once the broker stored it)."""

import json
import uuid

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from queen_sync import QueenError
from queen_sync.contrib.django import get_client


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    try:
        order = json.loads(request.body or b"{}")
    except ValueError:
        return JsonResponse({"error": "the body must be JSON"}, status=400)
    if not isinstance(order, dict):
        return JsonResponse({"error": "the body must be a JSON object"}, status=400)
    order_id = str(order.get("id") or uuid.uuid4())
    partition = str(order.get("customer") or "default")
    try:
        [result] = get_client().queue(settings.ORDERS_QUEUE).partition(partition).push(
            {"data": {"orderId": order_id, "order": order}}
        )
    except QueenError as exc:
        return JsonResponse({"error": "queue unavailable: %s" % type(exc).__name__}, status=503)
    return JsonResponse({"orderId": order_id, "transactionId": result.get("transaction_id"), "status": result.get("status")}, status=201)
