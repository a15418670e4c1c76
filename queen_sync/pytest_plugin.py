"""pytest plugin of queen_sync: fixtures to test code that talks to a Queen broker.

Installed with the package and found by pytest through its ``pytest11`` entry point (named
``queen_sync``; ``-p no:queen_sync`` turns it off). Fixtures:

``queen_broker`` (session)
    The broker under test, a :class:`QueenBroker`: an embedded broker
    (:class:`queen_sync.testing.EmbeddedBroker`) started once per test session, or the
    broker at ``--queen-url URL`` / ``QUEEN_URL`` (comma-separated for several; a token
    from ``QUEEN_BEARER_TOKEN``) when one is given. That real broker is checked once, when
    the fixture is first needed (see "A broker that does not answer" below).
``queen``
    A :class:`queen_sync.Queen` client on that broker, closed after the test. The test fails
    (at teardown) if a consumer or stream runner of that client is still running at its end
    (:meth:`Queen.running_consumers`): stop background consumers (``consumer.stop()``) or
    bound them (``limit`` / ``idle_millis``), stop stream runners (``runner.stop()``).
``queen_queue``
    A unique queue name (``test-<12 hex digits>``); the queue is deleted after the test
    (after the ``queen`` client's push buffers are flushed, when the test uses it too).
    Nothing is created: push to it, or ``queen.queue(queen_queue).config(...).create()``.
``queen_faults``
    The embedded broker's :class:`~queen_sync.testing.FaultInjector` (``add(...)``,
    ``clear()``; see :mod:`queen_sync.testing`), cleared before and after the test (and
    before the ``queen`` client flushes and closes, whatever the order of the test's
    arguments). The test is skipped against a real broker.

The header of the run names the broker the fixtures use, ``queen_sync: embedded broker`` or
``queen_sync: broker at URL (from --queen-url)`` / ``(from QUEEN_URL)``, so that a stale
``QUEEN_URL`` shows; user info and query of the URL are masked (``***``).

A broker that does not answer
    The first time a fixture needs a real broker, the plugin sends it one ``GET /health``
    (no retry; :data:`PROBE_TIMEOUT_MILLIS` to connect and to read, per URL). When no broker
    answers (connection refused, a timeout, a reply that is not a Queen broker's, a 5xx
    that is not its health report, as a proxy with no broker behind it sends) or the URL is
    not one the client accepts, every test that needs the broker errors at its setup with
    one message that names the URL (masked as in the header), where it came from and the
    client's error, instead of each test waiting out the client's push retry budget (15 s
    by default) and each teardown logging that its queue could not be deleted. pytest
    keeps the error of the session-scoped ``queen_broker``, so the check runs once per
    session (with pytest-xdist, once per worker: each is a session). A broker that answers passes, also when it reports itself unhealthy or
    refuses the call (401 / 403 / 404: the tests then fail on their own at once, 4xx
    replies are not retried).

    Why an error and not a skip or a usage error: as with pytest-postgresql and
    pytest-redis, whose fixtures let an unreachable server surface as errors of the tests
    that need it, a broker URL that does not answer is a misconfiguration to fix, and a
    skip would let a CI run against a stale ``QUEEN_URL`` pass green. ``pytest.UsageError``
    is for command-line mistakes found at startup; it would stop the whole session,
    including the tests that never touch a broker, and make every session pay for the
    check (it is lazy: a session that uses no fixture of the plugin sends nothing). The
    report is a pytest outcome (``pytest.fail(pytrace=False)``, as the "left running" check
    of ``queen``), not a raised QueenError, so it reads as one line instead of a traceback;
    the client's QueenError it reports is quoted in it.

The plugin is loaded by every pytest run of an environment where queen_sync is installed;
importing it costs that run the import of queen_sync (urllib3, orjson) and nothing else: no
broker starts and no client is made unless a fixture is used.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Iterator, List, NamedTuple, Optional

import pytest

from queen_sync import (
    BrokerError,
    InvalidInputError,
    ProtocolError,
    Queen,
    QueenConnectionError,
    QueenError,
    RunningConsumer,
)
from queen_sync._validate import redact_url
from queen_sync.testing import EmbeddedBroker

if TYPE_CHECKING:  # pragma: no cover
    from queen_sync.testing import FaultInjector

__all__ = ["QueenBroker", "queen_broker", "queen", "queen_queue", "queen_faults"]

log = logging.getLogger("queen_sync.pytest_plugin")

#: How long the ``queen`` fixture waits, in seconds, for the consumers of the test to end
#: before it reports them as left running (a consumer that was just stopped may still be
#: finishing its last ack).
CONSUMER_GRACE_SECONDS = 2.0

#: How often the ``queen`` fixture looks again during that grace, in seconds.
_GRACE_POLL_SECONDS = 0.02

#: How long ``queen_queue`` waits, in milliseconds, for the test client's buffers to flush
#: before it deletes the queue.
_FLUSH_TIMEOUT_MILLIS = 10000

#: The ``queen`` client of a test, for ``queen_queue``'s teardown (per test item).
_CLIENT = pytest.StashKey["Queen"]()

#: Connect and read timeout, in milliseconds, of the one ``GET /health`` that checks a real
#: broker answers before the first test that needs it (per URL; no retry).
PROBE_TIMEOUT_MILLIS = 3000


class QueenBroker:
    """The broker under test (value of the ``queen_broker`` fixture).

    Attributes:
        url: the (first) broker base URL, e.g. ``"http://127.0.0.1:54321"``.
        urls: every broker base URL (one for the embedded broker).
        bearer_token: ``QUEEN_BEARER_TOKEN`` for a real broker, else None.
        embedded: the :class:`~queen_sync.testing.EmbeddedBroker` (fault injection,
            ``messages()``, ``restart()``...), or None for a real broker.
    """

    def __init__(self, urls: List[str], bearer_token: Optional[str], embedded: Optional["EmbeddedBroker"]) -> None:
        self.urls = urls
        self.url = urls[0]
        self.bearer_token = bearer_token
        self.embedded = embedded

    @property
    def is_embedded(self) -> bool:
        """True for the plugin's embedded broker."""
        return self.embedded is not None

    def client(self, **options: object) -> "Queen":
        """A new :class:`~queen_sync.Queen` on this broker (``options`` as for ``Queen``);
        the caller closes it."""
        options.setdefault("bearer_token", self.bearer_token)
        return Queen(urls=self.urls, **options)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return "QueenBroker(%s%s)" % (redact_url(self.url), ", embedded" if self.embedded is not None else "")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("queen_sync", "queen_sync fixtures")
    group.addoption(
        "--queen-url",
        dest="queen_url",
        default=None,
        metavar="URL",
        help="run the queen_* fixtures against the Queen broker at URL (comma-separated for several) "
        "instead of an embedded one; default: $QUEEN_URL",
    )


