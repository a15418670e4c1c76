"""The embedded broker in a forked child (issue 11, item 9): leaving ``with EmbeddedBroker():``
in the child returns at once (no serve thread exists there for ``socketserver.shutdown()`` to
wait for), and the parent's broker keeps serving, its open keep-alive connections included."""

from __future__ import annotations

import os
import time

import pytest

from queen_sync.testing import EmbeddedBroker

from _broker_http import RawHTTP, unique
from _helpers import run_forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


def test_leaving_the_context_in_a_forked_child_is_immediate_and_parent_keeps_serving() -> None:
    q = unique("fork")
    with EmbeddedBroker() as broker:
        http = RawHTTP(broker.url)
        http.push(q, [1], partition="p")  # leaves a keep-alive connection open across the fork

        def child() -> bool:
            t0 = time.monotonic()
            broker.__exit__(None, None, None)  # what leaving the `with` block runs
            return not broker.running and time.monotonic() - t0 < 2.0

        assert run_forked(child, timeout=10.0) == 0  # -9 = hung and killed
        # the parent's broker is untouched: same connection, same state, still serving
        http.push(q, [2], partition="p")
        got = http.pop(q, "p", batch=5, wait=False)
        assert [m["data"] for m in got["messages"]] == [1, 2]
        assert broker.running
    assert not broker.running


def test_a_child_exits_zero_after_leaving_the_with_block() -> None:
    with EmbeddedBroker() as broker:
        def child() -> bool:
            # the child's own `with` over the inherited broker: enter is a no-op, exit releases it
            with broker:
                pass
            return True

        assert run_forked(child, timeout=10.0) == 0
        assert RawHTTP(broker.url).request("GET", "/health")[0] == 200
