"""TLS: HTTPS brokers are verified by default; a private CA bundle, a client certificate (mutual
TLS) or a ready ``ssl.SSLContext`` are passed through to urllib3. The embedded broker serves
HTTPS with certificates from a throw-away CA made by ``trustme``.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Iterator, Tuple

import pytest

from queen_sync import InvalidInputError, Queen, QueenConnectionError
from queen_sync.testing import EmbeddedBroker

trustme = pytest.importorskip("trustme")


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


def _server_context(ca: Any, *, names: Tuple[str, ...] = ("127.0.0.1", "localhost"),
                    require_client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(ctx)
    if require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ca.configure_trust(ctx)
    return ctx


@pytest.fixture(scope="module")
def https_broker(ca: Any) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(ssl_context=_server_context(ca)) as broker:
        yield broker


@pytest.fixture(scope="module")
def ca_file(ca: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def _round_trip(q: Queen, queue: str) -> None:
    q.queue(queue).partition("p").push({"data": {"tls": True}})
    msgs = q.queue(queue).partition("p").batch(1).pop()
    assert [m["data"] for m in msgs] == [{"tls": True}]
    q.ack(msgs[0], True)


def test_embedded_broker_url_is_https(https_broker: EmbeddedBroker) -> None:
    assert https_broker.url.startswith("https://127.0.0.1:")


def test_unknown_ca_is_refused_without_retry(https_broker: EmbeddedBroker) -> None:
    before = https_broker.request_count()
    with Queen(https_broker.url, retry_attempts=3, retry_delay_millis=0) as q:
        with pytest.raises(QueenConnectionError) as info:
            q.admin.health()
        assert "was not accepted" in str(info.value) and "ca_certs" in str(info.value)
        assert info.value.sent is False
        assert q.get_transport_stats()["retries"] == 0  # a verification failure is not retried
    assert https_broker.request_count() == before  # no request got through


def test_private_ca_bundle_verifies(https_broker: EmbeddedBroker, ca_file: str) -> None:
    with Queen(https_broker.url, ca_certs=ca_file) as q:
        assert q.admin.health()["status"] == "healthy"
        _round_trip(q, "tls-ca-file")


def test_ready_ssl_context_is_used(https_broker: EmbeddedBroker, ca: Any) -> None:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    with Queen(https_broker.url, ssl_context=ctx) as q:
        _round_trip(q, "tls-context")


def test_host_name_is_checked(ca: Any, ca_file: str) -> None:
    with EmbeddedBroker(ssl_context=_server_context(ca, names=("queen.example.org",))) as broker:
        with Queen(broker.url, ca_certs=ca_file, retry_attempts=1) as q:
            with pytest.raises(QueenConnectionError, match="was not accepted"):
                q.admin.health()


def test_client_certificate_reaches_the_broker(ca: Any, ca_file: str, tmp_path: Path) -> None:
    """The broker requires a client certificate signed by the CA: refused without one,
    served with one (given as files, or in an SSLContext)."""
    client_cert = ca.issue_cert("client@example.org")
    both = tmp_path / "client.pem"
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(both))
    cert_only, key_only = tmp_path / "cert.pem", tmp_path / "key.pem"
    client_cert.cert_chain_pems[0].write_to_path(str(cert_only))
    client_cert.private_key_pem.write_to_path(str(key_only))
    with EmbeddedBroker(ssl_context=_server_context(ca, require_client_cert=True)) as broker:
        with Queen(broker.url, ca_certs=ca_file, retry_attempts=1) as q:
            # the broker's alert ("certificate required": the error then hints at cert_file=)
            # may lose the race with its closing the connection (a TLS EOF or a reset)
            with pytest.raises(QueenConnectionError):
                q.admin.health()
        assert broker.request_count() == 0  # the handshake failed: nothing reached the router
        with Queen(broker.url, ca_certs=ca_file, cert_file=str(both)) as q:
            _round_trip(q, "tls-mtls-file")
        with Queen(broker.url, ca_certs=ca_file, cert_file=str(cert_only), key_file=str(key_only)) as q:
            _round_trip(q, "tls-mtls-key")
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        client_cert.configure_cert(ctx)
        with Queen(broker.url, ssl_context=ctx) as q:
            _round_trip(q, "tls-mtls-context")
        assert broker.request_count("POST", "/api/v1/push") == 3


def test_tls_option_errors(ca_file: str, tmp_path: Path) -> None:
    url = "https://127.0.0.1:1"
    with pytest.raises(InvalidInputError, match="no broker URL is https"):
        Queen("http://127.0.0.1:1", ca_certs=ca_file)
    with pytest.raises(InvalidInputError, match="not both"):
        Queen(url, ssl_context=ssl.create_default_context(), ca_certs=ca_file)
    with pytest.raises(InvalidInputError, match="ssl_context must be an ssl.SSLContext"):
        Queen(url, ssl_context="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="key_file needs cert_file"):
        Queen(url, key_file=ca_file)
    with pytest.raises(InvalidInputError, match="ca_certs must be the path of a PEM file"):
        Queen(url, ca_certs=str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidInputError, match="ca_certs must be the path of a PEM file"):
        Queen(url, ca_certs=str(tmp_path))  # a directory


def test_a_ca_bundle_without_a_certificate_fails_at_construction(ca: Any, ca_file: str, tmp_path: Path) -> None:
    """Not PEM, empty, a key instead of a certificate, DER: refused by ``Queen()`` (was: only
    the first request failed, as a broker that could not be reached)."""
    key = tmp_path / "key.pem"
    ca.private_key_pem.write_to_path(str(key))
    der = tmp_path / "ca.der"
    der.write_bytes(ssl.PEM_cert_to_DER_cert(Path(ca_file).read_text()))
    garbage, empty = tmp_path / "garbage.pem", tmp_path / "empty.pem"
    garbage.write_text("not a certificate\n")
    empty.write_text("")
    for bad in (garbage, empty, key, der):
        with pytest.raises(InvalidInputError) as info:
            Queen("https://127.0.0.1:1", ca_certs=str(bad))
        assert str(info.value).startswith("ca_certs %r holds no CA certificate OpenSSL can read" % str(bad))
    with Queen("https://127.0.0.1:1", ca_certs=ca_file) as q:  # a real bundle still constructs
        assert q.urls == ["https://127.0.0.1:1"]


def test_an_https_url_for_a_plain_http_broker_fails_at_once() -> None:
    # an https:// URL for a plain-HTTP port is a configuration mistake, as a refused
    # certificate is: no retry, not even within a push's retry budget
    with EmbeddedBroker() as broker:
        url = broker.url.replace("http://", "https://")
        with Queen(url, retry_attempts=3, retry_delay_millis=0) as q:
            for call in (q.admin.health, lambda: q.queue("tls-plain").push({"data": 1})):
                with pytest.raises(QueenConnectionError) as info:
                    call()
                assert "does not speak TLS" in str(info.value) and "http://" in str(info.value)
                assert info.value.sent is False
            assert q.get_transport_stats()["retries"] == 0
