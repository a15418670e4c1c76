"""TLS options of the transport: checking them and reading certificate refusals.

``tls_options`` turns the client's ``ca_certs`` / ``cert_file`` / ``key_file`` /
``ssl_context`` into urllib3 ``PoolManager`` keywords, refusing a bad combination, a
missing file or a ``ca_certs`` holding no PEM certificate before anything is opened
(:class:`~queen_sync.errors.InvalidInputError`; urllib3 itself would only fail at the first
request, where it looks like a broker that cannot be reached). ``cert_rejected`` tells
a broker certificate that our side refused (a configuration problem: not worth a retry)
from other TLS failures. Without any option urllib3's defaults apply: certificates are
verified against the system's trust store and host names are checked.
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Callable, Dict, List, Optional, Sequence

from .errors import InvalidInputError

__all__ = ["tls_options", "cert_rejected"]


def tls_options(
    urls: Sequence[str],
    ca_certs: Optional[str],
    cert_file: Optional[str],
    key_file: Optional[str],
    ssl_context: Optional[ssl.SSLContext],
) -> Dict[str, Any]:
    """Check the TLS options and return them as urllib3 ``PoolManager`` keywords.

    Raises:
        InvalidInputError: TLS options without an ``https://`` URL, ``ssl_context`` with the
            file options, ``key_file`` without ``cert_file``, a path that is no file, or a
            ``ca_certs`` file OpenSSL cannot read a certificate from (not PEM, empty,
            unreadable); the message names the option and the path.
    """
    files = {"ca_certs": ca_certs, "cert_file": cert_file, "key_file": key_file}
    given = {k: v for k, v in files.items() if v is not None}
    if ssl_context is None and not given:
        return {}
    if not any(u.startswith("https://") for u in urls):
        raise InvalidInputError("TLS options were given but no broker URL is https://")
    if ssl_context is not None:
        if not isinstance(ssl_context, ssl.SSLContext):
            raise InvalidInputError("ssl_context must be an ssl.SSLContext, got %s" % type(ssl_context).__name__)
        if given:
            # urllib3 would load the files into the caller's context (changing it): refuse
            raise InvalidInputError("give ssl_context or %s, not both" % "/".join(sorted(given)))
        return {"ssl_context": ssl_context}
    if key_file is not None and cert_file is None:
        raise InvalidInputError("key_file needs cert_file")
    for k, v in given.items():
        if not isinstance(v, (str, os.PathLike)) or not os.path.isfile(v):
            raise InvalidInputError("%s must be the path of a PEM file, got %r" % (k, v))
    if ca_certs is not None:
        _check_ca_bundle(os.fspath(ca_certs))
    return {k: os.fspath(v) for k, v in given.items()}


def _check_ca_bundle(path: str) -> None:
    # the load urllib3 would do at the first connection, done now into a throw-away context
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise InvalidInputError(
            "ca_certs %r holds no CA certificate OpenSSL can read (a PEM bundle, "
            "-----BEGIN CERTIFICATE----- blocks, is expected): %s" % (path, exc)
        ) from None


def cert_rejected(exc: BaseException) -> bool:
    """True when an SSL error is our side refusing the broker's certificate."""
    return _in_chain(exc, lambda e: isinstance(e, ssl.SSLCertVerificationError))


def plain_http_answered(exc: BaseException) -> bool:
    """True when an SSL error says the other end does not speak TLS (an ``https://`` URL for
    a plain-HTTP port: OpenSSL's ``WRONG_VERSION_NUMBER``): a configuration problem."""
    return _in_chain(
        exc, lambda e: isinstance(e, ssl.SSLError) and "WRONG_VERSION_NUMBER" in str(getattr(e, "reason", "") or e)
    )


def _in_chain(exc: BaseException, test: Callable[[BaseException], bool]) -> bool:
    """Whether ``test`` holds for ``exc`` or an error it wraps (cause, context, reason, args)."""
    seen: List[BaseException] = []
    todo: List[Any] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or any(e is s for s in seen):
            continue
        if test(e):
            return True
        seen.append(e)
        todo.extend([e.__cause__, e.__context__, getattr(e, "reason", None), *e.args])
    return False
