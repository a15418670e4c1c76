"""In a uWSGI master that forks workers without Python's fork hooks, nothing may start a
thread: a consumer or stream runner started there is refused with a clear error (a running
thread at that fork would hang the workers), before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from queen_sync import InvalidInputError, Stream, _fork


def test_consume_and_stream_run_refused_in_the_uwsgi_master(queen: Any, queen_queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    queen.queue(queen_queue).push({"data": 1})
    monkeypatch.setattr(_fork, "uwsgi_prefork", lambda: True)
    with pytest.raises(InvalidInputError, match="uWSGI master"):
        queen.queue(queen_queue).group("g").consume(lambda m: None, background=True)
    with pytest.raises(InvalidInputError, match="uWSGI master"):
        queen.queue(queen_queue).group("g").limit(1).consume(lambda m: None)
    with pytest.raises(InvalidInputError, match="uWSGI master"):
        Stream.from_(queen.queue(queen_queue)).map(lambda v: v).foreach(lambda v: None).run("uwsgi-master-q")
    monkeypatch.setattr(_fork, "uwsgi_prefork", lambda: False)
    # nothing was consumed: the message is still there for a worker
    assert [m["data"] for m in queen.queue(queen_queue).group("g").batch(5).pop()] == [1]
