"""Chaos run on the embedded broker (shared by ``tests/test_chaos.py`` and
``benchmarks/chaos.py``; import as ``from _chaos import ...``).

One :class:`~queen_sync.Queen` client carries producers (unbuffered: single and list pushes;
buffered) and consumers (two competing ones in group ``g``: ``each()`` and batch handlers;
one in group ``h`` with lease renewal) on one queue, while a schedule drawn from a seed
injects faults into the embedded broker: lost replies (``drop_after``), 503 / 500 / 429
(``status``), dropped connections (``drop_before``), slow replies (``delay``) on push, pop,
ack and lease-extend routes, and broker restarts (down for a while, same port). Then the
faults stop, buffers are flushed, the consumers drain everything, and the outcome is judged:

* every message a producer pushed is **stored exactly once** (by payload key);
* every stored message is **handled at least once** in each consumer group;
* in each group and partition, the **first deliveries follow the storage order**;
* every **redelivery is explained** by the broker's own records: a fault was injected on an
  ack or lease renewal of a lease the message was delivered under (a lost / refused / slow
  ack: :attr:`FaultInjector.history` keeps the request bodies), or the broker refused an
  ack / renewal of such a lease because it had **expired** (a request tap on the broker's
  router sees every processed ack and whether the lease was expired or released). A
  redelivery with neither is a client fault (an ack never sent, a cursor moved back...);
* no push error reaches the caller: with its default retries a push rides out the faults
  (no outage lasts more than ``max_down``, 2 s); a producer that gets one anyway pushes
  again the error's wire items (``err.items``, same ids) when it has them, else the same
  items (what the README says today), and goes on;
* nothing hangs: producers, flush, drain and consumer stops each have a bound;
* no consumer fails, no buffered message is left unsent.

Each failure is a :class:`Failure`; ``known`` names the open issue-11 item that explains it
(today: item 3, a push error that reaches the caller, and a push pushed again after one that
is stored twice), else ``None``. The schedule is a pure function of the seed; the interleaving of
threads is not, so the figures vary a little between runs of one seed.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import orjson

from queen_sync import Queen
from queen_sync.errors import BufferFullError, QueenError
from queen_sync.testing import EmbeddedBroker

__all__ = ["ChaosConfig", "ChaosReport", "Failure", "make_schedule", "run_chaos"]

QUEUE = "chaos"
GROUPS = ("g", "h")
INVALID_LEASE = "Invalid or expired lease"
ACK_PATHS = ("/api/v1/ack", "/api/v1/ack/batch")
#: route name -> (method, path prefix) for faults ("/api/v1/ack" also matches "/ack/batch")
ROUTES = {
    "push": ("POST", "/api/v1/push"),
    "pop": ("GET", "/api/v1/pop/"),
    "ack": ("POST", "/api/v1/ack"),
    "extend": ("POST", "/api/v1/lease/"),
}
ROUTE_WEIGHTS = {"push": 3, "pop": 2, "ack": 5, "extend": 1}
KIND_WEIGHTS = {"lost_reply": 3, "status": 3, "drop": 3, "slow": 2}


@dataclass
class ChaosConfig:
    """Parameters of one run (durations in seconds unless named ``*_ms``)."""

    seed: int = 1
    seconds: float = 12.0  # chaos phase (faults injected); drain and checks come after
    partitions: int = 6
    lease_seconds: int = 5  # the queue's leaseTime
    restart_every: float = 4.0  # mean seconds between broker restarts
    fault_every: float = 0.35  # mean seconds between other fault events
    max_down: float = 2.0  # longest broker outage of a restart
    max_delay_ms: int = 1500  # slowest ordinary slow reply
    long_delay_ms: int = 7000  # slowest of the rare replies slower than the lease
    producer_pause_ms: Tuple[int, int] = (20, 40)  # pause between two pushes of one producer
    drain_seconds: float = 0.0  # 0: lease_seconds + 10
    hang_seconds: float = 20.0  # bound of each wait of the closing phase


@dataclass
class Failure:
    """One failed check: ``check`` (short name), ``detail`` (text), ``known`` (the open
    issue-11 item that explains it, e.g. ``"11.3"``, or None)."""

    check: str
    detail: str
    known: Optional[str] = None

    def __str__(self) -> str:
        return "%s%s: %s" % (self.check, " [known: issue %s]" % self.known if self.known else "", self.detail)


@dataclass
class ChaosReport:
    seed: int
    figures: Dict[str, Any] = field(default_factory=dict)
    failures: List[Failure] = field(default_factory=list)
    schedule: List[Tuple[float, str, Dict[str, Any]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def only_known(self) -> bool:
        return bool(self.failures) and all(f.known for f in self.failures)

    def text(self, schedule: bool = False) -> str:
        lines = ["chaos seed %d: %s" % (self.seed, "PASS" if self.ok else "FAIL (%d)" % len(self.failures))]
        for k, v in self.figures.items():
            lines.append("  %-22s %s" % (k, v))
        for f in self.failures:
            lines.append("  FAILED " + str(f))
        if schedule:
            lines.append("  schedule:")
            lines.extend("    %6.2f s  %s %s" % (t, kind, args) for t, kind, args in self.schedule)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------- schedule


def _pick(rng: random.Random, weights: Dict[str, int]) -> str:
    names = sorted(weights)
    return rng.choices(names, [weights[n] for n in names])[0]


def make_schedule(cfg: ChaosConfig) -> List[Tuple[float, str, Dict[str, Any]]]:
    """The fault events of a run, ``[(at_seconds, kind, args)]`` sorted by time: a pure
    function of ``cfg`` (same seed, same schedule). Kinds: ``restart`` (``down`` seconds),
    ``lost_reply`` / ``drop`` / ``status`` / ``slow`` (``route``, ``times``; ``status`` and
    ``retry_after`` for status, ``delay_ms`` for slow)."""
    rng = random.Random(cfg.seed)
    events: List[Tuple[float, str, Dict[str, Any]]] = []
    t = 0.3
    while True:
        t += rng.expovariate(1.0 / cfg.fault_every)
        if t >= cfg.seconds:
            break
        kind = _pick(rng, KIND_WEIGHTS)
        route = _pick(rng, ROUTE_WEIGHTS)
        args: Dict[str, Any] = {"route": route, "times": rng.randint(1, 3)}
        if kind == "status":
            args["status"] = rng.choice([503, 503, 503, 500, 429])
            args["retry_after"] = rng.choice([None, None, 0, 1])
            args["times"] = rng.randint(1, 4)
        elif kind == "slow":
            # mostly short; now and then one longer than the lease (an ack then finds it expired)
            args["delay_ms"] = rng.choice([rng.randint(20, 300), rng.randint(300, cfg.max_delay_ms),
                                           rng.randint(20, 300), rng.randint(300, cfg.max_delay_ms),
                                           rng.randint(cfg.lease_seconds * 1000, cfg.long_delay_ms)])
            args["times"] = 1 if args["delay_ms"] > cfg.max_delay_ms else rng.randint(1, 5)
        events.append((round(t, 3), kind, args))
    n_restarts = max(1, int(round(cfg.seconds / cfg.restart_every)))
    for _ in range(n_restarts):
        at = rng.uniform(0.8, max(1.0, cfg.seconds - 0.5))
        events.append((round(at, 3), "restart", {"down": round(rng.uniform(0.1, cfg.max_down), 3)}))
    events.sort(key=lambda e: e[0])
    return events


# ---------------------------------------------------------------------------------- broker tap


class _Tap:
    """Wraps the embedded broker's router (test-side, no broker change): records every pop
    that handed out a lease and every processed ack / lease extension with its verdict, and
    for an ack refused with ``Invalid or expired lease`` whether that lease had expired (by
    time) or had been released (by acks, a nack, or a release)."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self._broker = broker
        self._lock = threading.Lock()
        self.pops: Dict[str, float] = {}  # leaseId -> time.monotonic() of the pop
        self.expired_refusals: Dict[str, int] = Counter()  # leaseId -> acks/renewals refused, lease expired
        self.released_refusals: Dict[str, int] = Counter()  # leaseId -> acks refused, lease released
        self.applied_acks = 0
        router = broker.router
        self._orig = router.handle
        router.handle = self._handle  # type: ignore[method-assign]

    def detach(self) -> None:
        self._broker.router.handle = self._orig  # type: ignore[method-assign]

    def _lease_expired(self, lease_id: str) -> bool:
        from queen_sync.testing._util import now_us

        state = self._broker.state
        with state.lock:
            lease = state.leases.get(lease_id)
            return lease is not None and lease.expires <= now_us()

    def _handle(self, method: str, path: str, query: str, raw: bytes, disconnected: Any = None) -> Any:
        status, reply = self._orig(method, path, query, raw, disconnected)
        try:
            self._record(method, path, raw, status, reply)
        except Exception:  # pragma: no cover - the tap must never break the broker
            traceback.print_exc()
        return status, reply

    def _record(self, method: str, path: str, raw: bytes, status: int, reply: Any) -> None:
        now = time.monotonic()
        if method == "GET" and path.startswith("/api/v1/pop/") and isinstance(reply, dict):
            lid = reply.get("leaseId")
            if lid and reply.get("messages"):
                with self._lock:
                    self.pops[lid] = now
            return
        if method != "POST" or status != 200 or not isinstance(reply, list):
            return
        if path in ACK_PATHS:
            items = _ack_items(raw)
            if len(items) != len(reply):
                return
            for it, res in zip(items, reply):
                lid = it.get("leaseId")
                if not isinstance(res, dict) or not lid:
                    continue
                if res.get("success") is True:
                    with self._lock:
                        self.applied_acks += 1
                elif res.get("error") == INVALID_LEASE:
                    expired = self._lease_expired(lid)
                    with self._lock:
                        (self.expired_refusals if expired else self.released_refusals)[lid] += 1
        elif path.startswith("/api/v1/lease/") and path.endswith("/extend"):
            lid = path[len("/api/v1/lease/"):-len("/extend")]
            res = reply[0] if reply and isinstance(reply[0], dict) else {}
            if res.get("error") == "Lease already expired" or (
                    res.get("error") == "Lease not found" and self._lease_expired(lid)):
                with self._lock:
                    self.expired_refusals[lid] += 1


