"""Shared fixtures.

The broker, client and queue fixtures come from queen_sync's own pytest plugin
(``queen_sync.pytest_plugin``: ``queen_broker``, ``queen``, ``queen_queue``, ``queen_faults``),
so every run of the suite exercises it; the names used across the suite (``broker_url``,
``client``, ``qname``) are aliases of those. The suite runs against the embedded broker by
default, and against a real Queen broker when ``QUEEN_URL`` (or ``--queen-url``) is set. Tests
that need what only the embedded broker offers (fault injection, restarts, fresh state) use
the ``embedded_broker`` fixture, which skips against a real broker.

The plugin is registered by its ``pytest11`` entry point (``pip install -e .`` or the wheel);
:func:`pytest_configure` registers it only when the entry point did not (plugin autoload off),
so it is never registered twice.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator, List

import pytest

import queen_sync
import queen_sync.pytest_plugin
from queen_sync import codec
from queen_sync.pytest_plugin import QueenBroker

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.is_registered(queen_sync.pytest_plugin):
        config.pluginmanager.register(queen_sync.pytest_plugin, "queen_sync")


def pytest_report_header(config: pytest.Config) -> List[str]:
    return [
        "queen_sync codec backend: %s (json: %s)" % (queen_sync.codec_backend, codec._pycodec._json.BACKEND),
    ]


@pytest.fixture(scope="session")
def broker_url(queen_broker: QueenBroker) -> str:
    """Base URL of the broker under test (the plugin's ``queen_broker``)."""
    return queen_broker.url


@pytest.fixture
def embedded_broker(queen_broker: QueenBroker) -> Iterator["object"]:
    """A fresh embedded broker for this test only (skipped against a real broker)."""
    if not queen_broker.is_embedded:
        pytest.skip("needs the embedded broker (fault injection / fresh state)")
    from queen_sync.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def quick_retry_client(embedded_broker: Any) -> Iterator[queen_sync.Queen]:
    """A client on ``embedded_broker`` that retries 3 times with 2-20 ms backoff and waits at
    most 5 s for its buffers on close (the buffered-producer tests)."""
    from queen_sync.transport import ExponentialBackoff

    c = queen_sync.Queen(embedded_broker.url, retry_attempts=3, backoff=ExponentialBackoff(2, 20),
                         close_timeout_millis=5000)
    try:
        yield c
    finally:
        c.close(timeout_millis=500)


@pytest.fixture
def client(queen: queen_sync.Queen) -> queen_sync.Queen:
    """The plugin's ``queen``: a client on the broker under test, closed after the test (which
    fails if it left a consumer running)."""
    return queen


@pytest.fixture
def unique_name() -> "UniqueNames":
    return UniqueNames()


class UniqueNames:
    """Makes unique queue / group names (``test-<hex>-<suffix>``)."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex[:10]

    def __call__(self, suffix: str = "q") -> str:
        return "test-%s-%s" % (self.token, suffix)


@pytest.fixture
def qname(queen_queue: str) -> str:
    """The plugin's ``queen_queue``: a unique queue name, deleted after the test."""
    return queen_queue
