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

Settings (environment): ``QUEEN_URL`` (broker), ``ORDERS_QUEUE`` (default ``orders``),
``ORDERS_BATCH`` (default 100), ``ORDERS_FLUSH_MILLIS`` (default 100).
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Dict, Mapping, Optional

from flask import Flask, abort, jsonify, request

from queen_sync import BufferFullError, InvalidInputError
from queen_sync.contrib.flask import FlaskQueen, queen

queen_ext = FlaskQueen()


def create_app(config: Optional[Mapping[str, Any]] = None) -> Flask:
    """Build the app; ``config`` overrides the defaults (e.g. ``QUEEN_URL``, ``ORDERS_QUEUE``)."""
    app = Flask(__name__)
    app.config.from_mapping(
        QUEEN_TIMEOUT_MILLIS=10000,
        QUEEN_CLOSE_TIMEOUT_MILLIS=10000,
        ORDERS_QUEUE=os.environ.get("ORDERS_QUEUE", "orders"),
        ORDERS_BATCH=int(os.environ.get("ORDERS_BATCH", "100")),
        ORDERS_FLUSH_MILLIS=int(os.environ.get("ORDERS_FLUSH_MILLIS", "100")),
        ORDERS_CREATE_QUEUE=True,
    )
    if config:
        app.config.update(config)
    queen_ext.init_app(app)  # QUEEN_URL unset here: the client reads the QUEEN_URL env var

    @app.post("/orders")
    def create_order() -> Any:
        body: Dict[str, Any] = request.get_json(silent=True) or {}
        order_id = str(body.get("id") or uuid.uuid4())
        partition = str(body.get("customer") or "default")
        orders = (
            queen.queue(app.config["ORDERS_QUEUE"])
            .partition(partition)
            .buffer(app.config["ORDERS_BATCH"], app.config["ORDERS_FLUSH_MILLIS"])
        )
        try:
            [result] = orders.push({"data": {"orderId": order_id, "order": body}})
        except InvalidInputError as exc:  # e.g. a payload that is not JSON-serialisable
            abort(400, str(exc))
        except BufferFullError:  # the broker is unreachable and the buffer is full
            abort(503, "queue temporarily unavailable")
        if request.args.get("confirm"):
            if orders.flush(timeout_millis=5000):
                abort(504, "the broker did not confirm the message in time")
            return jsonify(orderId=order_id, transactionId=result["transaction_id"], status="stored"), 201
        return jsonify(orderId=order_id, transactionId=result["transaction_id"], status="accepted"), 202

    @app.get("/health")
    def health() -> Any:
        return jsonify(ok=True, pid=os.getpid())

    if app.config["ORDERS_CREATE_QUEUE"]:
        # At import time; under gunicorn --preload this runs once in the master, whose client
        # the forked workers do not reuse (each worker makes its own on first use).
        with app.app_context():
            queen.queue(app.config["ORDERS_QUEUE"]).create()
    return app


app = create_app()  # the WSGI entry point: ``gunicorn app:app``
