"""Defects a newcomer found by using the project from its README: each test failed before
its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict

import pytest

from queen_sync import InvalidInputError, Queen


def _pushes(queen_broker: Any) -> Any:
    emb = queen_broker.embedded
    return None if emb is None else emb.request_count("POST", "/api/v1/push")


# --- names longer than the broker's VARCHAR(255) ------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda q, name: q.queue(name + "-" * 256).push({"data": 1}),
        lambda q, name: q.queue(name).partition("p" * 256).push({"data": 1}),
        lambda q, name: q.queue(name).group("g" * 256).pop(),
        lambda q, name: q.transaction().queue(name + "-" * 256).push([{"data": 1}]).commit(),
        lambda q, name: q.queue(name).partition("p" * 256).buffer(10, 10).push({"data": 1}),
    ],
    ids=["queue", "partition", "group", "transaction-queue", "buffered-partition"],
)
def test_a_name_longer_than_255_characters_is_refused_before_sending(
    queen: Queen, queen_queue: str, queen_broker: Any, build: Any
) -> None:
    # The broker keeps names in VARCHAR(255) columns: a longer one fails the push in its
    # database, which a 0.15 broker answers "buffered" and retries for ever.
    before = _pushes(queen_broker)
    with pytest.raises(InvalidInputError, match="at most 255"):
        build(queen, queen_queue)
    assert queen.flush_all_buffers() == 0
    assert _pushes(queen_broker) == before


def test_a_255_character_name_is_still_accepted(queen: Queen, queen_queue: str) -> None:
    partition = "p" * 255
    res = queen.queue(queen_queue).partition(partition).push({"data": 1})
    assert [r["status"] for r in res] == ["queued"]
    (msg,) = queen.queue(queen_queue).partition(partition).batch(2).pop()
    assert msg["partition"] == partition and msg["data"] == 1


# --- body-framing headers ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Content-Length", "content-length", "Transfer-Encoding"])
def test_a_body_framing_header_is_refused_at_construction(broker_url: str, name: str) -> None:
    # A Content-Length the client did not compute cut the body short: the broker answered 400
    # and read the rest of the body, left on the pooled connection, as the next request.
    with pytest.raises(InvalidInputError, match=name):
        Queen(broker_url, headers={name: "2"})


def test_other_extra_headers_still_reach_the_broker(broker_url: str, queen_queue: str) -> None:
    with Queen(broker_url, headers={"X-Request-Source": "newcomer"}) as q:
        assert [r["status"] for r in q.queue(queen_queue).push({"data": 1})] == ["queued"]
        assert q.admin.health()["status"] == "healthy"


# --- CLI: an empty --partition / --group --------------------------------------------------


@pytest.fixture
def cli_env(broker_url: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QUEEN_URL", "QUEEN_BEARER_TOKEN")}
    env["QUEEN_URL"] = broker_url
    return env


def _cli(env: Dict[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, "-m", "queen_sync", *args], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        ("push", "{q}", "1", "--partition", ""),  # was pushed to the Default partition
        ("pop", "{q}", "--group", "", "--ack"),  # was popped and acked in queue mode
        ("pop", "{q}", "--partition", ""),
        ("dlq", "{q}", "--partition", ""),
        ("seek", "g", "{q}", "--to-end", "--partition", ""),  # was a seek of every partition
    ],
    ids=["push-partition", "pop-group", "pop-partition", "dlq-partition", "seek-partition"],
)
def test_cli_empty_partition_or_group_is_an_invalid_input(
    cli_env: Dict[str, str], queen: Queen, queen_queue: str, args: Any
) -> None:
    queen.queue(queen_queue).partition("p").push({"data": "kept"})
    run = _cli(cli_env, *[a.format(q=queen_queue) for a in args])
    assert run.returncode == 1, run.stdout + run.stderr
    assert "invalid input" in run.stderr and "name must be a non-empty str" in run.stderr, run.stderr
    assert run.stdout == ""
    # nothing was pushed, popped, acked or moved: the one message is still there for queue mode
    assert [m["data"] for m in queen.queue(queen_queue).batch(10).partitions(10).pop()] == ["kept"]
    assert json.loads(_cli(cli_env, "pop", queen_queue, "--group", "g").stdout)["data"] == "kept"


# --- Streams: builder settings the runner would drop ---------------------------------------


def test_stream_source_with_auto_ack_is_refused(queen: Queen, queen_queue: str) -> None:
    # The runner popped with autoAck=true: a batch whose cycle failed was already committed,
    # so it never came back (the exactly-once guarantee became at-most-once).
    from queen_sync import Stream

    with pytest.raises(InvalidInputError, match="auto_ack"):
        Stream.from_(queen.queue(queen_queue).auto_ack(True))
    Stream.from_(queen.queue(queen_queue).auto_ack(False))  # the default is fine


def test_stream_source_with_a_group_is_refused(queen: Queen, queen_queue: str) -> None:
    from queen_sync import Stream

    with pytest.raises(InvalidInputError, match="consumer_group='billing'"):
        Stream.from_(queen.queue(queen_queue).group("billing"))


def test_stream_sink_builder_partition_is_refused_not_dropped(queen: Queen, queen_queue: str) -> None:
    # .to(q.queue(sink).partition("wanted")) pushed the results to the *source* partition.
    from queen_sync import Stream

    src = Stream.from_(queen.queue(queen_queue))
    with pytest.raises(InvalidInputError, match="partition='wanted'"):
        src.to(queen.queue(queen_queue + "-sink").partition("wanted"))
    src.to(queen.queue(queen_queue + "-sink"), partition="wanted")  # the spelling that works


# --- a refused broker URL is not echoed with its secrets ---------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:hunter2@127.0.0.1:99999",  # bad port: "invalid broker URL ..."
        "alice:hunter2@127.0.0.1:6632",  # no scheme: "must look like http(s)://host[:port][/path prefix]"
        "https//alice:hunter2@queen.internal:6632",  # a typo in the scheme
        "ftp://alice:hunter2@queen.internal",
        "http://127.0.0.1:6632/?access_token=hunter2",  # "must not have a query"
        "http://127.0.0.1:6632#hunter2",
    ],
)
def test_a_refused_broker_url_does_not_echo_its_credentials(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError) as exc_info:
        Queen(url)
    assert "hunter2" not in str(exc_info.value)
    assert "127.0.0.1" in str(exc_info.value) or "queen.internal" in str(exc_info.value)  # still says which
    monkeypatch.setenv("QUEEN_URL", url)
    with pytest.raises(InvalidInputError) as exc_info:
        Queen()
    assert "hunter2" not in str(exc_info.value)


@pytest.mark.parametrize("url", ["http://local host:1", "http://a b/", "http://%zz:1", "http://host..:1",
                                 "http://.host", "http://%2e", "http://" + "a" * 64 + ".com"])
def test_a_url_urllib3_cannot_parse_is_refused_at_construction(url: str) -> None:
    # urllib.parse took these, then every call raised urllib3's LocationParseError (no QueenError),
    # or, for a host with an empty or over-long label, a "connection broke" after the retry budget
    with pytest.raises(InvalidInputError, match="invalid broker URL"):
        Queen(url)


@pytest.mark.parametrize("url, char", [("http://h\nx:1", "\n"), ("http://h\tx:1/p", "\t"), ("http://h:1/a b", " "),
                                       ("http://h:1/\x00", "\x00"), ("http://h:1/\x7f", "\x7f")])
def test_a_url_with_whitespace_or_a_control_character_inside_is_refused_not_changed(url: str, char: str) -> None:
    # urlsplit drops tabs and newlines without a word: http://h\nx became the broker http://hx
    with pytest.raises(InvalidInputError, match="invalid broker URL") as exc_info:
        Queen(url)
    assert "it contains %r" % char in str(exc_info.value)


def test_an_over_long_refused_url_is_shown_cut_short() -> None:
    with pytest.raises(InvalidInputError) as exc_info:
        Queen("http://" + "a" * 100000 + ":notaport")
    assert len(str(exc_info.value)) < 1000 and "..." in str(exc_info.value)


def test_the_pytest_plugin_header_does_not_print_url_credentials(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # "queen_sync broker: http://alice:hunter2@..." went into every CI log
    monkeypatch.setenv("QUEEN_URL", "http://alice:hunter2@127.0.0.1:1?token=hunter2")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = "\n".join(result.outlines + result.errlines)
    assert "queen_sync: broker at http://***@127.0.0.1:1?*** (from QUEEN_URL)" in out, out
    assert "hunter2" not in out


@pytest.mark.parametrize("url", ["http://queen.internal:6632/prefix", "https://[fe80::1%25eth0]:6632", "http://localhost",
                                 "http://host.:1", "http://b\u00fccher.de:1", "http://my_host:1", "http://[::1]:1"])
def test_real_world_broker_urls_are_accepted(url: str) -> None:
    Queen(url).close()


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://admin:hunter?2@h:1", "http://***@h:1"),  # a ? or # in the password: still user info
        ("http://admin:hun#ter2@h:1/p", "http://***@h:1/p"),
        ("http://127.0.0.1:1/hunter2@x", "http://127.0.0.1:1/hunter2@x"),  # an @ in the path is not
        ("http://alice:hunter2@127.0.0.1:1?token=hunter2", "http://***@127.0.0.1:1?***"),
    ],
)
def test_redact_url_finds_the_user_info_by_the_authority(url: str, shown: str) -> None:
    from queen_sync._validate import redact_url

    assert redact_url(url) == shown
    if "***@" in shown:
        with pytest.raises(InvalidInputError) as exc_info:
            Queen(url)  # was "Port could not be cast to integer value as 'hunter'"
        assert "hunter" not in str(exc_info.value) and "credentials" in str(exc_info.value)
