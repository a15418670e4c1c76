"""Queen(...) construction: URLs, QUEEN_URL, options, repr, close, threads."""

from __future__ import annotations

import threading
from typing import Any, List

import pytest

from queen_sync import ClientClosedError, InvalidInputError, Queen


def test_url_forms() -> None:
    assert Queen("http://a:6632").urls == ["http://a:6632"]
    assert Queen(url="http://a:6632/").urls == ["http://a:6632"]
    assert Queen(["http://a:6632", "https://b:6632/"]).urls == ["http://a:6632", "https://b:6632"]
    assert Queen(urls=["http://a:6632"]).urls == ["http://a:6632"]
    assert Queen("http://a:6632/prefix/").urls == ["http://a:6632/prefix"]


def test_queen_url_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUEEN_URL", "http://a:6632/, http://b:6632")
    assert Queen().urls == ["http://a:6632", "http://b:6632"]
    monkeypatch.setenv("QUEEN_URL", "http://c:1")
    assert Queen().urls == ["http://c:1"]
    assert Queen("http://explicit:1").urls == ["http://explicit:1"]


def test_no_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUEEN_URL", raising=False)
    with pytest.raises(InvalidInputError):
        Queen()
    with pytest.raises(InvalidInputError):
        Queen(urls=[])


@pytest.mark.parametrize(
    "bad",
    ["ftp://a:1", "a:6632", "localhost", "http://", "http://a:notaport", "http://u:p@a:1", "http://a:1/?x=1", "", 5],
)
def test_bad_urls(bad: Any) -> None:
    with pytest.raises(InvalidInputError):
        Queen(bad)


def test_both_url_and_urls() -> None:
    with pytest.raises(InvalidInputError):
        Queen("http://a:1", urls=["http://b:1"])


@pytest.mark.parametrize(
    "kw",
    [{"timeout_millis": 0}, {"retry_attempts": 0}, {"retry_delay_millis": -1}, {"timeout_millis": "5"}, {"headers": "x"}],
)
def test_bad_options(kw: Any) -> None:
    with pytest.raises(InvalidInputError):
        Queen("http://a:1", **kw)


def test_repr_hides_token() -> None:
    q = Queen("http://a:6632", bearer_token="top-secret", headers={"Authorization": "Bearer other-secret"})
    r = repr(q)
    assert "http://a:6632" in r
    assert "secret" not in r
    q.close()
    assert "closed" in repr(q)


def test_queue_builder_repr_shows_the_buffer_settings() -> None:
    with Queen("http://a:6632", bearer_token="top-secret") as q:
        assert repr(q.queue("s")) == "QueueBuilder(queue='s')"
        b = q.queue("s").partition("p").buffer(10, 10)
        assert repr(b) == ("QueueBuilder(queue='s', partition='p', buffer(message_count=10, time_millis=10, "
                           "max_bytes=1048576, max_messages=10000, block_timeout_millis=10000))")
        assert repr(q.queue("s").buffer(5, 200, max_bytes=4096, max_messages=50, block_timeout_millis=0)).endswith(
            "buffer(message_count=5, time_millis=200, max_bytes=4096, max_messages=50, block_timeout_millis=0))")
        assert "secret" not in repr(b) and "6632" not in repr(b)
        assert repr(q) == "Queen(urls=['http://a:6632'], timeout_millis=30000)"
    assert repr(q) == "Queen(urls=['http://a:6632'], timeout_millis=30000, closed)"


def test_close_idempotent_and_context_manager() -> None:
    with Queen("http://a:6632") as q:
        assert not q.closed
    assert q.closed
    q.close()
    q.close()
    with pytest.raises(ClientClosedError):
        q.queue("orders")
    with pytest.raises(ClientClosedError):
        q.transaction()
    with pytest.raises(ClientClosedError):
        q.renew("lease-1")


def test_constructed_and_used_in_non_main_thread(broker_url: str, unique_name: Any) -> None:
    out: List[Any] = []

    def work() -> None:
        try:
            with Queen(broker_url) as q:
                name = unique_name("thread")
                try:
                    out.append(q.queue(name).push({"data": "hi"})[0]["status"])
                    out.append(q.queue(name).wait(True).timeout_millis(5000).pop()[0]["data"])
                finally:
                    q.queue(name).delete()
        except BaseException as exc:  # pragma: no cover - reported below
            out.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    assert out == ["queued", "hi"]
