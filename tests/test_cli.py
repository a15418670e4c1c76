"""The ``queen-sync`` command line, run in a subprocess (``python -m queen_sync``, and the
console script once) against the broker under test."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from queen_sync import Queen
from queen_sync.pytest_plugin import QueenBroker

from _helpers import wait_until


class Run:
    def __init__(self, proc: "subprocess.CompletedProcess[str]") -> None:
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    @property
    def lines(self) -> List[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


@pytest.fixture
def cli_env(broker_url: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QUEEN_URL", "QUEEN_BEARER_TOKEN")}
    env["QUEEN_URL"] = broker_url
    return env


def cli(env: Dict[str, str], *args: str, stdin: str = "", timeout: float = 60) -> Run:
    proc = subprocess.run(
        [sys.executable, "-m", "queen_sync", *args], input=stdin, capture_output=True, text=True, env=env,
        timeout=timeout,
    )
    return Run(proc)


def test_push_argument_then_pop_and_ack(cli_env: Dict[str, str], qname: str) -> None:
    r = cli(cli_env, "push", qname, "--partition", "p1", '{"n": 1, "s": "\u00e9"}')
    assert r.code == 0, r.err
    (res,) = r.lines
    assert res["status"] == "queued" and res["transaction_id"]
    r = cli(cli_env, "pop", qname, "--group", "g", "--batch", "5", "--wait-millis", "2000", "--ack")
    assert r.code == 0, r.err
    (msg,) = r.lines
    assert msg["data"] == {"n": 1, "s": "\u00e9"} and msg["partition"] == "p1"
    assert msg["transactionId"] == res["transaction_id"]
    r = cli(cli_env, "pop", qname, "--group", "g")  # acked: nothing left for the group
    assert r.code == 0 and r.lines == []


def test_push_json_lines_from_stdin_in_batches(cli_env: Dict[str, str], qname: str, queen_broker: QueenBroker,
                                               client: Queen) -> None:
    pushes = queen_broker.embedded.request_count("POST", "/api/v1/push") if queen_broker.embedded else None
    data = "".join('{"i": %d}\n' % i for i in range(250)) + "\n"  # a blank line is skipped
    # a linger far away: the three requests are the batch size's (and the end of stdin's) only
    r = cli(cli_env, "push", qname, "--partition", "p", "--batch-size", "100", "--linger-millis", "600000", stdin=data)
    assert r.code == 0, r.err
    assert [x["status"] for x in r.lines] == ["queued"] * 250
    assert r.err == ""  # no progress line: stderr is not a terminal
    if queen_broker.embedded is not None:
        assert queen_broker.embedded.request_count("POST", "/api/v1/push") - pushes == 3
    got = client.queue(qname).partition("p").batch(300).pop()
    assert [m["data"]["i"] for m in got] == list(range(250))


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_push_progress_line_on_a_terminal(cli_env: Dict[str, str], qname: str) -> None:
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "queen_sync", "push", qname, "--batch-size", "2"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=slave, env=cli_env,
    )
    os.close(slave)
    chunks: List[bytes] = []

    def drain() -> None:
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not b:
                return
            chunks.append(b)

    t = threading.Thread(target=drain)
    t.start()
    out, _ = proc.communicate(b'{"a": 1}\n{"a": 2}\n{"a": 3}\n', timeout=60)
    t.join(10)
    os.close(master)
    assert proc.returncode == 0
    assert len(out.splitlines()) == 3
    tty = b"".join(chunks).decode()
    assert "\rpushed 2 message(s)" in tty and "\rpushed 3 message(s)" in tty


def test_push_items_mode(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    item = '{"data": {"x": 1}, "transactionId": "tx-cli-1"}'
    assert cli(cli_env, "push", qname, "--items", item).lines[0]["status"] == "queued"
    assert cli(cli_env, "push", qname, "--items", item).lines[0]["status"] == "duplicate"
    r = cli(cli_env, "push", qname, "--items", "[1]")
    assert r.code == 1 and "must be a JSON object" in r.err
    # lines are named by their stdin line (from 1), the client's item index by the batch's lines,
    # and bad input is reported as such whether it is one line or a batch of them
    r = cli(cli_env, "push", qname, "--items", stdin='{"data": 1}\n[1]\n')
    assert r.code == 1 and r.err.startswith("queen-sync: error: stdin line 2: with --items"), r.err
    r = cli(cli_env, "push", qname, "--items", stdin='{"data": 1}\n{"data": 2, "transactionID": "t"}\n')
    assert r.code == 1 and r.err.startswith("queen-sync: invalid input: item 1: unknown key 'transactionID'"), r.err
    assert "(the batch of stdin lines 1-2; 0 message(s) were pushed before it)" in r.err


def test_push_nan_is_refused_unless_nan_as_null(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    r = cli(cli_env, "push", qname, '{"x": NaN, "y": [1, Infinity]}')
    assert r.code == 1 and r.err.startswith("queen-sync: invalid input:") and "Traceback" not in r.err
    assert "at $.items[0].payload.x" in r.err and "push --nan-as-null" in r.err
    r = cli(cli_env, "push", qname, stdin='{"ok": 1}\n{"x": -Infinity}\n')
    assert r.code == 1 and "push --nan-as-null" in r.err
    assert client.queue(qname).batch(10).pop() == []  # nothing of the refused batch was sent
    r = cli(cli_env, "push", qname, "--nan-as-null", '{"x": NaN, "y": [1, Infinity]}')
    assert r.code == 0, r.err
    r = cli(cli_env, "push", qname, "--nan-as-null", stdin='{"ok": 1}\n{"x": -Infinity}\n')
    assert r.code == 0, r.err
    got = [m["data"] for m in client.queue(qname).batch(10).pop()]
    assert got == [{"x": None, "y": [1, None]}, {"ok": 1}, {"x": None}]
    help_text = cli(cli_env, "push", "--help").out
    assert "--nan-as-null" in help_text and "as null" in help_text


def test_bad_input_is_one_line_without_traceback(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    r = cli(cli_env, "push", qname, stdin='{"ok": 1}\nnot json\n')
    assert r.code == 1
    assert r.err.startswith("queen-sync: error: stdin line 2 is not JSON") and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert client.queue(qname).batch(10).pop() == []  # the batch holding the bad line was not sent
    r = cli(cli_env, "--debug", "push", qname, "nope")
    assert r.code != 0 and "Traceback" in r.err
    r = cli(cli_env, "pop", qname, "--batch", "0")  # a usage error now, naming the flag
    assert r.code == 2 and "argument --batch: must be >= 1, got 0" in r.err and "Traceback" not in r.err
    r = cli(cli_env, "pop", qname, "--group", "bad group")  # refused by the client
    assert r.code == 1 and r.err.startswith("queen-sync: invalid input:") and "Traceback" not in r.err
    r = cli(cli_env, "consume", qname)  # --group is required
    assert r.code == 2 and "--group" in r.err


def test_connection_errors_and_missing_url(cli_env: Dict[str, str]) -> None:
    r = cli(cli_env, "--url", "http://127.0.0.1:1", "health")
    assert r.code == 1 and "cannot connect" in r.err and "Traceback" not in r.err
    # a host urllib3 cannot parse: one line, not urllib3's LocationParseError traceback
    r = cli(cli_env, "--url", "http://a b", "health")
    assert r.code == 1 and r.err.startswith("queen-sync: invalid input: invalid broker URL 'http://a b'"), r.err
    assert "Traceback" not in r.err
    env = dict(cli_env)
    del env["QUEEN_URL"]
    r = cli(env, "queues")
    assert r.code == 1 and "no broker URL" in r.err


def test_consume_exec_acks_on_zero_and_nacks_otherwise(cli_env: Dict[str, str], qname: str, client: Queen,
                                                      tmp_path: Path) -> None:
    client.queue(qname).config({"retryDelay": 0, "retryLimit": 5}).create()
    client.queue(qname).partition("p").push([{"data": {"n": 1, "ok": True}}, {"data": {"n": 2, "ok": False}},
                                             {"data": {"n": 3, "ok": True}}])
    seen = tmp_path / "seen.jsonl"
    script = ("import json, sys; m = json.load(sys.stdin); "
              "open(%r, 'a').write(json.dumps(m['data']) + '\\n'); sys.exit(0 if m['data']['ok'] else 3)" % str(seen))
    command = "%s -c %s" % (shlex.quote(sys.executable), shlex.quote(script))
    r = cli(cli_env, "consume", qname, "--group", "workers", "--limit", "2", "--exec", command)
    assert r.code == 1, r.err  # a message was nacked: exit status 1
    assert r.out == ""  # the messages went to the command, not to stdout
    assert "2 message(s): 1 acked, 1 nacked" in r.err
    assert [json.loads(x)["n"] for x in seen.read_text().splitlines()] == [1, 2]
    # the nacked message comes back first, then the one after it
    r = cli(cli_env, "consume", qname, "--group", "workers", "--limit", "2", "--idle-millis", "5000")
    assert r.code == 0, r.err
    assert [m["data"]["n"] for m in r.lines] == [2, 3]
    r = cli(cli_env, "pop", qname, "--group", "workers")
    assert r.lines == []


def test_queues_queue_groups_dlq_seek_health(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    client.queue(qname).config({"retryLimit": 0}).create()
    client.queue(qname).partition("p").push([{"data": {"n": i}} for i in range(3)])
    msgs = client.queue(qname).partition("p").group("audit").batch(1).pop()
    client.ack(msgs, "dlq", {"error": "bad row"})

    names = [x["name"] for x in cli(cli_env, "queues").lines]
    assert qname in names
    pretty = cli(cli_env, "queues", "--pretty")
    # columns in the broker's key order (a real broker sorts its keys, the embedded one does not)
    assert pretty.code == 0 and {"id", "name", "namespace"} <= set(pretty.out.splitlines()[0].split())
    assert any(qname in line for line in pretty.out.splitlines()[1:])

    def depth() -> Any:  # what `queue` shows as depth: the queue's counts in the queue list
        return [e.get("messages") for e in client.admin.list_queues()["queues"] if e["name"] == qname]

    def counted() -> bool:  # a real broker's queue counts lag a push (its stats are refreshed apart)
        client.admin.refresh_consumer_stats()
        return bool(depth() and depth()[0]["total"] == 3)

    assert wait_until(counted), depth()
    (detail,) = cli(cli_env, "queue", qname).lines
    assert detail["queue"]["name"] == qname and detail["queue"]["config"]["retryLimit"] == 0
    assert detail["depth"]["total"] == 3
    assert "p" in [p["name"] for p in detail["partitions"]]
    pretty = cli(cli_env, "queue", qname, "--pretty")
    assert "queue.config.retryLimit" in pretty.out and "depth.total" in pretty.out

    groups = cli(cli_env, "groups", qname).lines
    assert [g["name"] for g in groups] == ["audit"] and groups[0]["queueName"] == qname
    assert all(g["queueName"] == qname for g in groups)

    (row,) = cli(cli_env, "dlq", qname, "--group", "audit").lines
    assert row["data"] == {"n": 0} and row["errorMessage"] == "bad row"
    assert cli(cli_env, "dlq", qname, "--group", "nobody").lines == []

    (res,) = cli(cli_env, "seek", "audit", qname, "--to-end").lines
    assert res["success"] is True
    assert client.queue(qname).group("audit").batch(5).pop() == []
    r = cli(cli_env, "seek", "audit", qname, "--timestamp", "2020-01-01T00:00:00Z")
    assert r.code == 0, r.err
    assert [m["data"]["n"] for m in client.queue(qname).group("audit").batch(5).pop()] == [0, 1, 2]  # rewound: all again

    r = cli(cli_env, "health")
    assert r.code == 0 and r.lines[0]["status"] == "healthy"


@contextlib.contextmanager
def fake_broker(reply: Callable[[BaseHTTPRequestHandler], Tuple[int, bytes]]) -> Iterator[str]:
    """A loopback HTTP server answering every GET with ``reply(handler)`` -> ``(status, JSON
    body)``; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            status, body = reply(self)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield "http://127.0.0.1:%d" % srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def test_bearer_token_from_the_environment(cli_env: Dict[str, str]) -> None:
    seen: List[Optional[str]] = []

    def unhealthy(h: BaseHTTPRequestHandler) -> Tuple[int, bytes]:
        seen.append(h.headers.get("Authorization"))
        return 503, b'{"status": "unhealthy", "database": "disconnected"}'

    with fake_broker(unhealthy) as url:
        r = cli(dict(cli_env, QUEEN_URL=url, QUEEN_BEARER_TOKEN="s3cret"), "health")
    assert seen and set(seen) == {"Bearer s3cret"}
    assert r.code == 1 and r.lines[0]["status"] == "unhealthy"  # unhealthy: reported, exit status 1
    assert "s3cret" not in r.out + r.err


