"""Shared fixtures.

The suite runs against the embedded broker (``queen_sync.testing.EmbeddedBroker``) by
default, and against a real Queen broker when ``QUEEN_URL`` is set. Tests that need what only
the embedded broker offers (fault injection, restarts, fresh state) use the
``embedded_broker`` fixture, which skips when ``QUEEN_URL`` is set.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator, List

import pytest

import queen_sync
from queen_sync import codec


def pytest_report_header(config: pytest.Config) -> List[str]:
    target = os.environ.get("QUEEN_URL") or "embedded broker"
    return [
        "queen_sync codec backend: %s (json: %s)" % (queen_sync.codec_backend, codec._pycodec._json.BACKEND),
        "queen_sync broker: %s" % target,
    ]


def real_broker() -> bool:
    return bool(os.environ.get("QUEEN_URL"))


@pytest.fixture(scope="session")
def broker_url() -> Iterator[str]:
    """Base URL of the broker under test: ``QUEEN_URL``, or a session-wide embedded broker."""
    url = os.environ.get("QUEEN_URL")
    if url:
        yield url.rstrip("/")
        return
    from queen_sync.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.url


@pytest.fixture
def embedded_broker() -> Iterator["object"]:
    """A fresh embedded broker for this test only (skipped against a real broker)."""
    if real_broker():
        pytest.skip("needs the embedded broker (fault injection / fresh state)")
    from queen_sync.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def client(broker_url: str) -> Iterator[queen_sync.Queen]:
    """A ``Queen`` client on the broker under test, closed after the test."""
    q = queen_sync.Queen(broker_url)
    try:
        yield q
    finally:
        q.close()


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
def qname(broker_url: str, unique_name: UniqueNames) -> Iterator[str]:
    """A unique queue name; the queue is deleted after the test."""
    name = unique_name("q")
    yield name
    _delete_queue(broker_url, name)


def _delete_queue(url: str, name: str) -> None:
    import urllib3

    try:
        urllib3.request("DELETE", "%s/api/v1/resources/queues/%s" % (url, name), timeout=5.0, retries=False)
    except Exception:  # best effort clean-up
        pass
