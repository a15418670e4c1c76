"""The pytest plugin (``queen_sync.pytest_plugin``): registered once through its entry point,
and its fixtures' promises, checked on inner pytest runs (``pytester``)."""

from __future__ import annotations

from importlib import metadata

import pytest

import queen_sync.pytest_plugin
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
    result.stdout.fnmatch_lines(["queen_sync broker: embedded broker"])


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
    result.stdout.fnmatch_lines(["queen_sync broker: %s" % broker_url, "*queen_faults needs the embedded broker*"])
    name = names.read_text()
    assert name.startswith("test-")
    with pytest.raises((RouteNotFoundError, BrokerError)):  # deleted after the inner test
        client.admin.get_queue(name)
