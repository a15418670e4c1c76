"""gunicorn settings for the Flask example: ``python -m gunicorn -c gunicorn.conf.py app:app``."""

import os

bind = os.environ.get("BIND", "127.0.0.1:8000")
preload_app = True  # import the app once in the master, then fork (the client is per process)
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = 4
graceful_timeout = 20


def worker_exit(server, worker):  # noqa: ANN001 - gunicorn hook signature
    """Flush this worker's buffered messages before it exits (the atexit hook would too)."""
    from app import queen_ext

    unsent = queen_ext.close_all(timeout_millis=10000)
    if unsent:
        server.log.error("worker %s exiting with %d undelivered message(s)", worker.pid, unsent)
