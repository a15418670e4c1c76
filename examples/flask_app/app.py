"""Example Flask app: each ``POST /orders`` pushes one message to Queen from the request.

Run it (with a broker, e.g. ``python -m queen_sync.testing --port 6632``)::

    export QUEEN_URL=http://127.0.0.1:6632
    python -m gunicorn -c gunicorn.conf.py app:app     # from this directory
    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"id": "o-1", "customer": "acme", "total": 42}'

Flush strategy (buffered producer): pushes go into a per-(queue, partition) buffer of the
process's shared client and are sent in batches of up to ``ORDERS_BATCH`` messages, or
``ORDERS_FLUSH_MILLIS`` milliseconds after the oldest buffered one, from a background thread.
``POST /orders?confirm=1`` also flushes before answering, so a 201 means the broker stored
it (a plain request answers 202 "accepted"). When a worker exits, the client is closed -
by gunicorn's ``worker_exit`` hook in ``gunicorn.conf.py``, and by the extension's ``atexit``
hook otherwise - which sends what is still buffered (bounded by ``QUEEN_CLOSE_TIMEOUT_MILLIS``).

Answers: 400 with ``{"error": ...}`` for bad input (a body that is not a JSON object, an
``id`` / ``customer`` that is not a str or int, a customer name that cannot be a partition
name); 503 when the broker cannot be reached; 502 when it refuses the push; 504 when
``?confirm=1`` was not confirmed in time.

Start-up does not configure the queue: the broker's configure is a resetting upsert (every
option not given goes back to its default), so calling it on each deploy would undo an
operator's settings, and a push creates a missing queue anyway. With ``ORDERS_QUEUE_OPTIONS``
(a dict of queue options, in ``create_app(config)``) the queue is created with those options
only when the broker does not have it yet.

Settings (environment): ``QUEEN_URL`` (broker), ``ORDERS_QUEUE`` (default ``orders``),
``ORDERS_BATCH`` (default 100), ``ORDERS_FLUSH_MILLIS`` (default 100).
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Mapping, Optional, Tuple

from flask import Flask, jsonify, request

from queen_sync import BrokerError, BufferFullError, InvalidInputError, Queen, QueenConnectionError
from queen_sync.contrib.flask import FlaskQueen, queen

queen_ext = FlaskQueen()


def _error(status: int, message: str) -> Tuple[Any, int]:
    return jsonify(error=message), status


def ensure_queue(client: Queen, name: str, options: Optional[Mapping[str, Any]] = None) -> bool:
    """Create queue ``name`` (with ``options``) only if the broker does not have it yet.

    Returns True when it was created. A queue that exists keeps its configuration (the
    broker's configure would reset every option not given back to its default).
    Raises BrokerError / QueenConnectionError from the broker.
    """
    try:
        client.admin.get_queue(name)  # GET /api/v1/resources/queues/{name}
        return False
    except BrokerError as exc:
        if "not found" not in str(exc).lower():
            raise
    builder = client.queue(name)
    if options:
        builder = builder.config(dict(options))
    builder.create()
    return True


def create_app(config: Optional[Mapping[str, Any]] = None) -> Flask:
    """Build the app; ``config`` overrides the defaults (e.g. ``QUEEN_URL``, ``ORDERS_QUEUE``,
    ``ORDERS_QUEUE_OPTIONS``)."""
    app = Flask(__name__)
    app.config.from_mapping(
        QUEEN_TIMEOUT_MILLIS=10000,
        QUEEN_CLOSE_TIMEOUT_MILLIS=10000,
        ORDERS_QUEUE=os.environ.get("ORDERS_QUEUE", "orders"),
        ORDERS_BATCH=int(os.environ.get("ORDERS_BATCH", "100")),
        ORDERS_FLUSH_MILLIS=int(os.environ.get("ORDERS_FLUSH_MILLIS", "100")),
        ORDERS_QUEUE_OPTIONS=None,
    )
    if config:
        app.config.update(config)
    queen_ext.init_app(app)  # QUEEN_URL unset here: the client reads the QUEEN_URL env var

    @app.post("/orders")
    def create_order() -> Any:
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        order_id = body.get("id") or str(uuid.uuid4())
        customer = body.get("customer") or "default"
        for field, value in (("id", order_id), ("customer", customer)):
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                return _error(400, "%s must be a string or an integer" % field)
        order_id, customer = str(order_id), str(customer)
        try:
            orders = (
                queen.queue(app.config["ORDERS_QUEUE"])
                .partition(customer)  # raises InvalidInputError for a name Queen cannot route
                .buffer(app.config["ORDERS_BATCH"], app.config["ORDERS_FLUSH_MILLIS"])
            )
            [result] = orders.push({"data": {"orderId": order_id, "order": body}})
            if request.args.get("confirm") and orders.flush(timeout_millis=5000):
                return _error(504, "the broker did not confirm the message in time")
        except InvalidInputError as exc:  # bad customer name, payload not JSON-serialisable
            return _error(400, str(exc))
        except (BufferFullError, QueenConnectionError):  # the broker cannot be reached
            return _error(503, "queue temporarily unavailable")
        except BrokerError as exc:  # the broker answered but refused
            return _error(502, "the broker refused the message: %s" % type(exc).__name__)
        status, code = ("stored", 201) if request.args.get("confirm") else ("accepted", 202)
        return jsonify(orderId=order_id, transactionId=result["transaction_id"], status=status), code

    @app.get("/health")
    def health() -> Any:
        return jsonify(ok=True, pid=os.getpid())

    if app.config["ORDERS_QUEUE_OPTIONS"]:
        # At import time; under gunicorn --preload this runs once in the master, whose client
        # the forked workers do not reuse (each worker makes its own on first use).
        with app.app_context():
            ensure_queue(queen._get_current_object(), app.config["ORDERS_QUEUE"], app.config["ORDERS_QUEUE_OPTIONS"])
    return app


app = create_app()  # the WSGI entry point: ``gunicorn app:app``
