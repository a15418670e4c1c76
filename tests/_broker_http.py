"""Raw-HTTP helper for the embedded-broker tests (urllib3 only; independent of the client)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import quote, urlencode

import urllib3


class RawHTTP(object):
    """Tiny JSON-over-HTTP helper: every call returns ``(status, parsed body or text or None)``."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/")
        self.pool = urllib3.PoolManager(maxsize=8, retries=False)

    def request(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
                timeout: float = 10.0, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        r = self.pool.request(method, self.base + path, body=data, headers=hdrs,
                              timeout=urllib3.Timeout(total=timeout), preload_content=True)
        return r.status, self._decode(r)

    def response(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
                 timeout: float = 10.0) -> urllib3.BaseHTTPResponse:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        return self.pool.request(method, self.base + path, body=data,
                                 headers={"Content-Type": "application/json"} if data is not None else {},
                                 timeout=urllib3.Timeout(total=timeout))

    @staticmethod
    def _decode(r: urllib3.BaseHTTPResponse) -> Any:
        if not r.data:
            return None
        try:
            return json.loads(r.data)
        except ValueError:
            return r.data.decode("utf-8", "replace")

    # -- routes
    def push(self, queue: str, payloads: list, partition: Optional[str] = None, **extra: Any) -> list:
        items = []
        for p in payloads:
            it = {"queue": queue, "payload": p}
            if partition is not None:
                it["partition"] = partition
            it.update(extra)
            items.append(it)
        status, body = self.request("POST", "/api/v1/push", {"items": items})
        assert status == 200, (status, body)
        return body

    def pop(self, queue: str, partition: Optional[str] = None, **params: Any) -> dict:
        """GET a pop; ``params`` become the query (``timeout`` is the broker's long-poll ms)."""
        q = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items()}
        http_timeout = int(q.get("timeout", 30000)) / 1000.0 + 10.0
        path = "/api/v1/pop/queue/" + quote(queue, safe="")
        if partition is not None:
            path += "/partition/" + quote(partition, safe="")
        if q:
            path += "?" + urlencode(q)
        status, body = self.request("GET", path, timeout=http_timeout)
        assert status == 200, (status, body)
        return body

    def ack(self, msg: dict, status: str = "completed", group: Optional[str] = None, lease: bool = True,
            **extra: Any) -> dict:
        body = {"transactionId": msg["transactionId"], "partitionId": msg["partitionId"], "status": status}
        if group is not None:
            body["consumerGroup"] = group
        if lease:
            body["leaseId"] = msg["leaseId"]
        body.update(extra)
        st, res = self.request("POST", "/api/v1/ack", body)
        assert st == 200 and isinstance(res, list) and len(res) == 1, (st, res)
        return res[0]

    def configure(self, queue: str, **options: Any) -> dict:
        st, res = self.request("POST", "/api/v1/configure", {"queue": queue, "options": options})
        assert st == 200, (st, res)
        return res

    def delete_queue(self, queue: str) -> None:
        self.request("DELETE", "/api/v1/resources/queues/" + quote(queue, safe=""))


def unique(prefix: str = "bq") -> str:
    return "test-%s-%s" % (uuid.uuid4().hex[:10], prefix)


def wait_until(fn: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``fn`` until it returns a truthy value or the deadline passes (then AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.1f s" % timeout)
        time.sleep(interval)
