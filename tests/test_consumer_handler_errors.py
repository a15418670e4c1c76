"""A failing handler is visible at WARNING (with its traceback), without payloads."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import pytest

from queen_sync import InvalidInputError, Queen


class _HandlerBoom(RuntimeError):
    pass


def test_handler_failure_is_logged_at_warning_with_traceback(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync")
    res = client.queue(qname).partition("pa").push({"data": {"card": "PAYLOAD-SECRET-4242"}})
    txid = res[0]["transaction_id"]

    def handler(m: Dict[str, Any]) -> None:
        raise _HandlerBoom("handler refused it")

    out = client.queue(qname).group("g").limit(1).idle_millis(5000).consume(handler)
    assert (out.handled, out.failed, out.nacked) == (1, 1, 1)
    recs = [r for r in caplog.records if r.name == "queen_sync.consumer" and r.exc_info]
    assert len(recs) == 1
    rec = recs[0]
    assert rec.levelno == logging.WARNING
    assert rec.exc_info[0] is _HandlerBoom  # the traceback goes with it
    text = rec.getMessage()
    assert qname in text and "pa" in text and txid in text
    assert "PAYLOAD-SECRET-4242" not in caplog.text  # never the payload


def test_handler_failure_without_auto_ack_is_logged_and_reraised(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync")
    client.queue(qname).push({"data": "x"})
    seen: List[Any] = []

    def handler(m: Dict[str, Any]) -> None:
        seen.append(m)
        raise _HandlerBoom("no")

    consumer = client.queue(qname).group("g").auto_ack(False).consume(handler, background=True)
    with pytest.raises(_HandlerBoom):
        consumer.join(15)
    assert len(seen) == 1 and consumer.reason == "error"
    recs = [r for r in caplog.records if r.name == "queen_sync.consumer" and r.exc_info]
    assert [r.levelno for r in recs] == [logging.WARNING]
    assert recs[0].exc_info[1] is consumer.error


class _CallbackBoom(RuntimeError):
    pass


@pytest.mark.parametrize("on_error", [False, True], ids=["no-on_error", "on_error"])
def test_an_on_success_failure_is_logged_as_the_callbacks_not_the_handlers(
    client: Queen, qname: str, on_error: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """With auto_ack(True) the message is still nacked after it (documented); the WARNING
    says the on_success callback raised, not the handler (which returned)."""
    caplog.set_level(logging.INFO, logger="queen_sync")
    client.queue(qname).config({"retry_limit": 0}).create()
    res = client.queue(qname).partition("pa").push({"data": "x"})
    txid = res[0]["transaction_id"]
    handled: List[Any] = []
    errors: List[BaseException] = []

    def on_success(m: Any, result: Any) -> None:
        raise _CallbackBoom("callback refused it")

    b = client.queue(qname).group("g").auto_ack(True).on_success(on_success).limit(1).idle_millis(5000)
    if on_error:
        b = b.on_error(lambda m, exc: errors.append(exc))
    out = b.consume(handled.append)
    assert (len(handled), out.failed, out.nacked) == (1, 1, 1)
    assert [type(e) for e in errors] == ([_CallbackBoom] if on_error else [])
    recs = [r for r in caplog.records if r.name == "queen_sync.consumer" and r.exc_info]
    assert len(recs) == 1 and recs[0].levelno == logging.WARNING and recs[0].exc_info[0] is _CallbackBoom
    text = recs[0].getMessage()
    assert text.startswith("on_success callback raised _CallbackBoom on 1 message(s) of queue %r" % qname), text
    assert txid in text and "handler raised" not in text
    assert [m["data"] for m in client.queue(qname).dlq("g").get()] == ["x"]  # nacked: retry_limit 0


def test_a_handler_failure_with_on_success_set_still_names_the_handler(
    client: Queen, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="queen_sync")
    client.queue(qname).push({"data": "x"})
    called: List[Any] = []

    def handler(m: Any) -> None:
        raise _HandlerBoom("no")

    out = (client.queue(qname).group("g").auto_ack(True).on_success(lambda m, r: called.append(m))
           .limit(1).idle_millis(5000).consume(handler))
    assert out.failed == 1 and called == []
    (rec,) = [r for r in caplog.records if r.name == "queen_sync.consumer" and r.exc_info]
    assert rec.getMessage().startswith("handler raised _HandlerBoom on 1 message(s)")


@pytest.mark.parametrize("each", [True, False], ids=["each", "batch"])
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_handler_raising_systemexit_gives_its_unhandled_messages_back(
    client: Queen, qname: str, each: bool, exc_type: type, caplog: pytest.LogCaptureFixture
) -> None:
    """SystemExit / KeyboardInterrupt from a handler end consume() with that exception; the
    messages not handled yet (this call's and the rest of the pop) go back to the broker at
    once: the group gets them again now, not when their lease (300 s) expires. It is logged as
    a stop (one WARNING naming it), not as a thread failure (an ERROR with a traceback)."""
    caplog.set_level(logging.INFO, logger="queen_sync")
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    seen: List[Any] = []

    def handler(arg: Any) -> None:
        ms = [arg] if each else arg
        seen.extend(m["data"] for m in ms)
        if each and arg["data"] == 1 or not each:
            raise exc_type(3)

    b = client.queue(qname).group("se").batch(10).idle_millis(5000)
    with pytest.raises(exc_type):
        (b.each() if each else b).consume(handler)
    again = client.queue(qname).group("se").batch(10).wait(False).pop()
    expected = [1, 2] if each else [0, 1, 2]
    assert sorted(m["data"] for m in again) == expected
    assert seen == ([0, 1] if each else [0, 1, 2])
    recs = [r for r in caplog.records if r.name.startswith("queen_sync") and r.levelno >= logging.WARNING]
    assert [(r.levelno, r.exc_info) for r in recs] == [(logging.WARNING, None)], [r.getMessage() for r in recs]
    assert "a handler raised %s(3)" % exc_type.__name__ in recs[0].getMessage()


class _TwoArgs:
    def __call__(self, message: Any, context: Any) -> None:
        pass


@pytest.mark.parametrize(
    "handler",
    [lambda m, ctx: None, lambda: None, _TwoArgs(), lambda m, *, ctx: None],
    ids=["two-args", "no-arg", "callable-object", "required-keyword"],
)
def test_a_handler_that_cannot_take_the_message_is_refused_before_any_pop(client: Queen, qname: str, handler: Any) -> None:
    """It raised TypeError on every message: each nacked, the backlog into the DLQ."""
    client.queue(qname).push({"data": {"important": 1}})
    with pytest.raises(InvalidInputError, match=r"consume\(\) handler .* 1 positional argument"):
        client.queue(qname).group("g").each().idle_millis(1000).consume(handler)
    popped = client.queue(qname).group("g").pop()
    assert [m["data"] for m in popped] == [{"important": 1}]  # never popped, never nacked


@pytest.mark.parametrize("handler", [lambda m, ctx=None: None, lambda *args: None, id], ids=["default", "varargs", "builtin"])
def test_a_handler_taking_one_argument_some_way_is_accepted(client: Queen, qname: str, handler: Any) -> None:
    client.queue(qname).push({"data": 1})
    out = client.queue(qname).group("g").each().limit(1).idle_millis(5000).consume(handler)
    assert (out.handled, out.acked) == (1, 1)


@pytest.mark.parametrize("setter", ["on_success", "on_error"])
def test_a_callback_that_cannot_take_two_arguments_is_refused(client: Queen, qname: str, setter: str) -> None:
    with pytest.raises(InvalidInputError, match=r"%s\(\) callback .* 2 positional arguments" % setter):
        getattr(client.queue(qname), setter)(lambda m: None)
    with pytest.raises(InvalidInputError, match=r"%s\(\) callback" % setter):
        getattr(client.queue(qname), setter)("not callable")
