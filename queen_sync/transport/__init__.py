"""The one HTTP transport of queen_sync: a urllib3 ``PoolManager`` shared by every thread.

Connections
    One pool per broker URL, ``maxsize`` connections kept alive per host (64 by default, so
    many threads can talk to the broker at once without opening a socket per request).
    After a 204 the connection is dropped, never reused (a 0.15 broker sends a body with its
    204, which would desynchronise a keep-alive connection). Every POST carries a body
    (``{}`` at least): the broker answers an empty one with 400. Any 2xx reply is success at
    this level; callers decide from the body (a Queen 0.15 broker answers most refusals with
    200). Non-2xx replies raise :class:`QueenHTTPError` and its subclasses.

Retries (urllib3's own retries are off; :meth:`Transport.request` runs its own loop)
    Delays come from a pluggable :class:`Backoff` (redis-py style: ``compute(failures)``
    returns seconds); the default is :class:`ExponentialBackoff`, capped and with "equal
    jitter". A ``Retry-After`` header on a 429 / 503 is honoured (delta-seconds or an HTTP
    date) up to ``retry_max_delay_millis`` per attempt (default 10000 ms, also when a custom
    ``backoff`` is given): a broker asking for 100 s does not block a caller for 100 s.
    Whether a failed attempt is retried depends on what may have happened at the broker:

    ==========================  =========  ==============  ===============  ================
    failure                     push, GET  pop (``GET      ack, ack/batch,  4xx (not 429)
                                reads,     /pop``)         transaction,
                                configure,                 seek to end
                                delete,
                                lease extend
    ==========================  =========  ==============  ===============  ================
    not sent (refused, DNS,     retried    retried         retried          --
    connect timeout)
    429 / 503 reply (refused,   retried    retried         retried          --
    nothing processed)
    500 / 502 reply             retried    retried         **no**           --
    504 reply                   retried    **no**          **no**           --
    lost reply (connection      retried    **no**          **no**           --
    broke after sending, read
    timeout)
    other 4xx reply             never      never           never            never
    ==========================  =========  ==============  ===============  ================

    Why: a push body is built once with client-minted ``transactionId`` s, so a resent push
    is answered ``duplicate`` for what was already stored (one delivery). A configure is an
    upsert, a delete is idempotent and a lease extend sets ``max(expiry, now + s)``. A Queen
    broker answers its asynchronous routes with 200 only, so a 5xx it sends itself comes
    from before the work was submitted; 504 (and 502 from a proxy) may hide work that was
    done. A pop whose reply was lost has taken a lease: the messages come back only after
    the lease expires, so the pop is not resent blindly (the caller's next pop is the
    retry). An ack / transaction whose reply was lost may or may not have been applied: it
    is reported to the caller (:class:`QueenConnectionError`), never resent.

Push retry budget (:data:`RETRY_PUSH`)
    A push is retried on everything in the first column above, and also when its 2xx reply
    is empty (a broker killed while answering) or garbled (not one result per item): those
    count as lost replies, not as :class:`ProtocolError`. It is retried for a **time budget**,
    ``push_retry_timeout_millis`` (default 15000 ms), not ``retry_attempts`` times: new
    attempts are started, with the usual backoff, until the budget is spent (at least
    ``retry_attempts`` attempts are made either way); an attempt in flight when the budget
    ends still runs to its own ``timeout_millis``. Why 15 s: a broker restart (process
    restart, rolling deploy, failover to a standby) takes a few seconds, and three attempts
    with 0.5 s / 1 s backoff (1.5 s) do not span it, while 15 s does (attempts at about 0,
    0.5, 1.5, 3.5, 7.5 and 15 s with the default backoff); and 15 s still leaves room in
    the 30 s to 60 s a proxy or web front end usually gives a request, so a web handler
    that pushes fails with a clear error rather than being cut off by its gateway.
    ``push_retry_timeout_millis=0`` gives the plain ``retry_attempts`` count.

Several brokers
    ``load_balancing_strategy="round-robin"`` (default) spreads calls over the URLs;
    ``"affinity"`` hashes the call's affinity key (``queue/partition[/consumer group]``)
    on a consistent-hash ring (``affinity_hash_ring`` virtual nodes per URL), so one
    partition's traffic sticks to one broker. A URL that fails (connection error, timeout,
    5xx) is marked unhealthy and skipped for ``health_retry_after_millis``; when every URL
    is unhealthy they are all tried anyway. Within one call, a connection error fails over
    to the next URL at once; backoff starts when every URL has been tried.

Fork safety
    A child process gets a fresh pool and fresh locks: every live transport is reset in the
    child by ``os.register_at_fork`` and, under uWSGI (which forks without Python's at-fork
    hooks), by its post-fork hook (see :mod:`queen_sync._fork`); ``os.getpid()`` is checked
    on each request as a fallback. The parent keeps its connections.

Logging goes to the ``queen_sync.transport`` logger; request headers (and so the
``Authorization`` header) are never logged.

Where each part lives
    * ``_retry``: the retry policies (``RETRY_*``), the record of a failed attempt, the
      table above as code (``_may_retry``), ``Retry-After`` parsing.
    * ``_attempt``: one HTTP attempt (``send_once``): which failures were sent and which
      fail over, the 204 rule, non-2xx replies mapped to the error tree; :class:`Response`.
    * ``_transport``: :class:`Transport`: options and headers, the pools and their reset
      after a fork, the choice of broker (round-robin, affinity ring, health), and the retry
      loop of :meth:`Transport.request`.
    * ``_polls``: the long polls in flight (pops with ``wait=true``), whose sockets
      :meth:`Transport.close` shuts down so that they end at once and the broker drops the
      parked pops (a child process never touches its parent's).
    * The delay policies live in :mod:`queen_sync.backoff`; they are re-exported here.
"""

from __future__ import annotations

from ..backoff import Backoff, ConstantBackoff, ExponentialBackoff, NoBackoff
from ._attempt import Response
from ._retry import (
    DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS,
    RETRY_ALWAYS,
    RETRY_IF_ANSWERED,
    RETRY_IF_UNSENT,
    RETRY_PUSH,
)
from ._transport import DEFAULT_POOL_MAXSIZE, LOAD_BALANCING_STRATEGIES, Transport

__all__ = [
    "Transport",
    "Response",
    "DEFAULT_POOL_MAXSIZE",
    "Backoff",
    "ExponentialBackoff",
    "ConstantBackoff",
    "NoBackoff",
    "RETRY_ALWAYS",
    "RETRY_IF_ANSWERED",
    "RETRY_IF_UNSENT",
    "RETRY_PUSH",
    "DEFAULT_PUSH_RETRY_TIMEOUT_MILLIS",
    "LOAD_BALANCING_STRATEGIES",
]