def _ack_items(raw: bytes) -> List[Dict[str, Any]]:
    try:
        body = orjson.loads(raw)
    except ValueError:
        return []
    if isinstance(body, dict) and isinstance(body.get("acknowledgments"), list):
        return [a for a in body["acknowledgments"] if isinstance(a, dict)]
    return [body] if isinstance(body, dict) else []


def _faulted_leases(broker: EmbeddedBroker) -> Dict[str, List[str]]:
    """leaseId -> actions of the faults applied to acks / renewals naming it."""
    out: Dict[str, List[str]] = defaultdict(list)
    for hit in list(broker.faults.history):
        if hit.path.startswith("/api/v1/ack"):
            for it in _ack_items(hit.body):
                if it.get("leaseId"):
                    out[it["leaseId"]].append(hit.action)
        elif hit.path.startswith("/api/v1/lease/"):
            out[hit.path[len("/api/v1/lease/"):].split("/", 1)[0]].append(hit.action)
    return out


# ---------------------------------------------------------------------------------- workload


class _Run:
    def __init__(self, cfg: ChaosConfig, broker: EmbeddedBroker) -> None:
        self.cfg = cfg
        self.broker = broker
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        # payload key "producer:seq" -> how it got pushed
        self.intended: Set[str] = set()
        self.repushed_originals: Set[str] = set()  # pushed again after an error, same items (new ids)
        self.repushed_wire_items: Set[str] = set()  # pushed again via the error's wire items (same ids)
        self.push_errors: Counter = Counter()  # exception class name -> count (unbuffered pushes)
        self.buffer_full = 0
        self.statuses: Counter = Counter()
        self.producer_failures: List[str] = []
        self.deliveries: Dict[str, List[Tuple[int, str, str, str]]] = {g: [] for g in GROUPS}  # (seq, txid, lease, who)
        self.seq = 0
        self.handler_errors: List[str] = []

    # -- producers
    def producer(self, name: str, q: Queen, buffered: bool) -> None:
        rng = random.Random("%d-%s" % (self.cfg.seed, name))
        n = 0
        lo, hi = self.cfg.producer_pause_ms
        try:
            while not self.stop_producing.is_set():
                part = "p%d" % rng.randrange(self.cfg.partitions)
                size = 1 if buffered else rng.choice([1, 1, 2, 3, 5])
                keys = ["%s:%d" % (name, n + i) for i in range(size)]
                n += size
                items = [{"data": {"k": k, "pad": "x" * rng.randint(0, 64)}} for k in keys]
                qb = q.queue(QUEUE).partition(part)
                if buffered:
                    self._push_buffered(qb.buffer(20, 50), items, keys)
                else:
                    self._push(qb, items, keys)
                time.sleep(rng.randint(lo, hi) / 1000.0)
        except BaseException as exc:  # reported as a failure
            self.producer_failures.append("%s: %s\n%s" % (name, exc, traceback.format_exc()))

    def _push(self, qb: Any, items: List[Dict[str, Any]], keys: List[str]) -> None:
        give_up = time.monotonic() + 30.0
        payload: Any = items
        with self.lock:
            self.intended.update(keys)
        while True:
            try:
                got = qb.push(payload)
            except QueenError as exc:
                with self.lock:
                    self.push_errors[type(exc).__name__] += 1
                if time.monotonic() > give_up:
                    raise
                # The safe re-push: the error's wire items (ids fixed) when the client offers
                # them (issue 11.3); else what the README says today: the same items again.
                wire_items = getattr(exc, "items", None)
                with self.lock:
                    if wire_items:
                        self.repushed_wire_items.update(keys)
                    else:
                        self.repushed_originals.update(keys)
                payload = wire_items if wire_items else items
                time.sleep(0.05)
                continue
            with self.lock:
                self.statuses.update(r.get("status") for r in got)
            return

    def _push_buffered(self, qb: Any, items: List[Dict[str, Any]], keys: List[str]) -> None:
        while True:
            try:
                qb.push(items)
            except BufferFullError:  # not accepted: pushing it again is a first send
                with self.lock:
                    self.buffer_full += 1
                if self.stop_producing.is_set():
                    return
                time.sleep(0.05)
                continue
            with self.lock:
                self.intended.update(keys)
            return

    # -- consumers
    def handler(self, group: str, who: str) -> Any:
        def handle(arg: Any) -> None:
            msgs = arg if isinstance(arg, list) else [arg]
            with self.lock:
                for m in msgs:
                    self.seq += 1
                    self.deliveries[group].append((self.seq, m["transactionId"], m.get("leaseId") or "", who))
            # a little work, the same for a message in every run
            if sum(map(ord, msgs[0]["data"]["k"])) % 4 == 0:
                time.sleep(0.002)

        return handle


