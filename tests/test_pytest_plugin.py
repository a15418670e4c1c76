"""The pytest plugin (``queen_sync.pytest_plugin``): registered once through its entry point,
and its fixtures' promises, checked on inner pytest runs (``pytester``)."""

from __future__ import annotations

import socket
from importlib import metadata
from typing import Any, Iterator, List

import pytest

import queen_sync.pytest_plugin
import queen_sync.transport._transport
from queen_sync import Queen, RouteNotFoundError, BrokerError


def test_registered_once_through_the_entry_point(request: pytest.FixtureRequest) -> None:
    eps = [ep for ep in metadata.entry_points(group="pytest11") if ep.name == "queen_sync"]
    assert [ep.value for ep in eps] == ["queen_sync.pytest_plugin"]
    pm = request.config.pluginmanager
    assert pm.get_plugin("queen_sync") is queen_sync.pytest_plugin
    assert [p for p in pm.get_plugins() if p is queen_sync.pytest_plugin] == [queen_sync.pytest_plugin]


def test_a_consumer_left_running_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_leaks(queen, queen_queue):
            queen.queue(queen_queue).group("g").consume(lambda m: None, background=True)

        def test_stops(queen, queen_queue):
            c = queen.queue(queen_queue).group("g").consume(lambda m: None, background=True)
            c.stop(drain_timeout_millis=5000)

        def test_bounded(queen, queen_queue):
            queen.queue(queen_queue).push({"data": 1})
            assert queen.queue(queen_queue).group("g").limit(1).consume(lambda m: None).handled == 1

        def test_stream_leaks(queen, queen_queue):
            from queen_sync.streams import Stream
            Stream.from_(queen.queue(queen_queue)).to(queen.queue(queen_queue + "-out")).run(queen_queue + ".q")

        def test_stream_stops(queen, queen_queue):
            from queen_sync.streams import Stream
            Stream.from_(queen.queue(queen_queue)).to(queen.queue(queen_queue + "-out")).run(queen_queue + ".q").stop()
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, errors=2)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_leaks*",
        "*left 1 consumer(s) running: consumer on queue test-* (group g, * thread(s)): stop background consumers*",
        "*ERROR at teardown of test_stream_leaks*",
        "*left 1 consumer(s) running: stream 'test-*.q' on queue test-* (group streams.test-*.q, * thread(s))*",
    ])


