"""What every route function of the wire layer shares: the :class:`Requester` it sends
through, and :func:`checked`, which sends one call and checks its reply.

A reply is checked the same way on every route: a 200 body carrying ``error`` (or
``success: false``) raises :class:`~queen_sync.errors.BrokerError`; a route the broker does
not have raises :class:`~queen_sync.errors.RouteNotFoundError` naming the call, the method
and the path (with a hint for the routes the official clients call that a 0.15 broker lacks).
Routes whose every reply carries ``success`` (the streams routes) ask for
``require_success`` (refused unless ``success`` is true) and may build their own error
(``refusal``): their errors carry the query name.
"""

# mypy: no-warn-return-any
# (``checked`` returns the broker's decoded JSON body, typed Any)

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol

from .. import codec
from ..errors import BrokerError, ProtocolError, QueenError, RouteNotFoundError
from ..transport import Response

__all__ = ["Requester", "Refusal", "checked", "check_reply", "checked_list", "checked_object", "query_params"]

#: Builds the error raised for a refused reply: ``refusal(doc, status) -> QueenError``.
Refusal = Callable[[Dict[str, Any], int], QueenError]

#: Routes the official clients call that a Queen 0.15 broker does not have (method, path prefix → method name).
_MISSING_ROUTE_HINTS = {
    ("GET", "/api/v1/resources/partitions"): "admin.get_partitions()",
    ("DELETE", "/api/v1/queues/"): "admin.clear_queue()",
    ("POST", "/api/v1/messages/"): "admin.retry_message() / admin.move_message_to_dlq()",
}


class Requester(Protocol):
    """What the wire layer sends through: one HTTP call, retried per policy, answered with a
    2xx :class:`~queen_sync.transport.Response` or raising the error tree.
    :class:`queen_sync.transport.Transport` is one (see :meth:`Transport.request` for the
    arguments); the client hands out one that refuses calls once it is closed."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Optional[bytes] = None,
        query: Optional[Mapping[str, Any]] = None,
        idempotent: bool = False,
        timeout_millis: Optional[int] = None,
        retry: Optional[str] = None,
        affinity_key: Optional[str] = None,
        accept: Optional[Callable[[bytes], Any]] = None,
        long_poll: bool = False,
        on_retry: Optional[Callable[[Exception, int], Any]] = None,
    ) -> Response: ...


def query_params(**params: Any) -> Dict[str, str]:
    """Query parameters as the transport takes them: ``None`` values dropped, the rest as
    text (bools as ``true`` / ``false``)."""
    out: Dict[str, str] = {}
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out


def check_reply(
    doc: Any,
    what: str,
    status: int,
    *,
    require_success: bool = False,
    refusal: Optional[Refusal] = None,
) -> Any:
    """Return the decoded body ``doc`` unless the broker refused the call in it.

    A JSON-object body is refused when it carries ``error`` or ``success: false``; with
    ``require_success`` (routes whose every reply carries ``success``), unless ``success`` is
    true. Any other body (a list, ...) passes.

    Args:
        refusal: builds the error raised for a refused body (``refusal(doc, status)``);
            default BrokerError.

    Raises:
        BrokerError: ``"<what> refused by the broker: <error>"`` (``.error``: the body's
            ``error``, else its ``message``; ``.body``, ``.status``), or what ``refusal`` built.
    """
    if not isinstance(doc, dict):
        return doc
    if require_success:
        refused = doc.get("success") is not True
    else:
        refused = doc.get("error") is not None or doc.get("success") is False
    if refused:
        if refusal is not None:
            raise refusal(doc, status)
        err = doc.get("error")
        if err is None and isinstance(doc.get("message"), str):
            err = doc["message"]  # some routes put a refusal's text there (DELETE /messages/...)
        raise BrokerError("%s refused by the broker: %s" % (what, err), status=status, error=err, body=doc)
    return doc


def checked(
    requester: Requester,
    method: str,
    path: str,
    *,
    what: str,
    body: Any = None,
    query: Optional[Mapping[str, str]] = None,
    idempotent: Optional[bool] = None,
    retry: Optional[str] = None,
    timeout_millis: Optional[int] = None,
    affinity_key: Optional[str] = None,
    nan_as_null: bool = False,
    require_success: bool = False,
    refusal: Optional[Refusal] = None,
) -> Any:
    """Send one call and return its checked, decoded JSON body (``None`` for a 204 or an
    empty body).

    Args:
        requester: what to send through (a :class:`Requester`).
        method, path: the route (the path already validated: URL-safe tokens only).
        what: how error messages name the call, e.g. ``"admin.get_queue('orders')"``.
        body: a JSON-able object, encoded by the codec; a POST without one sends ``{}``.
        query: query parameters (text values; see :func:`query_params`), or None.
        idempotent: True for ``RETRY_ALWAYS``; default True for GET and DELETE, False for POST.
        retry, timeout_millis, affinity_key: passed on to the requester.
        nan_as_null: NaN / ±Infinity floats in ``body`` are sent as ``null`` instead of
            refused (InvalidInputError, nothing sent).
        require_success, refusal: how the body is checked, see :func:`check_reply`.

    Raises:
        RouteNotFoundError: the broker has no such route (names ``what``, ``method path``).
        BrokerError: the body carries ``error`` / ``success: false`` (or what ``refusal`` built).
        ProtocolError: the body is not JSON.
        the transport's errors (QueenConnectionError, QueenHTTPError, ...).
    """
    if idempotent is None:
        idempotent = method != "POST"
    raw = codec.encode_json(body, nan_as_null=nan_as_null) if body is not None else None
    try:
        resp = requester.request(
            method,
            path,
            body=raw,
            query=query or None,
            idempotent=idempotent,
            retry=retry,
            timeout_millis=timeout_millis,
            affinity_key=affinity_key,
        )
    except RouteNotFoundError as exc:
        raise _route_not_found(method, path, what, exc) from None
    if resp.status == 204 or not resp.data:
        return None
    return check_reply(codec.decode_json(resp.data), what, resp.status,
                       require_success=require_success, refusal=refusal)


def checked_list(requester: Requester, method: str, path: str, *, what: str, **kw: Any) -> List[Any]:
    """:func:`checked`, for a route a Queen broker answers with a JSON array, or with no body
    at all when there is nothing to list (0.15: an unknown queue's messages, no lagging
    group): ``[]`` then.

    Raises:
        ProtocolError: ``"<what>: the reply is not a JSON array"``; else as :func:`checked`.
    """
    doc = checked(requester, method, path, what=what, **kw)
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ProtocolError("%s: the reply is not a JSON array" % what)
    return doc


def checked_object(requester: Requester, method: str, path: str, *, what: str, **kw: Any) -> Dict[str, Any]:
    """:func:`checked`, for a route a Queen broker always answers with a JSON object.

    Raises:
        ProtocolError: ``"<what>: the reply is not a JSON object"``; else as :func:`checked`.
    """
    doc = checked(requester, method, path, what=what, **kw)
    if not isinstance(doc, dict):
        raise ProtocolError("%s: the reply is not a JSON object" % what)
    return doc


def _route_not_found(method: str, path: str, what: str, exc: RouteNotFoundError) -> RouteNotFoundError:
    hint = ""
    for (m, prefix), name in _MISSING_ROUTE_HINTS.items():
        if m == method and path.startswith(prefix):
            hint = "; a Queen 0.15 broker does not offer %s" % name
            break
    return RouteNotFoundError(
        "%s: %s %s: the Queen broker has no such route (HTTP 404)%s" % (what, method, path, hint),
        status=exc.status,
        error=exc.error,
        body=exc.body,
    )