def _stacks() -> str:
    frames = sys._current_frames()
    out = []
    for t in threading.enumerate():
        f = frames.get(t.ident or -1)
        if f is not None and t is not threading.current_thread():
            out.append("--- thread %s\n%s" % (t.name, "".join(traceback.format_stack(f)[-10:])))
    return "\n".join(out)


# ---------------------------------------------------------------------------------- the run


def run_chaos(cfg: ChaosConfig, broker: Optional[EmbeddedBroker] = None) -> ChaosReport:
    """Run one chaos round (see the module docstring) on ``broker`` (a fresh
    :class:`EmbeddedBroker` when None; it is restarted during the run) and judge it."""
    own = broker is None
    if broker is None:
        broker = EmbeddedBroker().start()
    report = ChaosReport(cfg.seed, schedule=make_schedule(cfg))
    tap = _Tap(broker)
    try:
        _execute(cfg, broker, tap, report)
    finally:
        broker.faults.clear()
        tap.detach()
        if own:
            broker.stop()
    return report


def _execute(cfg: ChaosConfig, broker: EmbeddedBroker, tap: _Tap, report: ChaosReport) -> None:
    fail = report.failures
    run = _Run(cfg, broker)
    q = Queen(broker.url)
    q.queue(QUEUE).config({"leaseTime": cfg.lease_seconds, "retryLimit": 1000}).create()
    consumers = [
        ("g/each", q.queue(QUEUE).group("g").each().batch(4).concurrency(3)),
        ("g/batch", q.queue(QUEUE).group("g").batch(5).concurrency(2)),
        ("h/renew", q.queue(QUEUE).group("h").each().batch(3).concurrency(2).renew_lease(True, 1000)),
    ]
    running = [(who, b.consume(run.handler(who.split("/")[0], who), background=True)) for who, b in consumers]
    producers = [threading.Thread(target=run.producer, args=(name, q, buffered), name="chaos-" + name, daemon=True)
                 for name, buffered in (("u0", False), ("u1", False), ("b0", True), ("b1", True))]
    t_start = time.monotonic()
    for t in producers:
        t.start()

    # -- chaos phase: the schedule, then no more faults
    added: List[Tuple[str, Any]] = []
    downtime = 0.0
    restarts = 0
    for at, kind, args in report.schedule:
        wait = t_start + at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if kind == "restart":
            t0 = time.monotonic()
            broker.stop()
            time.sleep(args["down"])
            broker.start()
            downtime += time.monotonic() - t0
            restarts += 1
            continue
        method, prefix = ROUTES[args["route"]]
        if kind == "lost_reply":
            fault = broker.faults.add(method, prefix, "drop_after", times=args["times"])
        elif kind == "drop":
            fault = broker.faults.add(method, prefix, "drop_before", times=args["times"])
        elif kind == "status":
            fault = broker.faults.add(method, prefix, "status", status=args["status"],
                                      retry_after=args["retry_after"], times=args["times"])
        else:
            fault = broker.faults.add(method, prefix, "delay", delay_ms=args["delay_ms"], times=args["times"])
        added.append(("%s %s" % (kind, args["route"]), fault))
    wait = t_start + cfg.seconds - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    broker.faults.clear()
    t_chaos = time.monotonic() - t_start

    # -- closing phase: every wait bounded
    run.stop_producing.set()
    for t in producers:
        t.join(cfg.hang_seconds)
    hung = [t.name for t in producers if t.is_alive()]
    if hung:
        fail.append(Failure("no hang", "producer(s) %s still pushing %.0f s after the chaos ended:\n%s"
                            % (hung, cfg.hang_seconds, _stacks())))
    for err in run.producer_failures:
        fail.append(Failure("push", err))
    unsent = q.flush_all_buffers(int(cfg.hang_seconds * 1000))
    if unsent:
        fail.append(Failure("buffer flushed", "%d buffered message(s) not sent %.0f s after the chaos ended"
                            % (unsent, cfg.hang_seconds)))
    stored = broker.messages(QUEUE)
    drain = cfg.drain_seconds or cfg.lease_seconds + 10.0
    deadline = time.monotonic() + drain
    stored_tx = {m["transactionId"] for m in stored}
    while time.monotonic() < deadline:
        with run.lock:
            done = all(stored_tx <= {d[1] for d in run.deliveries[g]} for g in GROUPS)
        if done:
            break
        time.sleep(0.05)
    t_drained = time.monotonic() - t_start
    with run.lock:
        late = {g: len(stored_tx - {d[1] for d in run.deliveries[g]}) for g in GROUPS}
    if any(late.values()):
        report.figures["unhandled at drain end"] = late
    results = {}
    for who, c in running:
        t0 = time.monotonic()
        c.stop(drain_timeout_millis=5000)
        try:
            ended = c.join(cfg.hang_seconds)  # stop() returns at the end of the stop phase; threads end after
        except Exception:
            ended = True  # c.error, below
        results[who] = c.result
        took = time.monotonic() - t0
        if not ended:
            fail.append(Failure("no hang", "consumer %s: still running %.1f s after stop()\n%s"
                                % (who, took, _stacks())))
        if c.error is not None:
            fail.append(Failure("consumer", "consumer %s stopped with %r" % (who, c.error)))
    buffer_stats = q.get_buffer_stats()
    transport_stats = q.get_transport_stats()
    left = q.close()
    if left:
        fail.append(Failure("buffer flushed", "close() reports %d message(s) not sent" % left))
    stored = broker.messages(QUEUE)

    _judge(cfg, broker, tap, run, stored, report)
    f = report.figures
    f["elapsed"] = "%.1f s (chaos %.1f s, drained at %.1f s)" % (time.monotonic() - t_start, t_chaos, t_drained)
    f["restarts"] = "%d (down %.1f s in all)" % (restarts, downtime)
    hits: Counter = Counter()
    for name, flt in added:
        hits[name] += flt.hits
    f["faults applied"] = "%d requests hit by %d fault events: %s" % (sum(hits.values()), len(added),
                                                   ", ".join("%s %d" % kv for kv in sorted(hits.items())))
    f["push errors to caller"] = dict(run.push_errors) or 0
    f["re-pushed"] = "%d same items, %d wire items" % (len(run.repushed_originals), len(run.repushed_wire_items))
    f["push statuses"] = dict(run.statuses)
    f["buffer"] = {k: buffer_stats.get(k) for k in ("delivered", "duplicates", "failed") if k in buffer_stats}
    f["buffer full (re-pushed)"] = run.buffer_full
    f["transport retries"] = transport_stats.get("retries")
    for who, r in results.items():
        f["consumer " + who] = "handled %d acked %d ack_failures %d uncertain %d lost %d released %d reason %s" % (
            r.handled, r.acked, r.ack_failures, r.ack_uncertain, r.lost, r.released, r.reason)
        if r.failed:
            fail.append(Failure("consumer", "consumer %s: %d handler call(s) failed" % (who, r.failed)))


