"""Run the embedded broker standalone: ``python -m queen_sync.testing --port 6632``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from . import EmbeddedBroker


def main(argv=None, prog: str = "python -m queen_sync.testing") -> int:
    """Run the broker until SIGTERM / Ctrl-C; ``prog``: the name usage lines show."""
    ap = argparse.ArgumentParser(prog=prog,
                                 description="In-memory Queen 0.15 compatible broker (for tests and development).")
    ap.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=6632, help="TCP port (default 6632; 0 = any free port)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log every request")
    opts = ap.parse_args(argv)
    if not 0 <= opts.port <= 65535:
        print("error: --port %d is out of range (0-65535)" % opts.port, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if opts.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        broker = EmbeddedBroker(host=opts.host, port=opts.port).start()
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        print("error: cannot listen on %s:%d: %s" % (opts.host, opts.port, reason), file=sys.stderr)
        return 2
    print("Queen-compatible embedded broker listening on %s (Ctrl-C to stop)" % broker.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    broker.stop()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