def test_faults_are_cleared_and_the_header_names_the_broker(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUEEN_URL", raising=False)  # the inner run needs the embedded broker's faults
    pytester.makepyfile(
        """
        def test_1_add(queen_faults, queen, queen_queue, queen_broker):
            assert queen_broker.embedded is not None and queen_broker.embedded.faults is queen_faults
            queen_faults.add("POST", "/api/v1/push", "status", status=500, times=None)

        def test_2_clean(queen_faults, queen, queen_queue):
            assert len(queen_faults) == 0
            queen.queue(queen_queue).push({"data": 1})
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["queen_sync: embedded broker"])


def test_teardown_flushes_then_deletes_without_faults_whatever_the_argument_order(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest tears fixtures down in the reverse order of the arguments: with queen_faults
    first, the client closed while the test's fault still refused its pushes (its close
    timeout waited out, the message lost); with the README's order, queen_queue deleted the
    queue and then the client's close flushed its buffer, creating the queue again."""
    monkeypatch.delenv("QUEEN_URL", raising=False)
    pytester.makepyfile(
        """
        import pytest
        from queen_sync import RouteNotFoundError, BrokerError
        NAMES = []

        def test_1_faults_first(queen_faults, queen, queen_queue):
            queen_faults.add("POST", "/api/v1/push", "status", status=503, times=None)
            queen.queue(queen_queue).buffer(100, 600000).push({"data": "x"})
            NAMES.append(queen_queue)

        def test_2_readme_order(queen, queen_queue):
            queen.queue(queen_queue).buffer(100, 600000).push({"data": "y"})
            NAMES.append(queen_queue)

        def test_3_both_deleted(queen):
            assert len(NAMES) == 2
            for name in NAMES:
                with pytest.raises((RouteNotFoundError, BrokerError)):
                    queen.admin.get_queue(name)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "error::RuntimeWarning")
    result.assert_outcomes(passed=3)
    assert "could not be" not in result.stdout.str()


def test_queen_url_option_queue_cleanup_and_faults_skip(pytester: pytest.Pytester, broker_url: str,
                                                        client: Queen) -> None:
    names = pytester.path / "names.txt"
    pytester.makepyfile(
        """
        def test_real(queen, queen_queue, queen_broker):
            assert queen_broker.embedded is None and queen.urls == [%r]
            queen.queue(queen_queue).push({"data": 1})
            open(%r, "w").write(queen_queue)

        def test_faults(queen_faults):
            raise AssertionError("not reached")
        """
        % (broker_url, str(names))
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--queen-url", broker_url + "/")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["queen_sync: broker at %s (from --queen-url)" % broker_url,
                                 "*queen_faults needs the embedded broker*"])
    name = names.read_text()
    assert name.startswith("test-")
    with pytest.raises((RouteNotFoundError, BrokerError)):  # deleted after the inner test
        client.admin.get_queue(name)


# --- a real broker that does not answer: one check per session, every test errors at once ---

_USES_THE_BROKER = """
def test_push(queen, queen_queue):
    queen.queue(queen_queue).push({"data": 1})

def test_client(queen):
    pass

def test_broker(queen_broker):
    pass

def test_no_fixture():
    pass
"""


@pytest.fixture
def refused_url() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a port bound and not listening: a connection to it is
    refused (and no other process can take the port during the test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield "http://127.0.0.1:%d" % s.getsockname()[1]


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The HTTP attempts of every client of the inner (in-process) pytest run, as ``"METHOD path"``."""
    sent: List[str] = []
    real = queen_sync.transport._transport.send_once

    def counting(pool: Any, prefix: str, maxsize: int, base: str, method: str, path: str, *rest: Any) -> Any:
        sent.append("%s %s" % (method, path))
        return real(pool, prefix, maxsize, base, method, path, *rest)

    monkeypatch.setattr(queen_sync.transport._transport, "send_once", counting)
    monkeypatch.delenv("QUEEN_BEARER_TOKEN", raising=False)
    return sent


def test_a_refused_broker_url_errors_every_test_with_one_check(pytester: pytest.Pytester, refused_url: str,
                                                               attempts: List[str]) -> None:
    pytester.makepyfile(_USES_THE_BROKER)
    result = pytester.runpytest("-p", "no:cacheprovider", "--queen-url", refused_url + "/")
    result.assert_outcomes(passed=1, errors=3)
    message = (
        "queen_sync: %s (from --queen-url) does not answer as a Queen broker (cannot connect to the Queen broker "
        "at %s: *Connection refused); start the broker, or fix or unset --queen-url (without --queen-url / "
        "QUEEN_URL the fixtures run an embedded broker)" % (refused_url, refused_url)
    )
    result.stdout.fnmatch_lines(["*ERROR at setup of test_push*", message,
                                 "*ERROR at setup of test_client*", message,
                                 "*ERROR at setup of test_broker*", message])
    assert attempts == ["GET /health"]  # one attempt for the session: no push was retried, no queue deleted
    assert "could not delete test queue" not in result.stdout.str()


def test_a_session_without_the_fixtures_never_checks_the_broker(pytester: pytest.Pytester, refused_url: str,
                                                                attempts: List[str]) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--queen-url", refused_url)
    result.assert_outcomes(passed=1)
    assert attempts == []


def _error_sections_starting(result: pytest.RunResult, message: str) -> int:
    """How many error sections open with `message`: the short summary at the end repeats it, whole
    when pytest sees a CI environment (CI=...), cut to the terminal width otherwise."""
    return sum(line.startswith(message) for line in result.stdout.lines)


def test_an_unusable_queen_url_errors_every_test_naming_it_masked(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 attempts: List[str]) -> None:
    monkeypatch.setenv("QUEEN_URL", "http://alice:hunter2@127.0.0.1:1")
    pytester.makepyfile(_USES_THE_BROKER)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=3)
    assert _error_sections_starting(result, (
        "queen_sync: http://***@127.0.0.1:1 (from QUEEN_URL) is not a broker URL the client accepts "
        "(credentials in the broker URL are not supported ('http://***@127.0.0.1:1'); use bearer_token=); "
        "fix or unset QUEEN_URL")) == 3
    result.stdout.fnmatch_lines(["queen_sync: broker at http://***@127.0.0.1:1 (from QUEEN_URL)"])  # the header
    assert "hunter2" not in result.stdout.str()
    assert attempts == []


@pytest.mark.parametrize(
    "status, body, outcome",
    [
        (502, None, "errors"),  # a proxy with no broker behind it
        (503, {"status": "unhealthy", "database": "disconnected"}, "passed"),  # the broker answers: unhealthy
        (401, None, "passed"),  # the broker answers, refusing: the tests report that on their own
    ],
)
def test_what_the_health_check_counts_as_an_answer(pytester: pytest.Pytester, embedded_broker: Any,
                                                  attempts: List[str], status: int, body: Any,
                                                  outcome: str) -> None:
    fault = embedded_broker.faults.add("GET", "/health", "status", status=status, body=body, times=None)
    pytester.makepyfile(
        """
        def test_client(queen):
            pass

        def test_broker(queen_broker):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--queen-url", embedded_broker.url)
    result.assert_outcomes(**{outcome: 2})
    assert fault.hits == 1 and attempts == ["GET /health"]
    if outcome == "errors":
        assert _error_sections_starting(
            result, "queen_sync: %s (from --queen-url) does not answer as a Queen broker (" % embedded_broker.url) == 2
        result.stdout.fnmatch_lines(["*HTTP 502*"])


def test_a_queen_url_that_names_no_broker_errors_rather_than_run_embedded(pytester: pytest.Pytester,
                                                                         attempts: List[str]) -> None:
    pytester.makepyfile(_USES_THE_BROKER)
    result = pytester.runpytest("-p", "no:cacheprovider", "--queen-url", " , ")
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines(["queen_sync: broker at , (from --queen-url)"])
    assert _error_sections_starting(result, "queen_sync: , (from --queen-url) is not a broker URL the client accepts") == 3
    assert attempts == []