def _judge(cfg: ChaosConfig, broker: EmbeddedBroker, tap: _Tap, run: _Run, stored: List[Dict[str, Any]],
           report: ChaosReport) -> None:
    fail = report.failures
    f = report.figures
    # -- stored exactly once
    keys = Counter(m["data"]["k"] for m in stored)
    twice = {k: n for k, n in keys.items() if n > 1}
    missing = sorted(run.intended - set(keys))
    unexpected = sorted(set(keys) - run.intended)
    f["messages"] = "%d pushed, %d stored" % (len(run.intended), len(stored))
    if missing:
        fail.append(Failure("stored exactly once", "%d pushed message(s) not stored (lost): %s"
                            % (len(missing), missing[:10])))
    if unexpected:
        fail.append(Failure("stored exactly once", "%d stored message(s) nobody pushed: %s"
                            % (len(unexpected), unexpected[:10])))
    if twice:
        by_repush = {k for k in twice if k in run.repushed_originals}
        other = sorted(set(twice) - by_repush)
        if by_repush:
            fail.append(Failure(
                "stored exactly once",
                "%d message(s) stored twice, each pushed again (same items) after the push raised %s: the "
                "client minted new ids for the re-push and the error carried no wire items: %s"
                % (len(by_repush), dict(run.push_errors), sorted(by_repush)[:10]),
                known="11.3"))
        if other:
            fail.append(Failure("stored exactly once", "%d message(s) stored more than once: %s"
                                % (len(other), [(k, twice[k]) for k in other[:10]])))
    if run.push_errors:
        # Issue 11.3: pushes are idempotent and retried within a time budget that spans a
        # broker restart of a few seconds; the outages here last at most cfg.max_down.
        fail.append(Failure("push retries span the faults", "%d push(es) raised to the caller %s although "
                            "no outage lasted more than %.1f s" % (sum(run.push_errors.values()),
                                                                   dict(run.push_errors), cfg.max_down),
                            known="11.3"))
    # -- handled at least once, first deliveries in order, redeliveries explained
    by_tx = {m["transactionId"]: m for m in stored}
    order: Dict[str, List[str]] = defaultdict(list)  # partition -> txids in storage order
    for m in stored:
        order[m["partition"]].append(m["transactionId"])
    faulted = _faulted_leases(broker)
    for g in GROUPS:
        dels = run.deliveries[g]
        seen: Dict[str, List[Tuple[int, str, str, str]]] = defaultdict(list)
        for d in dels:
            seen[d[1]].append(d)
        not_handled = [t for t in by_tx if t not in seen]
        if not_handled:
            fail.append(Failure("handled at least once", "group %s: %d of %d stored message(s) never handled: %s"
                                % (g, len(not_handled), len(by_tx), [by_tx[t]["data"]["k"] for t in not_handled[:10]])))
        stray = [t for t in seen if t not in by_tx]
        if stray:
            fail.append(Failure("handled at least once", "group %s: handled %d message(s) not stored: %s"
                                % (g, len(stray), stray[:5])))
        # order of first deliveries per partition
        firsts: Dict[str, List[str]] = defaultdict(list)
        for t, ds in sorted(seen.items(), key=lambda kv: kv[1][0][0]):
            if t in by_tx:
                firsts[by_tx[t]["partition"]].append(t)
        for part, got in sorted(firsts.items()):
            want = [t for t in order[part] if t in seen]
            if got != want:
                i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
                fail.append(Failure("order of first deliveries", "group %s partition %s: delivery %d is %s, "
                                    "storage order says %s" % (g, part, i, by_tx[got[i]]["data"]["k"],
                                                               by_tx[want[i]]["data"]["k"])))
        # redeliveries
        counts: Counter = Counter()
        unexplained = []
        for t, ds in seen.items():
            for k in range(1, len(ds)):
                leases = {d[2] for d in ds[: k + 1]}
                actions = sorted({a for lid in leases for a in faulted.get(lid, ())})
                if actions:
                    counts["%s on an ack/renewal of its lease" % "+".join(actions)] += 1
                elif any(tap.expired_refusals.get(lid) for lid in leases):
                    counts["its lease expired before the ack"] += 1
                else:
                    counts["unexplained"] += 1
                    unexplained.append((t, ds[: k + 1]))
        f["redeliveries " + g] = "%d of %d deliveries: %s" % (
            sum(counts.values()), len(dels), dict(counts) or "none")
        if unexplained:
            lines = []
            for t, ds in unexplained[:5]:
                lines.append("%s (%s): %s" % (
                    by_tx[t]["data"]["k"] if t in by_tx else t, by_tx.get(t, {}).get("partition"),
                    "; ".join("#%d lease %s by %s (refused: expired %d, released %d)" % (
                        s, lid[-12:], who, tap.expired_refusals.get(lid, 0), tap.released_refusals.get(lid, 0))
                        for s, _, lid, who in ds)))
            fail.append(Failure("redeliveries explained", "group %s: %d redelivery(ies) with no fault on an ack or "
                                "renewal of their lease and no expired lease:\n    %s"
                                % (g, len(unexplained), "\n    ".join(lines))))