class _Target(NamedTuple):
    """The real broker the run was given: its URLs (empty: the embedded broker) and where
    they came from (``"--queen-url"`` or ``"QUEEN_URL"``)."""

    urls: List[str]
    source: str


def _target(config: pytest.Config) -> _Target:
    option = config.getoption("queen_url", default=None)
    raw, source = (option, "--queen-url") if option else (os.environ.get("QUEEN_URL", ""), "QUEEN_URL")
    urls = [u.strip().rstrip("/") for u in str(raw).split(",") if u.strip()]
    if not urls and str(raw).strip():
        # " , " names no broker: kept as given, so the tests needing one say so (not a silent
        # embedded broker in place of the one the run asked for)
        urls = [str(raw).strip()]
    return _Target(urls, source)


def _shown(urls: List[str]) -> str:
    """``urls`` fit for the header or a test report (user info and query masked)."""
    return ", ".join(map(redact_url, urls))


def pytest_report_header(config: pytest.Config) -> str:
    target = _target(config)
    if not target.urls:
        return "queen_sync: embedded broker"
    return "queen_sync: broker at %s (from %s)" % (_shown(target.urls), target.source)


def _no_answer(broker: QueenBroker) -> Optional[str]:
    """Why ``broker`` cannot serve the tests (the middle of the report of
    :func:`_require_answer`: the client's error, then what to do), or None when a Queen
    broker answers its ``GET /health`` within :data:`PROBE_TIMEOUT_MILLIS` (each URL tried
    once). Only the client's own errors (QueenError) are read; anything else propagates."""
    try:
        with broker.client(
            retry_attempts=1, timeout_millis=PROBE_TIMEOUT_MILLIS, connect_timeout_millis=PROBE_TIMEOUT_MILLIS
        ) as q:
            q.admin.health()  # an unhealthy broker's 503 report is returned, not raised
    except InvalidInputError as exc:
        return "is not a broker URL the client accepts (%s); fix or unset" % exc
    except (QueenConnectionError, ProtocolError) as exc:
        return "does not answer as a Queen broker (%s); start the broker, or fix or unset" % exc
    except BrokerError as exc:
        if exc.status is not None and exc.status >= 500:  # a proxy with no broker behind it
            return "does not answer as a Queen broker (%s); start the broker, or fix or unset" % exc
        log.debug("the broker at %s answered GET /health with a refusal: %s", _shown(broker.urls), exc)
    return None