def test_broker_subcommand_runs_the_embedded_broker(cli_env: Dict[str, str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "queen_sync", "broker", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in first, first + proc.stderr.read() if proc.stderr else first
        url = first.split("listening on ")[1].split()[0]
        r = cli(dict(cli_env, QUEEN_URL=url), "health")
        assert r.code == 0 and r.lines[0]["status"] == "healthy"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "stopped" in out
    r = cli(cli_env, "broker", "--port", "70000")
    assert r.code == 2 and "out of range" in r.err


def test_console_script_and_help(cli_env: Dict[str, str]) -> None:
    script = Path(sys.executable).parent / "queen-sync"
    if not script.exists():
        pytest.skip("the queen-sync console script is not installed next to this interpreter")
    r = Run(subprocess.run([str(script), "--help"], capture_output=True, text=True, env=cli_env, timeout=60))
    assert r.code == 0
    for command in ("push", "pop", "consume", "queues", "queue", "groups", "seek", "dlq", "health", "broker"):
        assert command in r.out
    r = Run(subprocess.run([str(script), "health", "--pretty"], capture_output=True, text=True, env=cli_env,
                           timeout=60))
    assert r.code == 0 and any(line.split()[:2] == ["status", "healthy"] for line in r.out.splitlines())


def test_version_names_the_release_and_the_codec(cli_env: Dict[str, str]) -> None:
    import queen_sync

    r = cli(cli_env, "--version")
    assert r.code == 0
    assert r.out.strip() == "queen-sync %s (codec: %s)" % (queen_sync.__version__, queen_sync.codec_backend)




def piped_into_head(env: Dict[str, str], *args: str, timeout: float = 15) -> Run:
    """``queen-sync ARGS | head -1`` in a shell with pipefail (the exit status is the CLI's);
    the whole process group is killed when it outlives ``timeout`` seconds."""
    line = "set -o pipefail; %s -m queen_sync %s | head -1" % (
        shlex.quote(sys.executable), " ".join(shlex.quote(a) for a in args))
    # faulthandler on: a CLI that hangs is sent SIGABRT first, so that the failure shows where
    # each of its threads was (seen once in CI, never reproduced)
    proc = subprocess.Popen(["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env, PYTHONFAULTHANDLER="1"), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        pytest.fail("queen-sync %s | head -1 did not exit within %s s; its stderr:\n%s" % (" ".join(args), timeout, err))
    return Run(subprocess.CompletedProcess(line, proc.returncode, out, err))


def test_consume_into_a_closed_pipe_releases_and_exits_141(cli_env: Dict[str, str], qname: str,
                                                           client: Queen) -> None:
    client.queue(qname).config({"retryDelay": 0, "retryLimit": 1}).create()
    client.queue(qname).partition("p").push([{"data": {"n": i}} for i in range(50)])
    r = piped_into_head(cli_env, "consume", qname, "--group", "g")
    assert r.code == 141, r.err
    assert [m["data"]["n"] for m in r.lines] == [0]
    (err,) = r.err.strip().splitlines()  # one line: no traceback, no second error at exit
    assert err.startswith("queen-sync: stdout closed (broken pipe)")
    counts = re.search(r"(\d+) acked, 0 nacked, (\d+) released", err)
    assert counts, err
    acked, released = int(counts.group(1)), int(counts.group(2))
    assert acked >= 1 and released >= 1
    # nothing nacked or dead-lettered: every message not acked is there again, in order
    left = client.queue(qname).group("g").batch(100).pop()
    assert [m["data"]["n"] for m in left] == list(range(acked, 50))
    assert client.queue(qname).dlq("g").get() == []


def test_pop_ack_into_a_closed_pipe_acks_only_what_was_written(cli_env: Dict[str, str], qname: str,
                                                               client: Queen) -> None:
    client.queue(qname).config({"retryLimit": 1}).create()
    client.queue(qname).partition("p").push([{"data": {"n": i}} for i in range(2000)])
    r = piped_into_head(cli_env, "pop", qname, "--group", "g", "--batch", "2000", "--ack")
    assert r.code == 141, r.err
    assert [m["data"]["n"] for m in r.lines] == [0]
    (err,) = r.err.strip().splitlines()
    counts = re.search(r"(\d+) of 2000 message\(s\) written and acked, (\d+) released", err)
    assert counts, err
    written, released = int(counts.group(1)), int(counts.group(2))
    assert written + released == 2000 and released >= 1
    left = client.queue(qname).group("g").batch(2000).pop()
    assert [m["data"]["n"] for m in left] == list(range(written, 2000))
    assert client.queue(qname).dlq("g").get() == []


def test_pretty_is_refused_by_pop_and_consume(cli_env: Dict[str, str], qname: str) -> None:
    for args in (("pop", qname, "--pretty"), ("--pretty", "consume", qname, "--group", "g")):
        r = cli(cli_env, *args)
        assert r.code == 2 and "--pretty does not apply to" in r.err and r.out == ""
    r = cli(cli_env, "consume", "--help")
    assert r.code == 0 and "Exit status 1 when any message was nacked" in " ".join(r.out.split())


def test_broker_help_names_the_command(cli_env: Dict[str, str]) -> None:
    r = cli(cli_env, "broker", "--help")
    assert r.code == 0 and r.out.startswith("usage: queen-sync broker ")


def test_unknown_queue_error_names_the_queue(cli_env: Dict[str, str], qname: str) -> None:
    r = cli(cli_env, "queue", "nope-%s" % qname)
    assert r.code == 1 and r.err == "queen-sync: error: queue 'nope-%s' not found\n" % qname


def test_groups_of_an_unknown_queue_is_not_found(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    # it printed nothing with exit status 0, as for a queue without groups; now as `queue` does
    for name in ("nope-%s" % qname, ""):
        r = cli(cli_env, "groups", name)
        assert r.code == 1 and r.out == "" and r.err == "queen-sync: error: queue %r not found\n" % name, r.err
    client.queue(qname).create()  # a queue without consumer groups: none, and no error
    r = cli(cli_env, "groups", qname)
    assert r.code == 0 and r.out == "", r.err
    r = cli(cli_env, "groups", qname, "--pretty")
    assert r.code == 0 and r.out == "(none)\n", r.err


def test_usage_errors_name_the_flag_and_the_missing_command(cli_env: Dict[str, str]) -> None:
    r = cli(cli_env)  # argparse said "the following arguments are required: COMMAND, arguments"
    assert r.code == 2 and "a COMMAND is needed, one of: push, pop" in r.err and "arguments" not in r.err.splitlines()[-1]
    # the client's check named its own argument ("timeout_millis must be an int >= 0")
    r = cli(cli_env, "pop", "q", "--wait-millis", "-1")
    assert r.code == 2 and "argument --wait-millis: must be >= 0, got -1" in r.err, r.err
    r = cli(cli_env, "consume", "q", "--group", "g", "--limit", "0")
    assert r.code == 2 and "argument --limit: must be >= 1, got 0" in r.err, r.err
    r = cli(cli_env, "pop", "q", "--wait-millis", "99999999999999999999")  # the upper bound too
    assert r.code == 2 and "argument --wait-millis: must be <= 31536000000" in r.err, r.err
    r = cli(cli_env, "--timeout-millis", "soon", "health")
    assert r.code == 2 and "argument --timeout-millis: expected an integer (decimal digits only), got 'soon'" in r.err, r.err


@pytest.mark.parametrize("text", ["1_000", "+5", " 5", "5 ", "\u0665", "0x10", "1e3", "5.0"])
def test_integer_flags_take_plain_decimal_digits_only(cli_env: Dict[str, str], qname: str, client: Queen,
                                                      text: str) -> None:
    # int() took "1_000" (as 1000), spaces, a plus sign and other scripts' digits
    for flag, args in (("--batch", ("pop", qname)), ("--wait-millis", ("pop", qname)),
                       ("--timeout-millis", ("health",)), ("--batch-size", ("push", qname, '{"a": 1}'))):
        r = cli(cli_env, *args, flag, text)
        assert r.code == 2 and r.out == "", r.err
        assert r.err.splitlines()[-1].endswith(
            "error: argument %s: expected an integer (decimal digits only), got %r" % (flag, text)), r.err
    assert client.queue(qname).batch(10).pop() == []  # nothing was pushed


def test_integer_flags_take_leading_zeros_and_name_the_bound_of_a_negative(cli_env: Dict[str, str],
                                                                           qname: str) -> None:
    r = cli(cli_env, "pop", qname, "--batch", "007", "--wait-millis", "0010")
    assert r.code == 0 and r.lines == [], r.err
    r = cli(cli_env, "pop", qname, "--batch", "-2")
    assert r.code == 2 and r.err.splitlines()[-1].endswith("argument --batch: must be >= 1, got -2"), r.err
    r = cli(cli_env, "pop", qname, "--wait-millis", "9" * 5000)  # more digits than int() reads
    assert r.code == 2 and r.err.splitlines()[-1].endswith("argument --wait-millis: out of range: 5000 digits"), r.err


def test_push_items_argument_is_not_called_a_stdin_line(cli_env: Dict[str, str], qname: str) -> None:
    r = cli(cli_env, "push", qname, "--items", "[1]")  # the argument, not stdin: it said "stdin line 1"
    assert r.code == 1 and r.err == "queen-sync: error: the message: with --items each value must be a JSON object\n"


def test_push_number_too_large_for_a_double_is_refused(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    # json.loads reads 1e400 as Infinity: refused as "NaN / Infinity", or sent as null with --nan-as-null
    r = cli(cli_env, "push", qname, "--nan-as-null", '{"x": 1e400}')
    assert r.code == 1 and "the message is not JSON: number 1e400 is out of range" in r.err, r.err
    r = cli(cli_env, "push", qname, "--nan-as-null", stdin='{"x": 2.5}\n{"x": -1E+999}\n')
    assert r.code == 1 and "stdin line 2 is not JSON: number -1E+999 is out of range" in r.err, r.err
    assert client.queue(qname).batch(10).pop() == []  # nothing of it was sent
    r = cli(cli_env, "push", qname, '{"x": 1e308, "y": 2.5e-400}')  # finite (and an underflow to 0.0) still go
    assert r.code == 0, r.err
    assert [m["data"] for m in client.queue(qname).batch(10).pop()] == [{"x": 1e308, "y": 0.0}]


def test_credentials_in_the_url_point_to_the_token_variable(cli_env: Dict[str, str]) -> None:
    r = cli(cli_env, "--url", "http://user:pw@127.0.0.1:1", "health")
    assert r.code == 1 and "pw" not in r.err, r.err
    # the client's hint named its argument (bearer_token=), which the command line does not have
    assert r.err.strip().endswith("use QUEEN_BEARER_TOKEN for a token") and "bearer_token=" not in r.err, r.err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_consume_exec_command_killed_by_the_stop_signal_is_released_not_nacked(
        cli_env: Dict[str, str], qname: str, client: Queen, tmp_path: Path, sig: int) -> None:
    # retryLimit 0: a nack would dead-letter the message at once
    client.queue(qname).config({"retryDelay": 0, "retryLimit": 0}).create()
    client.queue(qname).partition("p").push([{"data": {"n": 1}}, {"data": {"n": 2}}])
    started = tmp_path / "started"
    # one process (exec), which marks its start itself: with "touch F; sleep 60" a signal sent
    # between the two was taken by the shell waiting for touch, which then ran the sleep
    script = ("import signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
              "open(sys.argv[1], 'w').close(); time.sleep(60)")
    command = "exec %s -c %s %s" % (shlex.quote(sys.executable), shlex.quote(script), shlex.quote(str(started)))
    # a new session: the signal goes to the CLI and its command, as Ctrl-C in a terminal does
    proc = subprocess.Popen([sys.executable, "-m", "queen_sync", "consume", qname, "--group", "g", "--exec", command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env,
                            start_new_session=True)
    try:
        assert wait_until(started.exists, timeout=30), "the command never started"
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == "" and "0 acked, 0 nacked, 1 released" in err and "command interrupted" in err, err
    assert client.queue(qname).dlq("g").get() == []
    # not run again on the drained message, and both are there again, in order
    assert [m["data"]["n"] for m in client.queue(qname).group("g").batch(10).pop()] == [1, 2]


def test_pretty_tables_escape_control_characters(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    # a CR in a message rewrote its table row on a terminal, an ESC started an escape sequence
    client.queue(qname).config({"retryLimit": 0}).create()
    client.queue(qname).partition("p").push({"data": {"a": "x\ry\tz\x1b[31mRED", "k\x1b": "\u202eevil"}})
    msgs = client.queue(qname).partition("p").group("g").pop()
    client.ack(msgs, "dlq", {"error": "bad\rrow\x1b[2K"})
    r = cli(cli_env, "dlq", qname, "--pretty")
    assert r.code == 0, r.err
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f\u202e]", r.out), repr(r.out)
    header, row = r.out.splitlines()
    assert "data.k\\x1b" in header.split()
    assert "x\\ry\\tz\\x1b[31mRED" in row and "bad\\rrow\\x1b[2K" in row and "\\u202eevil" in row
    (line,) = cli(cli_env, "dlq", qname).lines  # the JSON lines keep the text as it is
    assert line["errorMessage"] == "bad\rrow\x1b[2K" and line["data"]["k\x1b"] == "\u202eevil"


def test_seek_partition_without_to_end_is_a_usage_error(cli_env: Dict[str, str], qname: str) -> None:
    # exit status 1 ("error") before, where the other option conflicts of seek are usage errors (2)
    r = cli(cli_env, "seek", "g", qname, "--timestamp", "2026-11-30", "--partition", "p")
    assert r.code == 2 and "error: --partition works with --to-end only" in r.err and r.out == "", r.err
    r = cli(cli_env, "seek", "g", qname, "--to-end", "--timestamp", "2026-11-30")
    assert r.code == 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_consume_stops_gracefully_on_a_first_signal(cli_env: Dict[str, str], qname: str, client: Queen,
                                                    sig: int) -> None:
    # a first Ctrl-C (SIGINT) is a graceful stop with exit status 0, as SIGTERM is (the module
    # docstring said 130 for any interruption)
    client.queue(qname).partition("p").push({"data": {"n": 1}})
    proc = subprocess.Popen([sys.executable, "-m", "queen_sync", "consume", qname, "--group", "g"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["data"] == {"n": 1}  # running, its handlers installed
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and out == "", err
    assert err == "consumed 1 message(s): 1 acked, 0 nacked, 0 released (signal)\n"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_consume_second_sigint_aborts_with_130_and_ends_the_running_command(
        cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    import queue

    client.queue(qname).config({"retryDelay": 0, "retryLimit": 0}).create()  # a nack: dead-lettered at once
    client.queue(qname).partition("p").push({"data": {"n": 1}})
    # signals go to the CLI only (kill PID, not Ctrl-C's process group): the command outlives the
    # first one, which waits for it. The command says on stderr (the CLI's) that it runs, and when
    # the abort sends it SIGTERM
    script = ("import os, signal, sys, time\n"
              "def term(n, f):\n"
              "    sys.stderr.write('command got SIGTERM\\n'); sys.stderr.flush()\n"
              "    signal.signal(n, signal.SIG_DFL); os.kill(os.getpid(), n)\n"
              "signal.signal(signal.SIGTERM, term)\n"
              "sys.stderr.write('started\\n'); sys.stderr.flush(); time.sleep(120)\n")
    command = "exec %s -c %s" % (shlex.quote(sys.executable), shlex.quote(script))
    proc = subprocess.Popen([sys.executable, "-m", "queen_sync", "consume", qname, "--group", "g", "--exec", command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    lines: "queue.Queue[str]" = queue.Queue()
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)  # type: ignore[union-attr]
    reader.start()
    err: List[str] = []
    try:
        assert lines.get(timeout=30) == "started\n"  # the handlers are installed: the command runs inside consume
        # the first SIGINT the CLI handles stops it (it keeps waiting for the command), the next one
        # aborts it, which ends the command. Two signals sent before the CLI handles the first are
        # taken as one: send one at a time until the command reports its end (none after that)
        for _ in range(30):
            proc.send_signal(signal.SIGINT)
            try:
                err.append(lines.get(timeout=1))
            except queue.Empty:
                continue
            assert err[-1] == "command got SIGTERM\n", err
            break
        proc.wait(timeout=30)
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    while not lines.empty():
        err.append(lines.get())
    assert proc.returncode == 130, err
    assert err[-1] == "queen-sync: interrupted\n", err
    assert proc.stdout is not None and proc.stdout.read() == ""
    # the command's message was released (SIGTERM is no verdict), not nacked into the dead letters
    assert client.queue(qname).dlq("g").get() == []
    assert [m["data"]["n"] for m in client.queue(qname).group("g").batch(10).pop()] == [1]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_pop_long_poll_stopped_by_sigterm_says_so_and_exits_143(cli_env: Dict[str, str], qname: str) -> None:
    # SIGTERM's default action killed the process in the long poll, without a word (-15)
    proc = subprocess.Popen([sys.executable, "-m", "queen_sync", "--debug", "pop", qname, "--group", "g",
                             "--wait-millis", "120000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # --debug logs each request as it is sent: the pop is the first
            if "/api/v1/pop/" in line:
                break
        else:
            pytest.fail("no pop request logged")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)  # well before the 120 s of the long poll
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    assert out == "" and err.splitlines()[-1] == "queen-sync: terminated (SIGTERM)", err
    assert "Traceback" not in err


def test_error_and_warning_lines_escape_control_characters(cli_env: Dict[str, str]) -> None:
    # a broker's error text reached the terminal raw: an ESC sequence, a CR rewriting the line,
    # a newline making a second line, a bidi override
    text = "boom\x1b[2K\rforged line\nsecond\u202eevil"
    status = [400]
    escaped = "boom\\x1b[2K\\rforged line second\\u202eevil"
    with fake_broker(lambda h: (status[0], json.dumps({"error": text}).encode())) as url:
        r = cli(dict(cli_env, QUEEN_URL=url), "queues")
        assert r.code == 1 and r.out == ""
        assert r.err.startswith("queen-sync: error: ") and r.err.endswith(": %s\n" % escaped), repr(r.err)
        assert len(r.err.splitlines()) == 1
        # a log line too: with two brokers, a 503 marks one unhealthy with a warning naming the error
        status[0] = 503
        two = "%s,http://localhost:%s" % (url, url.rsplit(":", 1)[1])
        r = cli(dict(cli_env, QUEEN_URL=two), "--timeout-millis", "2000", "queues")
    assert r.code == 1
    lines = r.err.splitlines()
    assert any(line.startswith("queen-sync: WARNING ") and line.endswith(escaped) for line in lines), repr(r.err)
    assert lines[-1].startswith("queen-sync: error: ") and lines[-1].endswith(escaped), repr(r.err)
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f\u202e]", r.err), repr(r.err)


def test_push_batch_size_below_one_is_a_usage_error(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    # the argparse type is the one check (cmd_push had a second one that could never run)
    for value in ("0", "-3"):
        r = cli(cli_env, "push", qname, "--batch-size", value, stdin='{"a": 1}\n')
        assert r.code == 2 and r.out == "", r.err
        assert r.err.splitlines()[-1] == "queen-sync push: error: argument --batch-size: must be >= 1, got %s" % value
    assert client.queue(qname).batch(10).pop() == []  # nothing was sent


def test_pop_help_says_ack_counts_what_reached_a_pipe(cli_env: Dict[str, str]) -> None:
    # `pop --ack | head -1` acks the messages in the pipe's buffer that head never read
    r = cli(cli_env, "pop", "--help")
    assert r.code == 0
    assert "with '| head -1' those head never read are acked too" in " ".join(r.out.split())


def test_dlq_and_seek_of_an_unknown_queue_are_not_found(cli_env: Dict[str, str], qname: str, client: Queen) -> None:
    # dlq printed nothing with exit status 0, seek printed success with partitionsUpdated 0
    name = "nope-%s" % qname
    for args in (["dlq", name], ["dlq", name, "--group", "g", "--partition", "p"], ["seek", "g", name, "--to-end"],
                 ["seek", "g", name, "--to-end", "--partition", "p"],
                 ["seek", "g", name, "--timestamp", "2020-01-01T00:00:00Z"]):
        r = cli(cli_env, *args)
        assert r.code == 1 and r.out == "" and r.err == "queen-sync: error: queue %r not found\n" % name, (args, r.err)
    assert name not in [e["name"] for e in client.admin.list_queues()["queues"]]  # the seek created nothing
    client.queue(qname).partition("p").push([{"data": {"n": 0}}])  # a known queue: no rows, no error
    r = cli(cli_env, "dlq", qname)
    assert r.code == 0 and r.out == "", r.err
    r = cli(cli_env, "dlq", qname, "--pretty")
    assert r.code == 0 and r.out == "(none)\n", r.err
    r = cli(cli_env, "seek", "g", qname, "--to-end")
    assert r.code == 0 and r.lines[0]["success"] is True, r.err
    assert client.queue(qname).group("g").batch(5).pop() == []  # sought to the end
