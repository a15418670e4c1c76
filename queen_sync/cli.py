"""The ``queen-sync`` command line (also ``python -m queen_sync``): push, pop, consume, inspect
queues, consumer groups and dead letters from a shell or a CI step, on the public API only.

Output is one JSON value per line on stdout (pipe it to ``jq``), or readable tables with
``--pretty`` (not for ``pop`` / ``consume``, which print messages as JSON lines only). Errors go
to stderr, one line, with exit status 1 (2 for bad usage, 130 when interrupted by Ctrl-C, 143 when
stopped by SIGTERM, e.g. in a ``pop --wait-millis`` long poll, 141 when stdout is closed early,
e.g. piped into ``head``: in these three, nothing unprinted is acked or nacked, it is released
for redelivery). ``consume`` differs: a first Ctrl-C (SIGINT) or SIGTERM stops it gracefully
(exit status 0 unless a message was nacked or an ack failed), a second SIGINT aborts it (130), a
second SIGTERM ends it as SIGTERM does; ``--debug`` adds the traceback and the library's debug log. The broker is
``--url`` or ``QUEEN_URL``; a bearer token is read from ``QUEEN_BEARER_TOKEN`` only (never
from the command line, where other users could see it). Run ``queen-sync COMMAND --help``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import BrokerError, InvalidInputError, Queen, QueenError, __version__, codec_backend
from ._cli_push import DEFAULT_LINGER_MILLIS, StdinLines, loads as _loads, push_lines
from ._cli_signals import HandlerScope
from ._validate import MAX_DURATION_MILLIS
from .testing.__main__ import main as broker_main

__all__ = ["main", "build_parser", "command_parser"]

log = logging.getLogger("queen_sync.cli")

PROG = "queen-sync"
#: Exit status when stdout is closed before the output is written (128 + SIGPIPE, as a shell says).
EXIT_BROKEN_PIPE = 141
#: Exit status after a SIGTERM outside ``consume`` (128 + SIGTERM, as a shell says).
EXIT_TERMINATED = 128 + signal.SIGTERM
#: Commands that print messages as JSON lines only (``--pretty`` is refused there).
_JSON_ONLY = ("pop", "consume")
#: Items per push request when reading stdin (``--batch-size``).
DEFAULT_PUSH_BATCH = 100
_CELL_WIDTH = 48
#: ``--exec`` return codes of a command killed by SIGINT / SIGTERM: released, not nacked.
_INTERRUPTED = (-signal.SIGINT, -signal.SIGTERM)
_PARTITION_COLUMNS = ("name", "messages.pending", "messages.processing", "messages.total", "cursor.totalConsumed",
                      "lastActivity")


class CliError(Exception):
    """A failure the command reports on one stderr line (exit status 1)."""


class StdoutClosed(Exception):
    """stdout was closed (BrokenPipeError) while a command wrote to it; the text says what
    became of the messages (exit status :data:`EXIT_BROKEN_PIPE`)."""


class _Terminated(BaseException):
    """SIGTERM outside ``consume``, raised in the main thread (a BaseException, as
    KeyboardInterrupt is: no ``except Exception`` of the library takes it for a failure of
    the request it interrupts); exit status :data:`EXIT_TERMINATED`. The text, if any, says
    what became of the messages."""


# ---------------------------------------------------------------------------- parser


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    """Options accepted before and after the command (``suppress``: no defaults on the
    command's parser, so it never overwrites what was given before the command)."""

    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    g = p.add_argument_group("connection and output")
    g.add_argument("--url", default=d(None), help="broker URL(s), comma-separated (default: $QUEEN_URL)")
    g.add_argument("--timeout-millis", type=_millis_at_least(1), default=d(30000), metavar="MS", help="per-request timeout (ms)")
    g.add_argument("--ca-certs", default=d(None), metavar="PEM", help="CA bundle for an https broker")
    g.add_argument("--cert-file", default=d(None), metavar="PEM", help="client certificate (mutual TLS)")
    g.add_argument("--key-file", default=d(None), metavar="PEM", help="client key, if not in --cert-file")
    g.add_argument("--pretty", action="store_true", default=d(False),
                   help="readable tables instead of JSON lines (not for pop / consume)")
    g.add_argument("--debug", action="store_true", default=d(False), help="tracebacks and debug logging")


_COMMAND_HELP = {
    "push": "push messages: one JSON payload as argument, or JSON lines from stdin ('-' or nothing)",
    "pop": "pop messages once and print them as JSON lines (they stay leased unless --ack)",
    "consume": "consume messages one at a time until --limit / --idle-millis / Ctrl-C",
    "queues": "list the queues",
    "queue": "one queue: its options, partitions and depth",
    "groups": "consumer groups (of one queue)",
    "seek": "move a consumer group's cursor on a queue",
    "dlq": "dead-letter rows of a queue, newest first",
    "health": "the broker's health (exit status 1 when unhealthy)",
    "broker": "run the embedded broker (options: queen-sync broker --help)",
}


_COMMAND_EPILOG = {
    "push": "From stdin, a batch is sent once it holds --batch-size lines, once its first line waited "
    "--linger-millis, or at the end of stdin ('tail -f app.log | %s push logs' sends each line within the "
    "linger). A first Ctrl-C (SIGINT) or SIGTERM stops the reading: the lines read and not yet sent are "
    "pushed, then the exit status is 130 (143 for SIGTERM) and stderr says how many were pushed, or how "
    "many were not sent; a second signal interrupts that last push." % PROG,
    "pop": "Messages are printed as JSON lines (--pretty is refused). With --ack only the messages "
    "written to stdout are acked; if stdout is closed early (e.g. '| head -1') the rest are released "
    "for redelivery and the exit status is %d." % EXIT_BROKEN_PIPE,
    "consume": "Messages are printed as JSON lines (--pretty is refused). Exit status 1 when any "
    "message was nacked (an --exec command failed) or an ack failed, %d when stdout is closed early (e.g. "
    "'| head -1'): the consumer stops, the message it could not print and every one not yet "
    "printed are released for redelivery (neither acked nor nacked). An --exec command killed by "
    "SIGINT / SIGTERM (Ctrl-C reaches it too) is no verdict: its message is released, not nacked, "
    "and consume stops. A first Ctrl-C (SIGINT) or SIGTERM stops consume gracefully: the running "
    "--exec command is waited for, what was popped and not started is released, and the exit status "
    "is 0 unless a message was nacked or an ack failed. A second SIGINT aborts it: the running "
    "--exec command is sent SIGTERM (its message released), exit status 130; a second SIGTERM "
    "ends the process as SIGTERM does." % EXIT_BROKEN_PIPE,
}


_DECIMAL = re.compile("-?[0-9]+")
#: More digits than any integer flag takes (the bounds of the client are far below).
_MAX_DIGITS = 30


def _int_at_least(minimum: int, maximum: Optional[int] = None) -> Callable[[str], int]:
    """An argparse ``type`` for an int option from ``minimum`` (to ``maximum``); its error
    names the option, where the client's own check would name the client's argument."""

    def parse(text: str) -> int:
        # plain ASCII decimal digits only: int() also takes "1_000", " 5 ", "+5" and other
        # scripts' digits ("\u0665"); a "-" is read so that the bound below names the value
        if not _DECIMAL.fullmatch(text):
            raise argparse.ArgumentTypeError("expected an integer (decimal digits only), got %r" % (text,))
        digits = len(text.lstrip("-").lstrip("0"))
        if digits > _MAX_DIGITS:  # int() of thousands of digits is refused, or slow (by Python version)
            raise argparse.ArgumentTypeError("out of range: %d digits" % digits)
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError("must be >= %d, got %d" % (minimum, value))
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError("must be <= %d, got %d" % (maximum, value))
        return value

    return parse


def _millis_at_least(minimum: int) -> Callable[[str], int]:
    """:func:`_int_at_least` for a duration in milliseconds (at most the client's bound)."""
    return _int_at_least(minimum, MAX_DURATION_MILLIS)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: the options, then ``COMMAND`` and its arguments (parsed by
    :func:`command_parser`, so options and arguments may come in any order)."""
    ap = argparse.ArgumentParser(
        prog=PROG,
        usage="%s [options] COMMAND [arguments]" % PROG,
        description="A command line for a Queen MQ broker: push, pop, consume, and inspect queues, consumer "
        "groups and dead letters. JSON lines on stdout (--pretty: tables); errors on stderr.",
        epilog="commands:\n" + "".join("  %-9s %s\n" % kv for kv in _COMMAND_HELP.items())
        + "\n'%s COMMAND --help' tells a command's arguments." % PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(ap, False)
    ap.add_argument("--version", action="version", version="%s %s (codec: %s)" % (PROG, __version__, codec_backend),
                    help="print the version and the codec backend, then exit")
    # nargs="?": without a command, the error below names it (argparse's would also ask for "arguments")
    ap.add_argument("command", nargs="?", choices=list(_COMMAND_HELP), metavar="COMMAND", help="one of the commands below")
    ap.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return ap


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command (``push``, ``pop``...; not ``broker``)."""
    p = argparse.ArgumentParser(prog="%s %s" % (PROG, name), description=_COMMAND_HELP[name],
                                epilog=_COMMAND_EPILOG.get(name))
    _common(p, True)
    if name == "push":
        p.add_argument("queue")
        p.add_argument("message", nargs="?", default="-", metavar="JSON | -", help="a JSON payload, or - for stdin")
        p.add_argument("--partition", metavar="P", help="partition (default: the broker's Default)")
        p.add_argument("--items", action="store_true",
                       help='each JSON value is a whole push item {"data": ..., "transactionId": ..., "traceId": ...}')
        p.add_argument("--batch-size", type=_int_at_least(1), default=DEFAULT_PUSH_BATCH, metavar="N",
                       help="items per push request when reading stdin (default %d)" % DEFAULT_PUSH_BATCH)
        p.add_argument("--linger-millis", type=_millis_at_least(0), default=DEFAULT_LINGER_MILLIS, metavar="MS",
                       help="send a partial batch once its first line waited MS ms (default %d; 0: at once)"
                       % DEFAULT_LINGER_MILLIS)
        p.add_argument("--nan-as-null", action="store_true",
                       help="send NaN / Infinity / -Infinity in a payload as null (the client's nan_as_null); "
                       "default: such a payload is refused and nothing of its batch is sent")
    elif name == "pop":
        p.add_argument("queue")
        p.add_argument("--partition", metavar="P")
        p.add_argument("--group", metavar="G", help="consumer group (default: queue mode)")
        p.add_argument("--batch", type=_int_at_least(1), default=1, metavar="N", help="at most N messages (default 1)")
        p.add_argument("--wait-millis", type=_millis_at_least(0), metavar="MS", help="long-poll up to MS ms for a message")
        p.add_argument("--ack", action="store_true", help="ack the popped messages (completed); a message written "
                       "into a pipe counts as written: with '| head -1' those head never read are acked too")
    elif name == "consume":
        p.add_argument("queue")
        p.add_argument("--group", required=True, metavar="G", help="consumer group")
        p.add_argument("--partition", metavar="P")
        p.add_argument("--limit", type=_int_at_least(1), metavar="N", help="stop after N messages")
        p.add_argument("--idle-millis", type=_millis_at_least(1), metavar="MS", help="stop after MS ms without a message")
        p.add_argument("--exec", dest="exec_cmd", metavar="CMD",
                       help="run CMD (with the shell) per message, the message JSON on its stdin: "
                       "exit status 0 acks, anything else nacks (default: print the message and ack)")
    elif name in ("queue", "dlq"):
        p.add_argument("queue")
        if name == "dlq":
            p.add_argument("--group", metavar="G")
            p.add_argument("--partition", metavar="P")
            p.add_argument("--limit", type=_int_at_least(1), default=100, metavar="N", help="at most N rows (default 100)")
    elif name == "groups":
        p.add_argument("queue", nargs="?", help="only the groups of this queue (an unknown queue is an error)")
    elif name == "seek":
        p.add_argument("group")
        p.add_argument("queue")
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--to-end", action="store_true", help="skip every current message")
        where.add_argument("--timestamp", metavar="TS", help="ISO-8601 time to read from")
        p.add_argument("--partition", metavar="P", help="with --to-end: one partition only")
    return p


# ---------------------------------------------------------------------------- output


class Output:
    """Writes results: JSON lines, or tables with ``pretty``. Thread-safe."""

    def __init__(self, stream: IO[str], pretty: bool) -> None:
        self.stream = stream
        self.pretty = pretty
        self._lock = threading.Lock()

    def line(self, value: Any) -> None:
        """One value: a JSON line (also in pretty mode: used for streams of messages)."""
        text = json.dumps(value, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

    def rows(self, rows: Sequence[Mapping[str, Any]], columns: Optional[Sequence[str]] = None) -> None:
        """A list of objects: one JSON line each, or one table (of ``columns``: dotted names
        of nested keys; default every key)."""
        if not self.pretty:
            for r in rows:
                self.line(r)
            return
        flat = [_flatten(r) for r in rows]
        cols: List[str] = list(columns or ())
        if not cols:
            for r in flat:
                cols.extend(k for k in r if k not in cols)
        if not flat:
            self._write("(none)\n")
            return
        cells = [[_cell(r.get(c)) for c in cols] for r in flat]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
        out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
        out.extend("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)
        self._write("\n".join(out) + "\n")

    def obj(self, value: Mapping[str, Any]) -> None:
        """One object: a JSON line, or ``key  value`` lines."""
        if not self.pretty:
            self.line(value)
            return
        flat = _flatten(value)
        width = max((len(k) for k in flat), default=0)
        self._write("".join("%s  %s\n" % (k.ljust(width), _cell(v, 200)) for k, v in flat.items()))

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()


def _flatten(value: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in value.items():
        key = "%s%s" % (prefix, _printable(str(k)))  # payload keys become column names
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


#: Characters a table cell or header shows escaped: C0 / C1 controls and DEL (a CR in a
#: message rewrote its table row, an ESC started a terminal escape sequence), line separators
#: and bidirectional overrides (they reorder what a terminal shows).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\t": "\\t", "\r": "\\r"}


def _printable(text: str) -> str:
    """``text`` for a table: a newline as a space, other unprintable characters escaped
    (``\\r``, ``\\t``, ``\\x1b``, ``\\u202e``), as the JSON lines escape them."""
    return _UNPRINTABLE.sub(
        lambda m: _ESCAPES.get(m.group(), ("\\x%02x" if ord(m.group()) < 0x100 else "\\u%04x") % ord(m.group())),
        text.replace("\n", " "),
    )


def _cell(v: Any, width: int = _CELL_WIDTH) -> str:
    text = "" if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    text = _printable(text)
    return text if len(text) <= width else text[: width - 1] + "\u2026"


# ---------------------------------------------------------------------------- commands


def _client(ns: argparse.Namespace) -> Queen:
    urls = [u for u in (ns.url or os.environ.get("QUEEN_URL", "")).split(",") if u.strip()]
    if not urls:
        raise CliError("no broker URL: pass --url or set QUEEN_URL")
    try:
        return Queen(
            urls=urls,
            bearer_token=os.environ.get("QUEEN_BEARER_TOKEN") or None,
            timeout_millis=ns.timeout_millis,
            ca_certs=ns.ca_certs,
            cert_file=ns.cert_file,
            key_file=ns.key_file,
            nan_as_null=getattr(ns, "nan_as_null", False),  # a push option only
        )
    except InvalidInputError as exc:
        text = str(exc)
        if not text.endswith("use bearer_token="):
            raise
        # the client's hint names its argument; here the token comes from the environment only
        raise InvalidInputError(text[: -len("bearer_token=")] + "QUEEN_BEARER_TOKEN for a token") from exc


def _queue(q: Queen, ns: argparse.Namespace) -> Any:
    b = q.queue(ns.queue)
    # `is not None`: an empty --partition "$P" is refused by the client, not read as Default
    return b.partition(ns.partition) if getattr(ns, "partition", None) is not None else b


def cmd_push(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    # --batch-size >= 1: checked by its argparse type (a usage error naming the flag)
    target = _queue(q, ns)

    def item(n: Optional[int], value: Any) -> Dict[str, Any]:
        """The push item of ``value``, read from stdin line ``n`` (None: the argument)."""
        if not ns.items:
            return {"data": value}
        if not isinstance(value, dict):
            where = "the message" if n is None else "stdin line %d" % n
            raise CliError("%s: with --items each value must be a JSON object" % where)
        return value

    def push(items: Any) -> Any:
        try:
            return target.push(items)
        except InvalidInputError as exc:
            if "nan_as_null" not in str(exc):
                raise
            # the client's hint names its option; here the option is a flag
            raise InvalidInputError("%s; with queen-sync: push --nan-as-null" % exc) from exc

    if ns.message != "-":
        try:
            value = _loads(ns.message)
        except ValueError as exc:
            raise CliError("the message is not JSON: %s" % exc) from None
        out.rows(push(item(None, value)))
        return 0
    progress = sys.stderr.isatty()
    counted = [0]  # pushed so far (for the progress line)

    def send(batch: List[Dict[str, Any]], lines: List[int], pushed: int) -> None:
        try:
            results = push(batch)
        except QueenError as exc:
            # the client numbers the items within the batch ("item 0"): say which lines they are
            text = "%s (the batch of stdin lines %d-%d; %d message(s) were pushed before it)" % (
                exc, lines[0], lines[-1], pushed)
            if isinstance(exc, InvalidInputError):  # still bad input: reported as such
                raise InvalidInputError(text) from exc
            raise CliError(text) from exc
        counted[0] = pushed + len(batch)
        out.rows(results)
        if progress:
            sys.stderr.write("\rpushed %d message(s)" % counted[0])
            sys.stderr.flush()

    def parse(n: int, text: str) -> Dict[str, Any]:
        try:
            value = _loads(text)
        except ValueError as exc:
            raise CliError("stdin line %d is not JSON: %s" % (n, exc)) from None
        return item(n, value)

    try:
        stopped = push_lines(StdinLines(ns.batch_size), parse, send, ns.batch_size, ns.linger_millis)
    except (CliError, QueenError) as exc:  # a bad line, or stdin unreadable: say what was pushed before it
        if counted[0] and "pushed before" not in str(exc):
            raise type(exc)("%s (%d message(s) were pushed before it)" % (exc, counted[0])) from None
        raise
    finally:
        if progress and counted[0]:
            sys.stderr.write("\n")
    if stopped is not None:  # a first SIGINT / SIGTERM: what was read was pushed; exit status 130 / 143
        raise (KeyboardInterrupt if stopped.signum == signal.SIGINT else _Terminated)(stopped.detail)
    return 0


def cmd_pop(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    b = _queue(q, ns).batch(ns.batch)
    if ns.group is not None:  # an empty --group is refused, not taken as queue mode
        b = b.group(ns.group)
    if ns.wait_millis is not None:
        b = b.wait(True).timeout_millis(ns.wait_millis)
    msgs = b.pop()  # a SIGTERM (or Ctrl-C) in a long poll ends it here: nothing was printed
    written = 0
    try:
        for m in msgs:
            out.line(m)  # flushed: a closed stdout fails here, not later
            written += 1
    except (BrokenPipeError, KeyboardInterrupt, _Terminated) as exc:
        rest = msgs[written:]
        if ns.ack and written:
            q.ack(msgs[:written], True)
        if rest:
            q.ack(rest, "retry")  # never shown: redeliver them without counting a retry
        detail = "%d of %d message(s) written%s, %d released" % (
            written, len(msgs), " and acked" if ns.ack else "", len(rest))
        if isinstance(exc, BrokenPipeError):
            raise StdoutClosed(detail) from None
        raise type(exc)(detail) from None
    if ns.ack and msgs:
        q.ack(msgs, True)
    return 0


class _StopSignals(HandlerScope):
    """SIGINT / SIGTERM while ``consume`` runs (main thread only; a context manager): the
    first one sets ``stop`` (a graceful stop: what was popped is released); a second SIGINT
    calls ``abort`` (which ends the running ``--exec`` command: the consumer waits for its
    handler) and raises KeyboardInterrupt (the drain is aborted, exit status 130), a second
    SIGTERM ends the process as SIGTERM does.

    Not the consumer's ``handle_signals``: that one leaves a signal arriving once the consumer
    is stopping to the previous handler, and the Ctrl-C that killed an ``--exec`` command
    (which stops the consumer at once) often reaches this process just after it, which then
    died of it (SIGTERM) or aborted (SIGINT). Here the signal that killed the command is the
    first one.
    """

    def __init__(self, stop: threading.Event, why: Dict[str, str], abort: Callable[[], None]) -> None:
        super().__init__((signal.SIGINT, signal.SIGTERM))
        self._stop = stop
        self._why = why
        self._abort = abort
        self._seen = 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._seen += 1
        if self._seen == 1:  # no lock here: only set the event (and a key, once)
            self._why.setdefault("signal", "signal")
            self._stop.set()
            return
        if signum == signal.SIGINT:
            self._abort()
            raise KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def cmd_consume(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    # auto_ack off: the handler acks or nacks itself, so a closed stdout can release the
    # message instead (an exception would be a nack, retried into the dead-letter queue)
    b = _queue(q, ns).group(ns.group).each().auto_ack(False)
    if ns.limit is not None:
        b = b.limit(ns.limit)
    if ns.idle_millis is not None:
        b = b.idle_millis(ns.idle_millis)
    command = ns.exec_cmd
    stop = threading.Event()  # the consumer's stop_event: stdout closed, a command interrupted, a signal
    why: Dict[str, str] = {}  # what set ``stop`` ("stdout closed", "command interrupted", "signal"), in order
    counts = {"acked": 0, "nacked": 0, "released": 0, "ack failures": 0}
    running: "set[subprocess.Popen[bytes]]" = set()  # the --exec commands running (ended by a second SIGINT)

    def settle(msg: Any, status: Union[bool, str], count: str, error: Optional[str] = None) -> None:
        try:
            msg.ack(status, error=error)
            counts[count] += 1
        except QueenError as exc:  # not fatal: the broker redelivers the message once its lease expires
            log.warning("%s of message %s failed: %s", count, msg.get("transactionId"), exc)
            counts["ack failures"] += 1

    def halt(reason: str) -> None:
        why.setdefault(reason, reason)
        stop.set()

    def handler(msg: Any) -> None:
        if stop.is_set():  # stopping: what the stop drains is released, not shown or run
            settle(msg, "retry", "released")
            return
        if command is None:
            try:
                out.line(msg)
            except BrokenPipeError:
                halt("stdout closed")
                settle(msg, "retry", "released")
                return
            settle(msg, True, "acked")
            return
        body = (json.dumps(msg, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        sys.stdout.flush()
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE)
        running.add(proc)
        try:
            proc.communicate(body)
        finally:
            running.discard(proc)
        rc = proc.returncode
        if rc in _INTERRUPTED:
            # killed by SIGINT / SIGTERM: the Ctrl-C (or the stop of a service) that reaches
            # this process reaches the command too, being in its process group. That is no
            # verdict on the message: released (no retry counted), and consume stops rather
            # than run the command again on what it drains.
            settle(msg, "retry", "released")
            halt("command interrupted")
        elif rc != 0:
            settle(msg, False, "nacked", "command exited with status %d" % rc)
        else:
            settle(msg, True, "acked")

    def abort() -> None:
        """A second SIGINT: end the running commands (a command that outlived the first
        one would hold the abort until it ends); their messages are released."""
        for proc in list(running):
            try:
                os.kill(proc.pid, signal.SIGTERM)  # not proc.terminate(): no lock in a signal handler
            except OSError:  # already ended
                pass

    with _StopSignals(stop, why, abort):
        result = b.consume(handler, stop_event=stop)
    closed = "stdout closed" in why
    summary = "consumed %d message(s): %d acked, %d nacked, %d released%s (%s)" % (
        result.handled, counts["acked"], counts["nacked"], counts["released"],
        ", %d ack failure(s)" % counts["ack failures"] if counts["ack failures"] else "",
        ", ".join(why) if why else result.reason)  # the stop_event's reason is "stopped"
    if closed:
        raise StdoutClosed(summary)
    sys.stderr.write(_printable(summary) + "\n")
    return 1 if counts["nacked"] or counts["ack failures"] else 0


def cmd_queues(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    out.rows(q.admin.list_queues().get("queues") or [])
    return 0


def _queue_not_found(name: str) -> CliError:
    """The error of the commands naming a queue the broker does not have (exit status 1)."""
    return CliError("queue %r not found" % name)


def _require_queue(q: Queen, name: str) -> None:
    """:func:`_queue_not_found` unless the broker lists queue ``name`` (one request)."""
    if not any(e.get("name") == name for e in q.admin.list_queues().get("queues") or []):
        raise _queue_not_found(name)


def cmd_queue(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    try:
        detail = dict(q.admin.get_queue_detail(ns.queue))
    except BrokerError as exc:
        if "not found" not in str(exc).lower():
            raise
        raise _queue_not_found(ns.queue) from None
    listed = [e for e in q.admin.list_queues().get("queues") or [] if e.get("name") == ns.queue]
    # depth: the message counts `queues` shows ({total, pending, processing})
    detail["depth"] = listed[0].get("messages") if listed else None
    if not out.pretty:
        out.line(detail)
        return 0
    out.obj({"queue": detail.get("queue") or {}, "depth": detail["depth"] or {}})
    out.stream.write("\n")
    out.rows(detail.get("partitions") or [], columns=_PARTITION_COLUMNS)
    return 0


def cmd_groups(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    groups = q.admin.list_consumer_groups()
    if ns.queue is not None:
        groups = [g for g in groups if g.get("queueName") == ns.queue]
        # no group: an unknown queue is an error, as for `queue` (it printed nothing, exit status 0)
        if not groups:
            _require_queue(q, ns.queue)
    out.rows(groups)
    return 0


def cmd_seek(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    _require_queue(q, ns.queue)  # the broker "seeks" an unknown queue: success, partitionsUpdated 0
    if ns.partition is not None:  # with --to-end only (a usage error otherwise, see main)
        out.obj(q.admin.seek_partition_to_end(ns.group, ns.queue, ns.partition))
    else:
        out.obj(q.admin.seek_consumer_group(ns.group, ns.queue, to_end=ns.to_end, timestamp=ns.timestamp))
    return 0


def cmd_dlq(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    b = q.queue(ns.queue).dlq(ns.group).limit(ns.limit)
    if ns.partition is not None:
        b = b.partition(ns.partition)
    rows = b.get()
    if not rows:  # no row: an unknown queue is an error, as for `queue` (it printed nothing, exit status 0)
        _require_queue(q, ns.queue)
    out.rows(rows)
    return 0


def cmd_health(q: Queen, ns: argparse.Namespace, out: Output) -> int:
    h = q.admin.health()
    out.obj(h)
    return 0 if h.get("status") == "healthy" else 1


COMMANDS: Dict[str, Callable[[Queen, argparse.Namespace, Output], int]] = {
    "push": cmd_push,
    "pop": cmd_pop,
    "consume": cmd_consume,
    "queues": cmd_queues,
    "queue": cmd_queue,
    "groups": cmd_groups,
    "seek": cmd_seek,
    "dlq": cmd_dlq,
    "health": cmd_health,
}


# ---------------------------------------------------------------------------- main


class _LogLines(logging.Formatter):
    """Log lines on stderr: the message with its unprintable characters escaped as the error
    lines are (:func:`_printable`: a broker's text in a warning reached the terminal raw);
    without tracebacks unless ``debug``."""

    def __init__(self, fmt: str, debug: bool) -> None:
        super().__init__(fmt)
        self._debug = debug

    def format(self, record: logging.LogRecord) -> str:
        record = copy.copy(record)
        record.msg = _printable(record.getMessage())
        record.args = None
        if not self._debug:
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
        return super().format(record)


def _setup_logging(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogLines("%s: %%(levelname)s %%(name)s: %%(message)s" % PROG, debug))
    root = logging.getLogger("queen_sync")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)


def _stdout_to_devnull() -> None:
    """Point stdout's file descriptor at devnull, so the interpreter's flush at exit does not
    raise BrokenPipeError a second time (the advice of Python's signal docs on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


class _TerminateOnSigterm(HandlerScope):
    """SIGTERM raises :class:`_Terminated` in the main thread while a command other than
    ``consume`` (which handles it itself) runs: the process stops with a line on stderr and
    exit status :data:`EXIT_TERMINATED`, where SIGTERM's default action killed it silently
    (in a ``pop --wait-millis`` long poll too). A second SIGTERM ends it as SIGTERM does.
    A context manager; main thread only."""

    def __init__(self) -> None:
        super().__init__((signal.SIGTERM,))

    def _on_signal(self, signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_DFL)  # the cleanup (releases, close) may be cut short by a second one
        raise _Terminated()


def _error_line(kind: str, exc: Optional[BaseException]) -> None:
    """``queen-sync: KIND[: TEXT]`` on stderr, one line: the text of ``exc`` (a broker's error
    text, a queue name...) with its unprintable characters escaped, as ``--pretty`` shows
    them (an ESC, a CR or a newline in it reached the terminal raw)."""
    text = "" if exc is None else str(exc)
    sys.stderr.write("%s: %s%s\n" % (PROG, kind, ": " + _printable(text) if text else ""))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``queen-sync`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    ap = build_parser()
    ns = ap.parse_args(argv)
    if ns.command is None:
        ap.error("a COMMAND is needed, one of: %s ('%s --help' tells more)" % (", ".join(_COMMAND_HELP), PROG))
    if ns.command == "broker":  # the embedded broker's own parser (queen_sync.testing) reads the rest
        return broker_main(ns.arguments, prog="%s broker" % PROG)
    parser = command_parser(ns.command)
    ns = parser.parse_intermixed_args(ns.arguments, namespace=ns)
    if ns.pretty and ns.command in _JSON_ONLY:
        parser.error("--pretty does not apply to %s: it prints messages as JSON lines" % ns.command)
    if ns.command == "seek" and ns.partition is not None and not ns.to_end:
        parser.error("--partition works with --to-end only")  # a usage error (2), like --to-end with --timestamp
    _setup_logging(ns.debug)
    out = Output(sys.stdout, ns.pretty)
    try:
        with _TerminateOnSigterm():
            q = _client(ns)
            try:
                return COMMANDS[ns.command](q, ns, out)
            finally:
                q.close()
    except KeyboardInterrupt as exc:
        _error_line("interrupted", exc)
        return 130
    except _Terminated as exc:
        _error_line("terminated (SIGTERM)", exc)
        return EXIT_TERMINATED
    except (BrokenPipeError, StdoutClosed) as exc:  # e.g. piped into `head`
        _stdout_to_devnull()
        try:
            _error_line("stdout closed (broken pipe)", exc if isinstance(exc, StdoutClosed) else None)
        except OSError:
            pass
        return EXIT_BROKEN_PIPE
    except (QueenError, CliError) as exc:
        if ns.debug:
            raise
        _error_line("invalid input" if isinstance(exc, InvalidInputError) else "error", exc)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
