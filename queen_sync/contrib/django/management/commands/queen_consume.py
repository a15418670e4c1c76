"""``manage.py queen_consume``: run a message handler on a queue with the shared client.

::

    python manage.py queen_consume orders.handlers.handle_order --queue orders \\
        [--group billing] [--partition acme] [--concurrency 4] [--batch 10] [--each] \\
        [--limit 1000] [--idle-millis 60000] [--drain-timeout-millis 30000] [--renew-lease-millis 10000] \\
        [--subscription-mode all|new] [--subscription-from now|ISO-8601]

The handler (a dotted path ``package.module.callable``, or ``package.module:callable``) is
called with one message dict (``--batch 1`` or ``--each``), else with the list of one
partition's messages of one pop. Returning acks the message(s) ``completed``; raising nacks
them ``failed`` (the broker redelivers up to the queue's retry limit, then moves them to the
dead-letter queue). Within a partition, messages are handled in order, one at a time.

The command stops after ``--limit`` messages, after ``--idle-millis`` milliseconds without a
message, or on SIGTERM / SIGINT: then no new pop is made, messages already popped are
handled and acked for at most ``--drain-timeout-millis`` milliseconds (default 30000;
the older ``--drain-timeout`` in seconds still works for one release, with a deprecation
note on stderr); popped messages no handler got by
then are released to the broker unhandled, except those queued behind a handler of the
same partition that is still running: they are released once that handler has returned
(releasing them earlier would free the partition while its handler runs). The command
waits for the handlers still running, then exits with status 0; a second signal falls back
to the default behaviour (immediate exit). A pop error that is not a transient connection
problem (e.g. authentication) exits with status 1.

Once the consumer has fully stopped (every handler returned, the final acks and releases
sent), prints one summary line: ``queen_consume: queue=Q handled=N acked=N failed=N
released=N ack_failures=N reason=R``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from queen_sync.errors import QueenError

from ... import get_client

log = logging.getLogger("queen_sync.contrib.django")


def _positive(value: str) -> int:
    import argparse

    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be an integer, got %r" % value) from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %d" % n)
    return n


def load_handler(path: str) -> Callable[[Any], Any]:
    """Import the handler named by ``path`` (``pkg.mod.func`` or ``pkg.mod:func``).

    Raises:
        CommandError: it cannot be imported or is not callable.
    """
    dotted = path.replace(":", ".")
    try:
        handler = import_string(dotted)
    except ImportError as exc:
        raise CommandError("cannot import the handler %r: %s" % (path, exc)) from None
    if not callable(handler):
        raise CommandError("the handler %r is not callable" % (path,))
    return handler


class Command(BaseCommand):
    help = (
        "Consume a Queen queue with a handler given by dotted path; stops on --limit, "
        "--idle-millis or SIGTERM/SIGINT (graceful: in-flight messages are finished and acked)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("handler", help="dotted path of the handler callable (pkg.module.func)")
        parser.add_argument("--queue", required=True, help="queue name")
        parser.add_argument("--group", default=None, help="consumer group (default: queue mode)")
        parser.add_argument("--partition", default=None, help="consume only this partition")
        parser.add_argument("--concurrency", type=_positive, default=1, help="handler threads (default 1)")
        parser.add_argument("--batch", type=_positive, default=1, help="messages per pop (default 1)")
        parser.add_argument("--each", action="store_true", help="call the handler per message even when --batch > 1")
        parser.add_argument("--limit", type=_positive, default=None, help="stop after this many messages")
        parser.add_argument(
            "--idle-millis", type=_positive, default=None, help="stop after this many milliseconds without a message"
        )
        parser.add_argument(
            "--drain-timeout-millis",
            type=int,
            default=None,
            help="milliseconds a stop waits for popped messages to be handled and acked (default 30000)",
        )
        parser.add_argument(
            "--drain-timeout",
            type=float,
            default=None,
            help="deprecated: the same in seconds (use --drain-timeout-millis)",
        )
        parser.add_argument(
            "--renew-lease-millis",
            type=_positive,
            default=None,
            help="renew leases of unfinished messages every this many milliseconds (at least 500)",
        )
        parser.add_argument("--subscription-mode", choices=["all", "new"], default=None)
        parser.add_argument("--subscription-from", default=None, help='"now" or an ISO-8601 timestamp')

    def handle(self, *args: Any, **opts: Any) -> None:
        handler = load_handler(opts["handler"])
        drain_ms = opts["drain_timeout_millis"]
        if drain_ms is not None and drain_ms < 0:
            raise CommandError("--drain-timeout-millis must be >= 0")
        if opts["drain_timeout"] is not None:
            if drain_ms is not None:
                raise CommandError("give --drain-timeout-millis, not both it and --drain-timeout")
            if not opts["drain_timeout"] >= 0:
                raise CommandError("--drain-timeout must be >= 0")
            self.stderr.write("queen_consume: --drain-timeout (seconds) is deprecated; use --drain-timeout-millis")
            drain_ms = int(round(opts["drain_timeout"] * 1000.0))
        try:
            client = get_client()
            b = client.queue(opts["queue"])
            # `is not None`: an empty --group "$G" is refused by the client, not taken as
            # queue mode (whose cursor the run would move and whose nacks it would count)
            if opts["partition"] is not None:
                b = b.partition(opts["partition"])
            if opts["group"] is not None:
                b = b.group(opts["group"])
            b = b.batch(opts["batch"]).concurrency(opts["concurrency"])
            if opts["each"]:
                b = b.each()
            if opts["limit"] is not None:
                b = b.limit(opts["limit"])
            if opts["idle_millis"] is not None:
                b = b.idle_millis(opts["idle_millis"])
            if opts["renew_lease_millis"] is not None:
                b = b.renew_lease(True, opts["renew_lease_millis"])
            if opts["subscription_mode"] is not None:
                b = b.subscription_mode(opts["subscription_mode"])
            if opts["subscription_from"] is not None:
                b = b.subscription_from(opts["subscription_from"])
            in_main = threading.current_thread() is threading.main_thread()
            log.info(
                "queen_consume: consuming queue %r (group %r, concurrency %d, batch %d)",
                opts["queue"],
                opts["group"],
                opts["concurrency"],
                opts["batch"],
            )
            consumer = b.consume(
                handler, background=True, handle_signals=in_main, drain_timeout_millis=drain_ms
            )
            try:
                # the final counters: wait for the handlers still running after the drain
                # timeout and for their acks / the releases behind them
                while not consumer.join(0.5):
                    pass
            except KeyboardInterrupt:  # a second SIGINT: release what is left, then exit
                consumer.stop(drain_timeout_millis=0)
                raise
            result = consumer.result
        except QueenError as exc:
            raise CommandError("queen_consume failed: %s: %s" % (type(exc).__name__, exc)) from exc
        self.stdout.write(
            "queen_consume: queue=%s handled=%d acked=%d failed=%d released=%d ack_failures=%d reason=%s"
            % (
                opts["queue"],
                result.handled,
                result.acked,
                result.failed,
                result.released,
                result.ack_failures,
                result.reason,
            )
        )