def _require_answer(broker: QueenBroker, source: str) -> None:
    """Fail the requesting test's setup (``pytest.fail``) unless ``broker`` answers (see the
    module docstring, "A broker that does not answer")."""
    problem = _no_answer(broker)
    if problem is not None:
        pytest.fail(
            "queen_sync: %s (from %s) %s %s (without --queen-url / QUEEN_URL the fixtures run an "
            "embedded broker)" % (_shown(broker.urls), source, problem, source),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def queen_broker(pytestconfig: pytest.Config) -> Iterator[QueenBroker]:
    """The broker under test: ``--queen-url`` / ``QUEEN_URL``, checked once to answer, or an
    embedded broker started for the whole session (see :class:`QueenBroker`)."""
    target = _target(pytestconfig)
    if target.urls:
        real = QueenBroker(target.urls, os.environ.get("QUEEN_BEARER_TOKEN") or None, None)
        _require_answer(real, target.source)
        yield real
        return
    with EmbeddedBroker() as broker:
        yield QueenBroker([broker.url], None, broker)


@pytest.fixture
def queen(queen_broker: QueenBroker, request: pytest.FixtureRequest) -> Iterator["Queen"]:
    """A :class:`~queen_sync.Queen` on the broker under test, closed after the test; fails the
    test if a consumer or stream runner of it is still running at its end. The embedded
    broker's faults are cleared before it closes (see :func:`_end_faults`)."""
    q = queen_broker.client()
    request.node.stash[_CLIENT] = q
    try:
        yield q
    finally:
        _end_faults(queen_broker)
        left = _left_running(q)
        q.close()
    if left:
        pytest.fail(
            "the test left %d consumer(s) running: %s: stop background consumers (consumer.stop()) or "
            "bound them with limit() / idle_millis(); stop stream runners (runner.stop())"
            % (len(left), ", ".join(_describe(r) for r in left)),
            pytrace=False,
        )


@pytest.fixture
def queen_queue(queen_broker: QueenBroker, request: pytest.FixtureRequest) -> Iterator[str]:
    """A unique queue name (``test-<hex>``), deleted from the broker after the test. When the
    test also uses ``queen``, that client's push buffers are flushed first (whatever the
    order of the test's arguments): a flush after the delete would create the queue again."""
    name = "test-%s" % uuid.uuid4().hex[:12]
    yield name
    q = request.node.stash.get(_CLIENT, None)
    if q is not None and not q.closed:
        _end_faults(queen_broker)
        try:
            q.flush_all_buffers(_FLUSH_TIMEOUT_MILLIS)
        except QueenError as exc:
            log.warning("could not flush the buffers of the test's client before deleting %s: %s", name, exc)
    try:
        with queen_broker.client(retry_attempts=2, timeout_millis=10000) as q:
            q.queue(name).delete()
    except QueenError as exc:  # best effort: a test may have stopped the broker
        log.warning("could not delete test queue %s: %s", name, exc)


@pytest.fixture
def queen_faults(queen_broker: QueenBroker) -> Iterator["FaultInjector"]:
    """The embedded broker's fault injector, cleared before and after the test (skipped
    against a real broker)."""
    if queen_broker.embedded is None:
        pytest.skip("queen_faults needs the embedded broker; the tests run against %s" % redact_url(queen_broker.url))
    faults = queen_broker.embedded.faults
    faults.clear()
    try:
        yield faults
    finally:
        faults.clear()


def _end_faults(broker: QueenBroker) -> None:
    """Clear the embedded broker's faults at the end of a test, before the plugin's client
    flushes and closes: pytest tears fixtures down in the reverse order of the test's
    arguments, so with ``queen_faults`` named before ``queen`` the client would close while
    the test's faults still refuse its pushes (waiting out its close timeout)."""
    if broker.embedded is not None:
        broker.embedded.faults.clear()


def _left_running(q: Queen) -> List[RunningConsumer]:
    """What ``q`` still runs after at most :data:`CONSUMER_GRACE_SECONDS`."""
    deadline = time.monotonic() + CONSUMER_GRACE_SECONDS
    while True:
        running = q.running_consumers()
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(_GRACE_POLL_SECONDS)


def _describe(r: RunningConsumer) -> str:
    if r.kind == "stream":
        return "stream %r on queue %s (group %s, %d thread(s))" % (r.query, r.queue, r.group, r.threads)
    return "consumer on queue %s (%s, %d thread(s))" % (
        r.queue, "group %s" % r.group if r.group is not None else "queue mode", r.threads)
