"""``queen-sync push`` from a stdin that stays open (``tail -f app.log | queen-sync push logs``):
the linger time of a partial batch, and the first SIGINT / SIGTERM pushing what was read.
A real subprocess with a pipe for stdin, real signals; the tests wait on the broker or on the
command's ``--debug`` lines, never on a sleep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, List

import pytest

from queen_sync import Queen

from _helpers import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture
def cli_env(broker_url: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QUEEN_URL", "QUEEN_BEARER_TOKEN")}
    env["QUEEN_URL"] = broker_url
    return env


class Push:
    """``queen-sync --debug push ARGS`` with stdin a pipe left open; its stderr lines are
    collected by a thread (``err``), its stdout read at the end."""

    def __init__(self, env: Dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "queen_sync", "--debug", "push", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.out: List[str] = []
        self.err: List[str] = []
        self._readers = [threading.Thread(target=self._read, args=(s, to), daemon=True)
                         for s, to in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream: Any, into: List[str]) -> None:
        for line in stream:
            into.append(line)

    def write(self, *values: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(json.dumps(v) + "\n" for v in values))
        self.proc.stdin.flush()

    def raw(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def read_lines(self, n: int) -> bool:
        """Wait until the command logged reading stdin line ``n``."""
        return wait_until(lambda: any(line.rstrip().endswith("read stdin line %d" % n) for line in self.err))

    def finish(self, sig: int) -> "tuple[int, List[Any], List[str]]":
        """Send ``sig`` (stdin left open: closing it would be an end of stdin racing the
        signal); the exit status, the JSON lines of stdout, the stderr lines that are not
        debug log lines."""
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for t in self._readers:
                t.join(10)
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        return code, [json.loads(x) for x in self.out if x.strip()], [x for x in self.err if " DEBUG " not in x]


def _queued(client: Queen, qname: str) -> List[Any]:
    """Every message of the queue, in order (queue mode: they are leased by this pop)."""
    return [m["data"] for m in client.queue(qname).batch(100).pop()]


@pytest.mark.parametrize("sig, status, kind", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_partial_batch_is_sent_after_the_linger_and_a_signal_pushes_what_was_read(
        cli_env: Dict[str, str], qname: str, client: Queen, sig: int, status: int, kind: str) -> None:
    # it held the lines back until 100 had come (or stdin ended), and a signal dropped them
    push = Push(cli_env, qname, "--linger-millis", "50")
    seen: List[Any] = []

    def arrived(n: int) -> bool:  # a consumer group sees each message once (acked: the next pop sees more)
        got = client.queue(qname).group("probe").batch(10).pop()
        if got:
            client.ack(got, True)
        seen.extend(m["data"] for m in got)
        return len(seen) >= n

    push.write({"i": 0}, {"i": 1}, {"i": 2})
    assert wait_until(lambda: arrived(3)), (seen, push.err)  # stdin still open: sent within the linger
    push.write({"i": 3})
    assert wait_until(lambda: arrived(4)), (seen, push.err)
    code, results, err = push.finish(sig)
    assert code == status, err
    assert err == ["queen-sync: %s: stopped reading stdin; 4 message(s) were pushed "
                   "(0 of them after the signal: read, not yet sent)\n" % kind], err
    assert [r["status"] for r in results] == ["queued"] * 4
    assert seen == [{"i": i} for i in range(4)]
    assert _queued(client, qname) == [{"i": i} for i in range(4)]  # each once, in order


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_first_signal_pushes_the_lines_read_and_not_sent(cli_env: Dict[str, str], qname: str, client: Queen,
                                                         sig: int, status: int) -> None:
    # a linger far away: nothing is sent before the signal, which pushes the 5 lines read
    push = Push(cli_env, qname, "--linger-millis", "600000", "--batch-size", "3")
    push.write({"i": 0}, {"i": 1}, {"i": 2})  # a full batch: sent at once
    assert wait_until(lambda: client.queue(qname).group("probe").batch(10).pop() != []), push.err
    push.write({"i": 3})
    push.raw("\r\n")  # a blank line (CRLF), skipped
    push.write({"i": 4})
    assert push.read_lines(6), push.err  # lines 4 and 6: read, not sent (the linger is far away)
    code, results, err = push.finish(sig)
    assert code == status, err
    assert err[-1].endswith(": stopped reading stdin; 5 message(s) were pushed "
                            "(2 of them after the signal: read, not yet sent)\n"), err
    assert len(results) == 5
    assert _queued(client, qname) == [{"i": i} for i in range(5)]  # each once, in order


def test_a_failed_last_push_says_how_many_were_not_sent(cli_env: Dict[str, str]) -> None:
    # nothing listens on port 1: the push after the signal fails (after the client's retries)
    env = dict(cli_env, QUEEN_URL="http://127.0.0.1:1")
    push = Push(env, "q", "--linger-millis", "600000", "--timeout-millis", "1000")
    push.write({"i": 0}, {"i": 1}, {"i": 2})
    assert push.read_lines(3), push.err
    code, results, err = push.finish(signal.SIGINT)
    assert code == 130 and results == [], err
    assert err[-1].startswith("queen-sync: interrupted: stopped reading stdin; 0 message(s) were pushed, "
                              "3 read were not sent: "), err
    assert "(the batch of stdin lines 1-3; 0 message(s) were pushed before it)" in err[-1], err


def test_linger_zero_sends_each_line_at_once(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    push = Push(cli_env, qname, "--linger-millis", "0")
    for i in range(3):
        push.write({"i": i})
        assert wait_until(lambda: len(_push_requests(push)) > i), push.err  # its push result, line by line
    push.proc.stdin.close()  # type: ignore[union-attr]
    assert push.proc.wait(30) == 0, push.err
    assert _queued(client, qname) == [{"i": i} for i in range(3)]


def _push_requests(push: Push) -> List[str]:
    """The push requests the command logged (--debug logs each request as it is sent)."""
    return [line for line in push.err if "/api/v1/push" in line]


def test_stdin_not_in_its_encoding_is_invalid_input_after_the_lines_before(cli_env: Dict[str, str], qname: str,
                                                                           client: Queen) -> None:
    r = subprocess.run([sys.executable, "-m", "queen_sync", "push", qname, "--batch-size", "1"],
                       input=b'{"i": 0}\n\xff\xfe\n', capture_output=True, env=dict(cli_env, PYTHONIOENCODING="utf-8"),
                       timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.decode() == ("queen-sync: invalid input: stdin line 2 is not utf-8 text: invalid start byte "
                                 "(1 message(s) were pushed before it)\n")
    assert _queued(client, qname) == [{"i": 0}]
