"""Buffered push semantics: triggers (count, time, bytes), flush / close, the bound
(BufferFullError, blocking push), validation at push time, ordering under faults, stats."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import types
import warnings
from collections import Counter
from typing import Any

import pytest

from queen_sync import BufferFullError, ClientClosedError, InvalidInputError, Queen
from queen_sync.producer import BufferOptions
from queen_sync.transport import ExponentialBackoff

from _helpers import run_script, wait_for


@pytest.fixture
def q(quick_retry_client: Queen) -> Queen:
    return quick_retry_client


def data_of(broker: Any, queue: str) -> list:
    return [m["data"] for m in broker.messages(queue)]


def test_count_trigger_then_flush(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("cnt").buffer(10, 600000)
    for i in range(10):
        qb.push({"data": i})
    wait_for(lambda: q.get_buffer_stats()["delivered"] == 10, what="a full batch delivered")
    for i in range(10, 15):
        qb.push({"data": i})
    st = q.get_buffer_stats()["buffers"]["cnt/Default"]
    assert st["unsent"] == 5 and st["pushed"] == 15
    assert len(embedded_broker.messages("cnt")) == 10  # the time trigger is 10 minutes away
    assert qb.flush(5000) == 0
    assert data_of(embedded_broker, "cnt") == list(range(15))
    assert embedded_broker.request_count("POST", "/api/v1/push") == 2


def test_time_trigger(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("tm").partition("a").buffer(1000, 30)
    qb.push([{"data": 1}, {"data": 2}])
    wait_for(lambda: q.get_buffer_stats()["delivered"] == 2, what="time-triggered batch")
    assert q.get_buffer_stats()["buffers"]["tm/a"]["batches"] == 1
    assert data_of(embedded_broker, "tm") == [1, 2]


def test_max_bytes_trigger_and_batch_size(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("by").buffer(1000, 600000, max_bytes=2000)
    for i in range(8):
        qb.push({"data": {"i": i, "pad": "x" * 450}})
    wait_for(lambda: q.get_buffer_stats()["delivered"] >= 3, what="a byte-triggered batch")
    assert q.flush_all_buffers(5000) == 0
    assert [d["i"] for d in data_of(embedded_broker, "by")] == list(range(8))
    assert embedded_broker.request_count("POST", "/api/v1/push") >= 2  # never one 4 KB body


def test_a_list_push_is_split_to_fit_max_bytes(embedded_broker: Any, q: Queen) -> None:
    """One push of a list is cut into batches of at most max_bytes of encoded items (it was one
    body whatever its size: a proxy's body limit refused the whole batch), in order, each item
    once, under the ids push() returned; an item alone over the bound is sent alone."""
    qb = q.queue("mb").buffer(1000, 600000, max_bytes=200)
    items = [{"data": {"i": i, "s": "y" * 50}} for i in range(20)] + [{"data": {"i": 20, "s": "z" * 500}}]
    results = qb.push(items)
    assert qb.flush(5000) == 0
    stored = embedded_broker.messages("mb")
    assert [m["data"]["i"] for m in stored] == list(range(21))
    assert [m["transactionId"] for m in stored] == [r["transaction_id"] for r in results]
    pushes = embedded_broker.request_count("POST", "/api/v1/push")
    # ~95 encoded bytes per small item: two fit in 200, so at least 10 bodies for the 20, and
    # the big one alone
    assert pushes >= 11
    assert q.get_buffer_stats()["buffers"]["mb/Default"]["batches"] == pushes


def test_a_list_push_over_message_count_and_max_bytes_keeps_order(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("mb2").buffer(7, 600000, max_bytes=300)
    qb.push([{"data": {"i": i, "s": "y" * 40}} for i in range(30)])
    assert qb.flush(5000) == 0
    assert [m["data"]["i"] for m in embedded_broker.messages("mb2")] == list(range(30))
    assert embedded_broker.request_count("POST", "/api/v1/push") >= 30 * 85 // 300


def test_bad_input_raises_at_push_time(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("bad").buffer(10, 10)
    with pytest.raises(InvalidInputError):
        qb.push({"data": object()})
    with pytest.raises(InvalidInputError):
        qb.push({"data": 1, "traceId": "not-a-uuid"})
    with pytest.raises(InvalidInputError):
        qb.push([{"data": 1}, {"data": {1, 2}}])  # all or none: the good item is not buffered
    with pytest.raises(InvalidInputError):
        qb.push("nope")  # type: ignore[arg-type]
    assert q.get_buffer_stats()["totalBufferedMessages"] == 0
    assert qb.push([]) == []
    assert q.flush_all_buffers(1000) == 0
    assert embedded_broker.request_count("POST", "/api/v1/push") == 0


@pytest.mark.parametrize(
    "item, words",
    [
        ({"data": 1, "transactionID": "order-42"}, "item 1: unknown key 'transactionID' (did you mean 'transactionId'?)"),
        ({"orderId": 7}, "item 1: unknown key 'orderId'; no 'data' (or 'payload') key"),
        ({"data": 1, "payload": 2}, "item 1: both 'data' and 'payload'"),
    ],
)
def test_strict_item_keys_on_every_push_path(embedded_broker: Any, q: Queen, item: dict, words: str) -> None:
    """A typo'd or ambiguous item is refused before anything is sent or buffered, whether
    pushed directly, buffered or in a transaction (it used to be pushed with a fresh id)."""
    items = [{"data": 0}, item]
    paths = {
        "push": lambda: q.queue("strict").push(items),
        "buffered": lambda: q.queue("strict").buffer(1, 1).push(items),
        "transaction": lambda: q.transaction().queue("strict").push(items),
    }
    for name, call in paths.items():
        with pytest.raises(InvalidInputError) as info:
            call()
        assert words in str(info.value), (name, str(info.value))
    assert q.get_buffer_stats()["totalBufferedMessages"] == 0
    assert embedded_broker.request_count("POST", "/api/v1/push") == 0
    assert embedded_broker.messages("strict") == []


def test_push_returns_pending_results_with_transaction_ids(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("ids").partition("p").buffer(5, 600000)
    got = qb.push([{"data": "a"}, {"data": "b", "transactionId": "my-own-id"}])
    # "pending" (held in this client), never a broker's "buffered" (accepted by the broker)
    assert [r["status"] for r in got] == ["pending", "pending"]
    assert got[1]["transaction_id"] == "my-own-id"
    assert q.flush_all_buffers(5000) == 0
    stored = embedded_broker.messages("ids")
    assert [m["transactionId"] for m in stored] == [r["transaction_id"] for r in got]
    assert {m["partition"] for m in stored} == {"p"}


def test_order_kept_when_batches_fail(embedded_broker: Any, q: Queen) -> None:
    """Lost responses and 500s: batches are resent in order, nothing lost or doubled."""
    embedded_broker.faults.add("POST", "/api/v1/push", "drop_after", times=2)
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=500, times=4)  # > retry_attempts
    # batches go out by count only (the timer never fires first), so each lost reply is a
    # batch of 7 resent whole: at least 7 duplicates, whatever the machine's speed
    qb = q.queue("ord").buffer(7, 60_000)
    for i in range(120):
        qb.push({"data": i})
    assert q.flush_all_buffers(10000) == 0
    assert data_of(embedded_broker, "ord") == list(range(120))
    st = q.get_buffer_stats()
    assert st["delivered"] == 120 and st["duplicates"] >= 7 and st["retries"] >= 1


def test_full_buffer_error_while_the_first_send_is_still_retrying_says_so(embedded_broker: Any) -> None:
    # broker down, the batch's first send still inside the transport's own attempts (2 s
    # backoff between them): the buffer has seen no failed send yet. The error said "last
    # error: None", then "no send has failed yet"; it now names the transport's failed
    # attempts of this send and their latest error (told by its on_retry)
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=3, backoff=ExponentialBackoff(2000, 2000))
    try:
        qb = q.queue("slow").buffer(10, 1, max_messages=10, block_timeout_millis=20)
        qb.push([{"data": i} for i in range(10)])
        wait_for(lambda: q.get_transport_stats()["retries"] >= 1, what="the first attempt's failure")
        with pytest.raises(BufferFullError, match=r"; a send of 10 message\(s\) in flight for \d+ ms, no reply yet: "
                           r"the transport is retrying it \(1 failed attempt\(s\), latest error: cannot connect "
                           r"to the Queen broker at .*Connection refused\)$") as info:
            qb.push({"data": 10})
        text = str(info.value)
        assert "None" not in text and "\n" not in text
        assert q.get_buffer_stats()["buffers"]["slow/Default"]["last_error"] is None  # no failed send yet
    finally:
        with pytest.warns(RuntimeWarning, match="10 buffered message"):
            assert q.close(timeout_millis=50) == 10


def _close_summary(caplog: pytest.LogCaptureFixture) -> str:
    [line] = [r.getMessage() for r in caplog.records
              if r.name == "queen_sync.producer" and r.levelno == logging.ERROR and "could not be delivered" in r.getMessage()]
    return line


def test_close_during_an_outage_names_the_failure_in_progress(
        embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    # the reproducer: broker down, close with a timeout shorter than the transport's retries
    # (the buffer's last_error is still None then): the ERROR line said "last error: None"
    caplog.set_level(logging.ERROR, logger="queen_sync.producer")
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=3, backoff=ExponentialBackoff(2000, 2000))
    q.queue("f").buffer(10, 60000).push({"data": 1})
    with pytest.warns(RuntimeWarning, match="1 buffered message"):
        assert q.close(timeout_millis=500) == 1  # the close's flush sends it: its first attempt is refused
    line = _close_summary(caplog)
    assert re.search(r"\(f/Default: 1 unsent, 0 failed send\(s\) in all; a send of 1 message\(s\) in flight for "
                     r"\d+ ms, no reply yet: the transport is retrying it \(1 failed attempt\(s\), latest error: "
                     r"cannot connect to the Queen broker at [^;]*Connection refused\)\); ", line), line
    assert "None" not in line


def test_close_while_a_send_has_no_reply_yet_says_so(embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    # a broker that takes the push and never answers: no attempt has failed yet
    caplog.set_level(logging.ERROR, logger="queen_sync.producer")
    hole = embedded_broker.faults.add("POST", "/api/v1/push", "blackhole", times=None)
    q = Queen(embedded_broker.url, timeout_millis=60000)
    q.queue("f").buffer(10, 60000).push({"data": 1})
    with pytest.warns(RuntimeWarning, match="1 buffered message"):
        assert q.close(timeout_millis=300) == 1
    assert hole.hits == 1
    line = _close_summary(caplog)
    assert "f/Default: 1 unsent, 0 failed send(s) in all; a send of 1 message(s) in flight for " in line
    assert ", no reply yet (a slow or unreachable broker: " in line and "None" not in line
    embedded_broker.faults.clear()


def test_close_while_a_resent_batch_is_retrying_names_both(
        embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    # the first send failed (its 2 attempts answered 500), the resend's first attempt too,
    # its second hangs: the line names the batch's failed send and the current send's attempt
    caplog.set_level(logging.ERROR, logger="queen_sync.producer")
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=500, times=3,
                               body={"error": "disk full"})
    hole = embedded_broker.faults.add("POST", "/api/v1/push", "blackhole", times=None)
    q = Queen(embedded_broker.url, retry_attempts=2, backoff=ExponentialBackoff(1, 2), timeout_millis=60000)
    try:
        q.queue("f").buffer(1, 1).push({"data": 1})
        wait_for(lambda: hole.hits == 1, what="the resend's second attempt")
    finally:
        with pytest.warns(RuntimeWarning, match="1 buffered message"):
            assert q.close(timeout_millis=50) == 1
    line = _close_summary(caplog)
    assert re.search(r"f/Default: 1 unsent, 1 failed send\(s\) in all; a send of 1 message\(s\) in flight for \d+ "
                     r"ms, resent after 1 failed send\(s\), last error: [^;]*disk full[^;]*; the transport is retrying "
                     r"the current send \(1 failed attempt\(s\), latest error: [^;]*disk full[^;]*\)\); ", line), line
    embedded_broker.faults.clear()


def test_full_buffer_error_names_the_failed_sends_of_the_batch_in_flight(embedded_broker: Any) -> None:
    # the broker refuses connections and the batch has been resent: the error says so, with
    # this batch's failed sends and its last error, on one line and without payloads
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=1, backoff=ExponentialBackoff(1, 2))
    try:
        qb = q.queue("resent").buffer(10, 1, max_messages=10, block_timeout_millis=20)
        qb.push([{"data": "secret-%d" % i} for i in range(10)])
        wait_for(lambda: q.get_buffer_stats()["retries"] >= 2, what="two failed sends")
        with pytest.raises(BufferFullError) as info:
            qb.push({"data": 10})
        text = str(info.value)
        m = re.search(r"; a send of 10 message\(s\) in flight for (\d+) ms, resent after (\d+) failed send\(s\), "
                      r"last error: (.+)$", text)
        assert m, text
        assert int(m.group(2)) >= 2 and m.group(3).strip()
        last_error = " ".join(q.get_buffer_stats()["buffers"]["resent/Default"]["last_error"].split())
        assert m.group(3) == last_error[:300] + ("..." if len(last_error) > 300 else "")
        assert "\n" not in text and "secret-" not in text
    finally:
        with pytest.warns(RuntimeWarning, match="10 buffered message"):
            assert q.close(timeout_millis=50) == 10


def test_full_buffer_error_with_no_send_in_flight_says_so(embedded_broker: Any, q: Queen) -> None:
    # a sender that has not taken the next batch (here: never started) leaves nothing in
    # flight; the error said "no send has failed yet", which tells nothing
    qb = q.queue("idle").buffer(2, 600000, max_messages=2, block_timeout_millis=0)
    buf = q._producer.buffer_for("idle", None, qb._buffer)
    buf._start_thread = lambda: None  # type: ignore[method-assign]
    qb.push([{"data": 1}, {"data": 2}])
    with pytest.raises(BufferFullError, match=r"after waiting 0 ms; no send in flight$"):
        qb.push({"data": 3})
    buf._s["last_error"] = "HTTP 503:\n  busy"
    with pytest.raises(BufferFullError, match=r"; no send in flight, last error of an earlier send: HTTP 503: busy$"):
        qb.push({"data": 3})
    del buf._start_thread  # the sender starts: the flush delivers them
    buf._start_thread()
    assert q.flush_all_buffers(5000) == 0


def test_oldest_age_counts_the_batch_in_flight_during_an_outage(embedded_broker: Any) -> None:
    # broker down, the only message in a batch being resent: the age was 0.0 (only waiting
    # messages counted), so an alert on oldestBufferAge never fired during an outage
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=1, backoff=ExponentialBackoff(1, 2))
    try:
        before = time.monotonic()
        q.queue("age").buffer(10, 1).push({"data": 1})
        pushed = time.monotonic()
        wait_for(lambda: q.get_buffer_stats()["retries"] >= 2, what="two failed sends")
        observed = time.monotonic()
        stats = q.get_buffer_stats()
        after = time.monotonic()
        st = stats["buffers"]["age/Default"]
        assert (st["waiting"], st["in_flight"], st["unsent"]) == (0, 1, 1)
        # the age runs from the push: at least the time since the push returned, at most since it began
        assert (observed - pushed) * 1000.0 <= st["oldest_age_millis"] <= (after - before) * 1000.0
        assert stats["oldestBufferAge"] == st["oldest_age_millis"] > 0.0
        wait_for(lambda: q.get_buffer_stats()["buffers"]["age/Default"]["oldest_age_millis"] > st["oldest_age_millis"],
                 what="the age growing while the batch is resent")
        # a message waiting behind the batch in flight is younger: the age stays the batch's
        q.queue("age").buffer(10, 1).push({"data": 2})
        observed = time.monotonic()
        st2 = q.get_buffer_stats()["buffers"]["age/Default"]
        assert st2["waiting"] == 1 and st2["oldest_age_millis"] >= (observed - pushed) * 1000.0
        embedded_broker.start()
        assert q.flush_all_buffers(10000) == 0
        stats = q.get_buffer_stats()
        assert stats["oldestBufferAge"] == stats["buffers"]["age/Default"]["oldest_age_millis"] == 0.0
    finally:
        assert q.close(timeout_millis=2000) == 0


def test_a_refused_batch_no_longer_counts_in_the_oldest_age(embedded_broker: Any, q: Queen) -> None:
    embedded_broker.faults.add("POST", "/api/v1/push", "status", status=400, times=1)
    qb = q.queue("refused-age").buffer(10, 600000)
    qb.push({"data": 1})
    assert qb.flush(5000) == 1  # given up as failed: not undelivered-and-pending any more
    st = q.get_buffer_stats()
    assert st["failed"] == 1 and st["totalBufferedMessages"] == 0 and st["oldestBufferAge"] == 0.0


def test_buffer_with_other_settings_on_an_open_buffer_is_refused(embedded_broker: Any, q: Queen) -> None:
    # one buffer per queue/partition: other settings were silently ignored (a log line)
    first = q.queue("cfg").partition("p").buffer(10, 600000)
    first.push({"data": 1})
    other = q.queue("cfg").partition("p").buffer(3, 5000)  # refused at its push (a later
    # .partition() could still move it elsewhere: see the order case below)
    with pytest.raises(InvalidInputError) as info:
        other.push({"data": "x"})
    text = str(info.value)
    assert text.startswith("the push buffer of cfg/p is already open with other settings (message_count=10, "
                           "time_millis=600000, max_bytes=1048576, max_messages=10000, block_timeout_millis=10000; "
                           "asked for message_count=3, time_millis=5000, max_bytes=1048576, max_messages=10000, "
                           "block_timeout_millis=10000; they differ in message_count, time_millis)"), text
    assert "call buffer() with the open buffer's settings" in text and "\n" not in text
    with pytest.raises(InvalidInputError, match="differ in block_timeout_millis"):
        q.queue("cfg").partition("p").buffer(10, 600000, block_timeout_millis=5).push({"data": "x"})
    # buffer() before partition(): judged by the partition the push goes to
    q.queue("cfg").buffer(3, 5000).partition("q").push({"data": "q"})
    # the same settings, in any spelling, keep pushing into the open buffer
    again = q.queue("cfg").partition("p").buffer({"message_count": 10, "time_millis": 600000})
    again.push({"data": 2})
    q.queue("cfg").partition("p").buffer(10, 600000, max_messages=10000).push({"data": 3})
    # another partition, or the same one after a flush, is its own matter
    q.queue("cfg").partition("other").buffer(3, 5000).push({"data": "o"})
    assert first.flush(5000) == 0
    with pytest.raises(InvalidInputError, match="already open"):
        q.queue("cfg").partition("p").buffer(3, 5000).push({"data": "x"})  # flush() keeps the buffer
    st = q.get_buffer_stats()
    assert st["activeBuffers"] == 3
    assert st["buffers"]["cfg/p"]["options"]["message_count"] == 10 and st["buffers"]["cfg/p"]["pushed"] == 3
    assert q.flush_all_buffers(5000) == 0
    assert sorted(map(str, data_of(embedded_broker, "cfg"))) == ["1", "2", "3", "o", "q"]


def test_push_from_a_builder_made_before_the_buffer_opened_with_other_settings_is_refused(
        embedded_broker: Any, q: Queen) -> None:
    # both builders made while no buffer was open: the second one's push used to go into the
    # first one's buffer, with the first one's settings
    slow = q.queue("early").buffer(10, 600000)
    fast = q.queue("early").buffer(3, 5000)
    slow.push({"data": 1})
    with pytest.raises(InvalidInputError, match=r"^the push buffer of early/Default is already open with other "
                       r"settings \(message_count=10, time_millis=600000, .*; asked for message_count=3, "
                       r"time_millis=5000, "):
        fast.push({"data": 2})
    st = q.get_buffer_stats()["buffers"]["early/Default"]
    assert st["pushed"] == 1 and st["unsent"] == 1  # nothing of the refused push was buffered
    assert slow.flush(5000) == 0
    assert data_of(embedded_broker, "early") == [1]


def test_full_buffer_raises_then_close_reports_unsent(embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=2, backoff=ExponentialBackoff(2, 10))
    qb = q.queue("full").buffer(5, 1, max_messages=10, block_timeout_millis=50)
    qb.push([{"data": i} for i in range(10)])
    with pytest.raises(BufferFullError):
        qb.push({"data": 10})
    with pytest.raises(InvalidInputError):
        qb.push([{"data": i} for i in range(11)])  # can never fit
    st = q.get_buffer_stats()["buffers"]["full/Default"]
    assert st["unsent"] == 10 and st["full_timeouts"] == 1
    wait_for(lambda: q.get_buffer_stats()["retries"] >= 1, what="a failed batch send")
    assert q.get_buffer_stats()["buffers"]["full/Default"]["last_error"]
    assert q.flush_all_buffers(20) == 10
    with caplog.at_level(logging.ERROR, logger="queen_sync.producer"):
        with pytest.warns(RuntimeWarning, match="10 buffered message"):
            assert q.close(timeout_millis=50) == 10
    assert q.unsent_on_close == 10
    assert q.close() == 10  # idempotent
    assert any("10 buffered message" in r.getMessage() for r in caplog.records)
    with pytest.raises(ClientClosedError):
        qb.push({"data": 1})


def test_blocked_push_proceeds_when_broker_returns(embedded_broker: Any) -> None:
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=2, backoff=ExponentialBackoff(2, 10))
    try:
        qb = q.queue("blk").buffer(4, 1, max_messages=8, block_timeout_millis=20000)
        qb.push([{"data": i} for i in range(8)])
        done = threading.Event()
        errors: list = []

        def late() -> None:
            try:
                qb.push({"data": 8})
            except BaseException as exc:  # pragma: no cover
                errors.append(exc)
            done.set()

        t = threading.Thread(target=late)
        t.start()
        wait_for(lambda: q.get_buffer_stats()["retries"] >= 1, what="sends failing")
        assert not done.is_set()  # blocked: the buffer is full and nothing gets out
        embedded_broker.start()
        assert done.wait(10) and not errors
        t.join()
        assert q.flush_all_buffers(10000) == 0
        assert sorted(data_of(embedded_broker, "blk")) == list(range(9))
    finally:
        assert q.close(timeout_millis=2000) == 0


def test_close_flushes_everything(embedded_broker: Any) -> None:
    q = Queen(embedded_broker.url)
    for p in ("a", "b", "c"):
        q.queue("cls").partition(p).buffer(1000, 600000).push([{"data": "%s%d" % (p, i)} for i in range(20)])
    assert q.get_buffer_stats()["totalBufferedMessages"] == 60
    assert q.get_buffer_stats()["activeBuffers"] == 3
    assert q.close() == 0
    assert q.unsent_on_close == 0
    assert Counter(data_of(embedded_broker, "cls")) == Counter("%s%d" % (p, i) for p in "abc" for i in range(20))


def test_buffered_push_against_any_broker(client: Queen, qname: str) -> None:
    """Runs against a real broker too: buffered pushes can be popped back."""
    client.queue(qname).create()
    qb = client.queue(qname).buffer(3, 600000)
    qb.push([{"data": i} for i in range(7)])
    assert client.flush_all_buffers(10000) == 0
    got = client.queue(qname).batch(10).wait(True).timeout_millis(2000).auto_ack(True).pop()
    assert sorted(m["data"] for m in got) == list(range(7))


def test_buffer_options_validation(client: Queen) -> None:
    q = client
    with pytest.raises(InvalidInputError):
        q.queue("x").buffer(0)
    with pytest.raises(InvalidInputError):
        q.queue("x").buffer(10, -1)
    with pytest.raises(InvalidInputError):
        q.queue("x").buffer(100, max_messages=10)
    with pytest.raises(InvalidInputError):
        q.queue("x").buffer({"message_count": 5, "bogus": 1})
    opts = q.queue("x").buffer({"message_count": 5, "time_millis": 50})._buffer
    assert opts == BufferOptions(message_count=5, time_millis=50)
    assert BufferOptions().max_messages == 10000


def test_uwsgi_without_threads_warns(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from queen_sync import _fork

    cases = (
        (types.SimpleNamespace(opt={}, has_threads=1), False),  # uWSGI >= 2.0.27: on without --enable-threads
        (types.SimpleNamespace(opt={}, has_threads=0), True),
        (types.SimpleNamespace(opt={"enable-threads": True}), False),  # no has_threads: the options decide
        (types.SimpleNamespace(opt={"threads": b"4"}), False),
        (types.SimpleNamespace(opt={}), True),
    )
    for fake, warns in cases:
        monkeypatch.setitem(sys.modules, "uwsgi", fake)
        monkeypatch.setattr(_fork, "_warned", False)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="queen_sync"), warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            _fork.warn_uwsgi_threads_off("the sender")
            _fork.warn_uwsgi_threads_off("the sender")  # once only
        msgs = [r for r in caplog.records if "enable-threads" in r.getMessage()]
        assert len(msgs) == (1 if warns else 0), fake
        assert len([w for w in ws if issubclass(w.category, RuntimeWarning)]) == (1 if warns else 0), fake


def _producer_records(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list:
    return [r.getMessage() for r in caplog.records
            if r.name == "queen_sync.producer" and r.levelno == level and text in r.getMessage()]


def test_a_failing_batch_logs_one_warning_then_debug_and_close_sums_it_up(
        embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="queen_sync.producer")
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=1, backoff=ExponentialBackoff(1, 2))
    q.queue("down").partition("p").buffer(5, 1).push([{"data": i} for i in range(3)])
    wait_for(lambda: q.get_buffer_stats()["retries"] >= 6, what="six failed sends")
    with pytest.warns(RuntimeWarning, match="3 buffered message"):
        assert q.close(timeout_millis=50) == 3
    # one WARNING for the batch, whatever the number of resends; the next failures at DEBUG
    assert len(_producer_records(caplog, logging.WARNING, "failed")) == 1
    assert len(_producer_records(caplog, logging.DEBUG, "failed again")) >= 5
    [summary] = _producer_records(caplog, logging.ERROR, "could not be delivered within")  # >= 250 ms
    retries = q.get_buffer_stats()["retries"]
    assert "down/p: 3 unsent" in summary and "last error:" in summary
    assert int(summary.split("3 unsent, ")[1].split(" failed send")[0]) <= retries
    assert "close_timeout_millis" in summary


def test_a_batch_delivered_after_failing_logs_one_warning_and_one_info(
        embedded_broker: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="queen_sync.producer")
    embedded_broker.stop()
    q = Queen(embedded_broker.url, retry_attempts=1, backoff=ExponentialBackoff(1, 5))
    try:
        q.queue("back").buffer(5, 1).push([{"data": i} for i in range(2)])
        wait_for(lambda: q.get_buffer_stats()["retries"] >= 3, what="failed sends")
        embedded_broker.start()
        assert q.flush_all_buffers(10000) == 0
    finally:
        assert q.close(timeout_millis=2000) == 0
    assert data_of(embedded_broker, "back") == [0, 1]
    assert len(_producer_records(caplog, logging.WARNING, "failed")) == 1
    [info] = _producer_records(caplog, logging.INFO, "delivered after")
    assert info.startswith("push batch of 2 message(s) to back/Default delivered after ")


@pytest.mark.parametrize("request_first", [False, True], ids=["buffer-only", "after-a-request"])
def test_exit_without_close_delivers_the_buffer(client: Queen, qname: str, request_first: bool) -> None:
    """A script that buffers and exits without close(): the exit hook sends the buffer, also
    when the client made a request before (its connection pool, and urllib3's exit-time close
    of every pool, then exist before the exit: that close once ran first, and the flush
    waited close_timeout_millis for a connection and lost the buffer)."""
    script = (
        "import sys\n"
        "from queen_sync import Queen\n"
        "q = Queen(sys.argv[1], close_timeout_millis=20000)\n"
        "if sys.argv[3] == '1':\n"
        "    q.queue(sys.argv[2]).create()\n"
        "q.queue(sys.argv[2]).buffer(1000, 600000).push([{'data': i} for i in range(5)])\n"
        "print('pushed', flush=True)\n"
    )
    client.queue(qname).create()
    proc = run_script(script, client.urls[0], qname, "1" if request_first else "0")
    assert proc.returncode == 0 and proc.stdout.split() == ["pushed"], proc.stdout + proc.stderr
    assert "could not be sent" not in proc.stderr, proc.stderr
    got = client.queue(qname).batch(100).wait(False).pop()
    assert sorted(m["data"] for m in got) == [0, 1, 2, 3, 4]


def test_threads_pushing_into_one_buffer_deliver_each_message_once(embedded_broker: Any, q: Queen) -> None:
    qb = q.queue("many").buffer(50, 20, max_messages=200)  # small bound: pushers also wait for room
    start = threading.Barrier(8)

    def push(k: int) -> None:
        start.wait()
        for i in range(150):
            qb.push({"data": [k, i]})

    threads = [threading.Thread(target=push, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert q.flush_all_buffers(10000) == 0
    got = data_of(embedded_broker, "many")
    assert sorted(map(tuple, got)) == [(k, i) for k in range(8) for i in range(150)]
    for k in range(8):  # one thread's pushes keep their order
        assert [i for kk, i in got if kk == k] == list(range(150))
    st = q.get_buffer_stats()["buffers"]["many/Default"]
    assert st["pushed"] == st["delivered"] == 1200 and st["unsent"] == 0


def test_buffer_lock_taken_without_blocking_is_still_exclusive() -> None:
    from queen_sync.producer import _buffer

    lock, counter = threading.Lock(), [0]
    start = threading.Barrier(8)

    def bump() -> None:
        start.wait()
        for _ in range(500):
            _buffer._take(lock)
            try:
                seen = counter[0]
                _buffer._yield()  # hand the GIL over inside: a second holder would lose updates
                counter[0] = seen + 1
            finally:
                lock.release()

    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter[0] == 4000


def test_partition_default_and_no_partition_share_one_buffer(embedded_broker: Any, q: Queen) -> None:
    # two buffers keyed None and "Default" sent to the same broker partition: 2 was stored
    # before 1, other settings were not refused, and the stats key "o/Default" showed one of them
    q.queue("o").buffer(100, 600000).push({"data": 1})
    with pytest.raises(InvalidInputError, match="already open with other settings"):
        q.queue("o").partition("Default").buffer(5, 600000).push({"data": "x"})
    q.queue("o").partition("Default").buffer(100, 600000).push({"data": 2})
    st = q.get_buffer_stats()
    assert st["activeBuffers"] == 1 and st["totalBufferedMessages"] == 2
    assert q.queue("o").partition("Default").flush(timeout_millis=5000) == 0  # flushes both pushes
    assert data_of(embedded_broker, "o") == [1, 2]
