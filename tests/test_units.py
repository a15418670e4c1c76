"""One unit convention (issue 13 item 3): durations are ``*_millis``; the old seconds-valued
``drain_timeout`` (``consume()``, ``Consumer``, ``Consumer.stop``, ``queen_consume
--drain-timeout``) still works for one release with a DeprecationWarning."""

from __future__ import annotations

import io
import threading
import warnings
from typing import Any, Dict, Iterator, List

import pytest

from queen_sync import Consumer, InvalidInputError, Queen
from queen_sync._validate import millis_or_deprecated_seconds


def _blocked_consumer(client: Queen, qname: str) -> "tuple[Consumer, threading.Event, threading.Event]":
    """A background consumer whose handler holds message 1 until ``gate`` is set, with
    messages 2..3 queued behind it in its partition."""
    client.queue(qname).partition("p").push([{"data": i} for i in range(3)])
    gate, started = threading.Event(), threading.Event()

    def handler(m: Dict[str, Any]) -> None:
        started.set()
        assert gate.wait(20)

    consumer = client.queue(qname).group("g").batch(3).each().consume(handler, background=True)
    assert started.wait(10)
    return consumer, gate, started


def test_the_seconds_helper_converts_and_warns_at_the_caller() -> None:
    with pytest.warns(DeprecationWarning, match="old.*deprecated.*new") as rec:
        assert millis_or_deprecated_seconds("new", None, "old", 0.25, None, stacklevel=2) == 250
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert millis_or_deprecated_seconds("new", 1500, "old", None, 7) == 1500
        assert millis_or_deprecated_seconds("new", None, "old", None, 7) == 7
    for bad in [dict(millis=1, seconds=1.0), dict(millis=-1, seconds=None), dict(millis=None, seconds=-0.5),
                dict(millis=1.5, seconds=None), dict(millis=None, seconds="1")]:
        with pytest.raises(InvalidInputError):
            millis_or_deprecated_seconds("new", bad["millis"], "old", bad["seconds"], None)


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_stop_takes_deprecated_seconds(client: Queen, unique_name: Any, how: str) -> None:
    consumer, gate, _ = _blocked_consumer(client, unique_name())
    try:
        with pytest.warns(DeprecationWarning, match="drain_timeout_millis") as rec:
            res = consumer.stop(0.2) if how == "positional" else consumer.stop(drain_timeout=0.2)
        assert rec[0].filename == __file__  # points at the caller
        # returned at a 200 ms drain (not 0.2 ms: message 1 is still in its handler)
        assert res.handled == 1 and res.acked == 0 and consumer.is_running
    finally:
        gate.set()
    assert consumer.join(10)
    assert (consumer.result.acked, consumer.result.released) == (1, 2)


def test_stop_takes_millis_without_warning(client: Queen, unique_name: Any) -> None:
    consumer, gate, _ = _blocked_consumer(client, unique_name())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            res = consumer.stop(drain_timeout_millis=200)
        assert res.handled == 1 and consumer.is_running
    finally:
        gate.set()
    assert consumer.join(10)
    assert (consumer.result.acked, consumer.result.released) == (1, 2)


def test_consume_takes_millis_and_deprecated_seconds(client: Queen, unique_name: Any) -> None:
    q = client.queue(unique_name()).group("g").idle_millis(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert q.consume(lambda m: None, drain_timeout_millis=500).reason == "idle"
    with pytest.warns(DeprecationWarning, match="drain_timeout") as rec:
        assert q.consume(lambda m: None, drain_timeout=0.5).reason == "idle"
    assert rec[0].filename == __file__
    with pytest.raises(InvalidInputError):
        q.consume(lambda m: None, drain_timeout_millis=500, drain_timeout=0.5)
    with pytest.raises(InvalidInputError):
        q.consume(lambda m: None, drain_timeout_millis=-1)
    with pytest.raises(InvalidInputError):
        q.consume(lambda m: None, drain_timeout=-1)


def test_consumer_constructor_takes_deprecated_seconds(client: Queen, unique_name: Any) -> None:
    builder = client.queue(unique_name()).group("g").idle_millis(100)
    with pytest.warns(DeprecationWarning, match="drain_timeout"):
        c = Consumer(client, builder._consume_settings(), lambda m: None, drain_timeout=1)
    assert c._st.drain_timeout == 1.0  # seconds inside
    c2 = Consumer(client, builder._consume_settings(), lambda m: None, drain_timeout_millis=1500)
    assert c2._st.drain_timeout == 1.5
    assert Consumer(client, builder._consume_settings(), lambda m: None)._st.drain_timeout == 30.0


def test_the_consumer_takes_the_builders_settings_not_the_builder(client: Queen, unique_name: Any) -> None:
    def on_success(m: Any, r: Any) -> None:
        pass

    builder = (
        client.queue(unique_name()).group("g").batch(5).each().limit(3).idle_millis(100).concurrency(2)
        .renew_lease(True, 2000).on_success(on_success)
    )
    s = builder._consume_settings()
    assert s.spec == builder.pop_spec(for_consume=True) and s.spec.wait is True and s.spec.batch == 5
    assert (s.each, s.auto_ack, s.on_success, s.on_error, s.renew_interval_millis, s.limit, s.idle_millis,
            s.concurrency) == (True, None, on_success, None, 2000, 3, 100, 2)
    assert builder.renew_lease(False)._consume_settings().renew_interval_millis is None
    assert builder.auto_ack(True)._consume_settings().auto_ack is True
    with pytest.raises(InvalidInputError, match="consume settings a queue builder hands over"):
        Consumer(client, builder, lambda m: None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the Django command's flag


@pytest.fixture(scope="module")
def django_project(broker_url: str) -> Iterator[None]:
    pytest.importorskip("django")
    from _helpers import django_example_project

    yield from django_example_project(broker_url)


def test_queen_consume_drain_timeout_flag_is_deprecated(django_project: None, unique_name: Any) -> None:
    from django.core.management import CommandError, call_command

    out, err = io.StringIO(), io.StringIO()
    args: List[str] = ["builtins.len", "--queue", unique_name(), "--idle-millis", "100"]
    call_command("queen_consume", *args, "--drain-timeout", "0.5", stdout=out, stderr=err)
    assert "--drain-timeout (seconds) is deprecated" in err.getvalue()
    assert "reason=idle" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    call_command("queen_consume", *args, "--drain-timeout-millis", "500", stdout=out, stderr=err)
    assert "deprecated" not in err.getvalue() and "reason=idle" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("queen_consume", *args, "--drain-timeout-millis", "500", "--drain-timeout", "0.5")
    with pytest.raises(CommandError):
        call_command("queen_consume", *args, "--drain-timeout-millis", "-1")
