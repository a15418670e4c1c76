"""``manage.py queen_consume`` prints its summary only once the consumer has fully stopped:
after a stop, handlers still running past the drain timeout are awaited, and the acks and
releases they lead to are in the printed counts."""

from __future__ import annotations

import io
import os
import signal
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator, List

import pytest

#: signals sent to this very process (handled in its main thread): run outside pytest-xdist
#: workers, whose main thread serves the controller (README test command, ``-m main_thread``)
pytestmark = pytest.mark.main_thread

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from queen_sync import Queen  # noqa: E402
from queen_sync.consumer import _consumers_of  # noqa: E402

from _helpers import django_example_project  # noqa: E402



@pytest.fixture(scope="module", autouse=True)
def django_project(broker_url: str) -> Iterator[None]:
    """Django configured in-process like the example project (as in test_contrib_django)."""
    yield from django_example_project(broker_url)


HANDLER = """
import threading
STARTED = threading.Event()
GATE = threading.Event()
SEEN = []

def handle(message):
    SEEN.append(message["data"])
    STARTED.set()
    if not GATE.wait(30):
        raise RuntimeError("gate never opened")
"""


def test_summary_counts_what_happened_after_the_drain_timeout(
    client: Queen, qname: str, unique_name: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from queen_sync.contrib.django import get_client

    monkeypatch.syspath_prepend(str(tmp_path))
    mod = "slow_%s" % unique_name("h").replace("-", "_")
    (tmp_path / ("%s.py" % mod)).write_text(textwrap.dedent(HANDLER))
    group = unique_name("g")
    client.queue(qname).create()
    client.queue(qname).partition("p").push([{"data": i} for i in range(4)])
    errors: List[BaseException] = []

    def stopper() -> None:
        # SIGTERM once the first handler runs; let it return only after the stop phase is
        # over (drain timeout passed, messages 1..3 still queued behind it in its partition)
        try:
            module = sys.modules.get(mod)
            # imported by the command: in sys.modules from the start of its import, so wait
            # for its last definition (STARTED and GATE exist once handle does)
            while module is None or not hasattr(module, "handle"):
                threading.Event().wait(0.01)
                module = sys.modules.get(mod)
            assert module.STARTED.wait(20)
            consumers = _consumers_of(get_client()._session)
            assert len(consumers) == 1
            os.kill(os.getpid(), signal.SIGTERM)
            assert consumers[0]._finished.wait(20)
            module.GATE.set()
        except BaseException as exc:  # reported by the test body
            errors.append(exc)
            gate = getattr(sys.modules.get(mod), "GATE", None)
            if gate is not None:
                gate.set()

    t = threading.Thread(target=stopper, daemon=True)
    t.start()
    out = io.StringIO()
    call_command(
        "queen_consume", "%s.handle" % mod, "--queue", qname, "--group", group, "--batch", "4", "--each",
        "--drain-timeout-millis", "200", "--idle-millis", "20000", stdout=out,
    )
    t.join(10)
    assert errors == []
    assert sys.modules[mod].SEEN == [0]
    line = out.getvalue().strip()
    # message 0 was acked after the drain timeout; 1..3 were released once its handler returned
    assert "handled=1 acked=1 failed=0 released=3 ack_failures=0 reason=signal" in line, line
    with Queen(client.urls) as other:  # released: the group gets them at once
        got = other.queue(qname).group(group).batch(10).pop()
        assert [m["data"] for m in got] == [1, 2, 3]
