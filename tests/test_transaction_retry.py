"""Retrying a transaction commit whose reply was lost, on the same builder: the same body
(same client-minted push transactionIds) is resent, so a commit that had landed is refused
as a duplicate and rolled back (``TransactionError.maybe_committed``), and one that had not
landed commits normally. Downstream holds exactly one copy; the ack is applied once."""

from __future__ import annotations

import socket
from typing import Any, Dict, List, Tuple

import pytest

from queen_sync import InvalidInputError, Queen, QueenConnectionError, QueenHTTPError, TransactionError
from queen_sync.transport import Backoff, NoBackoff

TX = "/api/v1/transaction"


class RecordingBackoff(Backoff):
    def __init__(self) -> None:
        self.calls: List[int] = []

    def compute(self, failures: int) -> float:
        self.calls.append(failures)
        return 0.0


def _setup(q: Queen, n: int = 3, batch: int = 1) -> Tuple[List[Dict[str, Any]], str]:
    """Push ``n`` messages to src/p, pop ``batch`` of them with group g (one lease)."""
    q.queue("src").create()
    q.queue("dst").create()
    q.queue("src").partition("p").push([{"data": {"k": k}} for k in range(n)])
    msgs = q.queue("src").group("g").batch(batch).wait(False).pop()
    assert [m["data"]["k"] for m in msgs] == list(range(batch))
    return msgs, msgs[0]["leaseId"]


def _dst(broker: Any) -> List[Any]:
    return [m["data"] for m in broker.messages("dst")]


def _next_keys(q: Queen) -> List[int]:
    return [m["data"]["k"] for m in q.queue("src").group("g").batch(1).wait(False).pop()]


def test_lost_reply_of_landed_commit_retry_is_duplicate(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=3, batch=2)  # one lease covers k=0 and k=1
        tx = q.transaction().queue("dst").partition("p").push([{"data": "out-0"}]).ack(msgs[0], "completed")
        minted = tx.operations[0]["items"][0]["transactionId"]
        embedded_broker.faults.add("POST", TX, "drop_after", times=1)
        with pytest.raises(QueenConnectionError) as first:
            tx.commit()
        assert first.value.sent is not False
        assert "outcome unknown" in repr(tx)
        with pytest.raises(InvalidInputError, match="already sent"):
            tx.queue("dst").push({"data": "late"})  # the body is frozen once sent
        with pytest.raises(TransactionError) as retry:
            tx.commit()
        exc = retry.value
        assert exc.maybe_committed is True
        assert "most likely committed" in str(exc)
        assert "messages_partition_transaction_unique" in (exc.error or "")
        assert embedded_broker.request_count("POST", TX) == 2
        # exactly one downstream copy, carrying the id minted when the push was added
        out = embedded_broker.messages("dst")
        assert [m["data"] for m in out] == ["out-0"] and out[0]["transactionId"] == minted
        # the retry was rolled back as a whole: k=1 is still leased (no early release) ...
        assert _next_keys(q) == []
        q.ack(msgs[1], True)  # ... and its lease is still valid
        # ... and k=0 was acked once: the group's next message is k=2
        assert _next_keys(q) == [2]
        with pytest.raises(InvalidInputError, match="already committed"):
            tx.commit()
        assert embedded_broker.request_count("POST", TX) == 2


def test_lost_request_retry_commits_normally(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().queue("dst").partition("p").push([{"data": "out-0"}]).ack(msgs[0], "completed")
        minted = tx.operations[0]["items"][0]["transactionId"]
        embedded_broker.faults.add("POST", TX, "drop_before", times=1)
        with pytest.raises(QueenConnectionError):
            tx.commit()
        assert _dst(embedded_broker) == []  # nothing landed
        res = tx.commit()
        assert res["success"] is True
        assert [r["type"] for r in res["results"]] == ["push", "ack"]
        assert res["results"][0]["transactionId"] == minted
        out = embedded_broker.messages("dst")
        assert [m["data"] for m in out] == ["out-0"] and out[0]["transactionId"] == minted
        assert _next_keys(q) == [1]
        with pytest.raises(InvalidInputError, match="already committed"):
            tx.commit()


@pytest.mark.parametrize("fault", ["drop_after", "drop_before"])
def test_commit_retries_resends_same_body(embedded_broker: Any, fault: str) -> None:
    backoff = RecordingBackoff()
    with Queen(embedded_broker.url, backoff=backoff) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().queue("dst").partition("p").push([{"data": "out-0"}]).ack(msgs[0], "completed")
        embedded_broker.faults.add("POST", TX, fault, times=2)
        if fault == "drop_after":
            with pytest.raises(TransactionError) as ei:
                tx.commit(retries=3)
            assert ei.value.maybe_committed is True
        else:
            assert tx.commit(retries=3)["success"] is True
        assert embedded_broker.request_count("POST", TX) == 3
        assert backoff.calls == [0, 1]  # the client's backoff paced both resends
        assert _dst(embedded_broker) == ["out-0"]
        assert _next_keys(q) == [1]


def test_commit_retries_gives_up_with_the_connection_error(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().queue("dst").push([{"data": "out"}]).ack(msgs[0])
        embedded_broker.faults.add("POST", TX, "drop_before", times=3)
        with pytest.raises(QueenConnectionError):
            tx.commit(retries=2)
        assert embedded_broker.request_count("POST", TX) == 3
        assert tx.commit()["success"] is True  # still retryable by hand
        assert _dst(embedded_broker) == ["out"]
        with pytest.raises(InvalidInputError):
            tx.commit(retries=-1)


def test_ack_first_transaction_retry_after_landed_commit(embedded_broker: Any) -> None:
    # the ack runs first in the retry and finds its lease released by the lost commit
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().ack(msgs[0], "completed").queue("dst").partition("p").push([{"data": "out-0"}])
        embedded_broker.faults.add("POST", TX, "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            tx.commit()
        with pytest.raises(TransactionError) as ei:
            tx.commit()
        assert ei.value.maybe_committed is True
        assert "Invalid or expired lease" in (ei.value.error or "")
        assert _dst(embedded_broker) == ["out-0"]
        assert _next_keys(q) == [1]


def test_retry_refused_with_proof_that_nothing_landed(embedded_broker: Any) -> None:
    # the first attempt was lost before the broker; meanwhile the message was acked
    # elsewhere: the retry's push succeeds before its ack fails, which proves the first
    # attempt had not landed, so maybe_committed is False
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().queue("dst").push([{"data": "out-0"}]).ack(msgs[0], "completed")
        embedded_broker.faults.add("POST", TX, "drop_before", times=1)
        with pytest.raises(QueenConnectionError):
            tx.commit()
        q.ack(msgs[0], True)
        with pytest.raises(TransactionError) as ei:
            tx.commit()
        assert ei.value.maybe_committed is False
        assert "rolled back" in str(ei.value)
        assert _dst(embedded_broker) == []
        with pytest.raises(InvalidInputError, match="rejected"):
            tx.commit()


def test_certain_outcomes_refuse_a_second_commit(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().queue("dst").push([{"data": "a"}])
        assert tx.commit()["success"] is True
        with pytest.raises(InvalidInputError, match="already committed"):
            tx.commit()
        with pytest.raises(InvalidInputError, match="already committed"):
            tx.ack(msgs[0])
        fake = dict(msgs[0], transactionId="no-such-message")
        bad = q.transaction().queue("dst").push([{"data": "b"}]).ack(fake, "completed", {"group": "g"})
        with pytest.raises(TransactionError) as ei:
            bad.commit(retries=3)  # a rejection is never retried
        assert ei.value.maybe_committed is False
        with pytest.raises(InvalidInputError, match="rejected"):
            bad.commit()
        assert embedded_broker.request_count("POST", TX) == 2
        assert _dst(embedded_broker) == ["a"]


def test_user_duplicate_id_without_lost_reply_is_plain_rejection(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url) as q:
        q.queue("dst").create()
        q.transaction().queue("dst").push([{"data": 1, "transactionId": "mine-1"}]).commit()
        with pytest.raises(TransactionError) as ei:
            q.transaction().queue("dst").push([{"data": 2, "transactionId": "mine-1"}]).commit()
        assert ei.value.maybe_committed is False
        assert _dst(embedded_broker) == [1]


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_reply_leaves_the_commit_retryable(embedded_broker: Any, status: int) -> None:
    with Queen(embedded_broker.url, retry_attempts=1, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q)
        tx = q.transaction().queue("dst").push([{"data": "out"}]).ack(msgs[0])
        embedded_broker.faults.add("POST", TX, "status", status=status, times=1)
        with pytest.raises(QueenHTTPError) as ei:
            tx.commit()
        assert ei.value.status == status
        assert tx.commit()["success"] is True
        assert _dst(embedded_broker) == ["out"]
        assert _next_keys(q) == [1]


def test_unsent_commit_can_be_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed below: nothing listens there
    with Queen("http://127.0.0.1:%d" % port, retry_attempts=1, backoff=NoBackoff()) as q:
        msg = {"transactionId": "t", "partitionId": "p", "leaseId": "l", "consumerGroup": "g"}
        tx = q.transaction().queue("dst").push([{"data": 1}]).ack(msg)
        for _ in range(2):
            with pytest.raises(QueenConnectionError) as ei:
                tx.commit()
            assert ei.value.sent is False
        assert "outcome unknown" not in repr(tx)


def _dlq_keys(broker: Any) -> List[Any]:
    return [r["data"]["k"] for r in broker.dlq("src")]


@pytest.mark.parametrize("status", ["failed", "dlq"])
def test_lost_reply_of_a_dead_letter_only_transaction_is_not_resent(embedded_broker: Any, status: str) -> None:
    # no push in it, so a resend could not be told from a first send: the lease of a
    # 2-message pop is still held after the first copy dead-lettered k=0, so a second copy
    # would dead-letter k=0 again. commit() refuses to resend and says maybe_committed.
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=3, batch=2)
        tx = q.transaction().ack(msgs[0], status, {"error": "bad"})
        embedded_broker.faults.add("POST", TX, "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            tx.commit()
        assert _dlq_keys(embedded_broker) == [0]  # the lost attempt landed
        with pytest.raises(TransactionError) as ei:
            tx.commit()
        exc = ei.value
        assert exc.maybe_committed is True
        assert "not resent" in str(exc) and "dead-letter" in str(exc)
        assert embedded_broker.request_count("POST", TX) == 1  # nothing sent again
        assert _dlq_keys(embedded_broker) == [0]  # dead-lettered once
        with pytest.raises(InvalidInputError, match="already committed"):
            tx.commit()
        # the acked message counts as settled (a consumer's auto-ack leaves it alone)
        from queen_sync.message import settled_status

        assert settled_status(msgs[0]) == status
        q.ack(msgs[1], True)  # the pop's lease was neither released nor lost
        assert _next_keys(q) == [2]


def test_commit_retries_do_not_resend_a_dead_letter_only_transaction(embedded_broker: Any) -> None:
    backoff = RecordingBackoff()
    with Queen(embedded_broker.url, backoff=backoff) as q:
        msgs, _ = _setup(q, n=4, batch=3)  # the lease outlives one ack (and a resent one)
        tx = q.transaction().ack(msgs[0], "failed")
        embedded_broker.faults.add("POST", TX, "drop_after", times=1)
        with pytest.raises(TransactionError) as ei:
            tx.commit(retries=3)
        assert ei.value.maybe_committed is True
        assert isinstance(ei.value.__cause__, QueenConnectionError)
        assert embedded_broker.request_count("POST", TX) == 1
        assert backoff.calls == []  # no resend was paced
        assert _dlq_keys(embedded_broker) == [0]
        q.ack(msgs[1:], True)
        assert _next_keys(q) == [3]


def test_dead_letter_only_transaction_resent_when_the_first_copy_surely_failed(embedded_broker: Any) -> None:
    # a 503 or 429 reply says the broker processed nothing: the same body is sent again
    with Queen(embedded_broker.url, retry_attempts=1, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=3, batch=2)
        tx = q.transaction().ack(msgs[0], "failed")
        for status in (503, 429):
            embedded_broker.faults.add("POST", TX, "status", status=status, times=1)
            with pytest.raises(QueenHTTPError):
                tx.commit()
        assert tx.commit()["results"][0]["dlq"] is True
        assert embedded_broker.request_count("POST", TX) == 3
        assert _dlq_keys(embedded_broker) == [0]


def test_unreadable_reply_of_a_dead_letter_only_transaction_is_not_resent(embedded_broker: Any) -> None:
    from queen_sync import ProtocolError

    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=3, batch=2)
        tx = q.transaction().ack(msgs[0], "dlq")
        # a 200 the client cannot read: it may have been applied (here it was not)
        embedded_broker.faults.add("POST", TX, "status", status=200, body=["garbled"], times=1)
        with pytest.raises(ProtocolError):
            tx.commit()
        with pytest.raises(TransactionError) as ei:
            tx.commit()
        assert ei.value.maybe_committed is True
        assert embedded_broker.request_count("POST", TX) == 1
        assert _dlq_keys(embedded_broker) == []  # not resent: the lease's expiry redelivers k=0


def test_lost_reply_of_a_completed_ack_only_transaction_is_not_resent(embedded_broker: Any) -> None:
    # acks only, status completed: with a 3-message pop the lease outlives the first copy,
    # so a resend would count k=0's ack twice toward the pop's batch and release the lease
    # before k=2 is acked (its ack refused, k=2 redelivered). commit() sends nothing again.
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=4, batch=3)
        tx = q.transaction().ack(msgs[0], "completed")
        embedded_broker.faults.add("POST", TX, "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            tx.commit()
        with pytest.raises(TransactionError) as ei:
            tx.commit()
        exc = ei.value
        assert exc.maybe_committed is True and exc.result is None
        assert "not resent" in str(exc) and "completed ack" in str(exc) and "twice" in str(exc)
        assert embedded_broker.request_count("POST", TX) == 1  # nothing sent again
        with pytest.raises(InvalidInputError, match="already committed"):
            tx.commit()
        from queen_sync.message import settled_status

        assert settled_status(msgs[0]) == "completed"
        # the pop's lease is still held for the other two: both acks land, then k=3 comes
        assert q.ack(msgs[1], True)["leaseReleased"] is False
        assert q.ack(msgs[2], True)["leaseReleased"] is True
        assert _next_keys(q) == [3]
        assert _dlq_keys(embedded_broker) == []


def test_commit_retries_do_not_resend_a_completed_ack_only_transaction(embedded_broker: Any) -> None:
    backoff = RecordingBackoff()
    with Queen(embedded_broker.url, backoff=backoff) as q:
        msgs, _ = _setup(q, n=4, batch=3)
        tx = q.transaction().ack(msgs[:2], "completed")
        embedded_broker.faults.add("POST", TX, "status", status=500, times=1)  # maybe applied
        with pytest.raises(TransactionError) as ei:
            tx.commit(retries=3)
        assert ei.value.maybe_committed is True
        assert isinstance(ei.value.__cause__, QueenHTTPError)
        assert embedded_broker.request_count("POST", TX) == 1 and backoff.calls == []
        # (this 500 was not applied: the pop's lease is untouched, the third ack still lands)
        res = q.ack(msgs[2], True)
        assert res["success"] is True and res["leaseReleased"] is False


def test_completed_ack_only_transaction_resent_when_the_first_copy_surely_failed(embedded_broker: Any) -> None:
    with Queen(embedded_broker.url, retry_attempts=1, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=4, batch=3)
        tx = q.transaction().ack(msgs[0], "completed")
        for status in (503, 429):  # refused: the broker processed nothing
            embedded_broker.faults.add("POST", TX, "status", status=status, times=1)
            with pytest.raises(QueenHTTPError):
                tx.commit()
        assert tx.commit()["results"][0]["success"] is True
        assert embedded_broker.request_count("POST", TX) == 3
        assert q.ack(msgs[1:], True)[1]["leaseReleased"] is True
        assert _next_keys(q) == [3]


def test_a_push_makes_an_ack_transaction_safe_to_resend(embedded_broker: Any) -> None:
    # the same acks with a push: the resend is refused for its duplicate push id, nothing twice
    with Queen(embedded_broker.url, backoff=NoBackoff()) as q:
        msgs, _ = _setup(q, n=4, batch=3)
        tx = q.transaction().queue("dst").push([{"data": "out"}]).ack(msgs[0], "completed")
        embedded_broker.faults.add("POST", TX, "drop_after", times=1)
        with pytest.raises(QueenConnectionError):
            tx.commit()
        with pytest.raises(TransactionError) as ei:
            tx.commit()
        assert ei.value.maybe_committed is True and "most likely committed" in str(ei.value)
        assert embedded_broker.request_count("POST", TX) == 2
        assert q.ack(msgs[1], True)["leaseReleased"] is False  # counted once
        assert q.ack(msgs[2], True)["leaseReleased"] is True
        assert _dst(embedded_broker) == ["out"]
