"""Prometheus metrics: the numbers an operator watches, in one registry."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections import Counter as Counter_
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _untyped_go_float

REGISTRY = CollectorRegistry(auto_describe=True)
# How the exposition writes a bucket's bound ("0.001", "+Inf").
_go_float = cast(Callable[[float], str], _untyped_go_float)


class LoopHistogram(Collector):
    """A histogram observed from the event loop's thread only (no labels, no lock).

    ``prometheus_client``'s ``Histogram.observe`` takes two locks and walks the buckets, which
    the webhook dispatcher would pay on every delivery. Here an observation is a bisect
    and two additions. A scrape (``collect``) may see an observation in its bucket and not yet
    in the sum, never a torn number; the exposition is the same as ``Histogram``'s, without
    the ``_created`` sample.
    """

    def __init__(self, name: str, documentation: str, *, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = [*sorted(buckets), math.inf]
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        registry.register(self)

    def observe(self, amount: float) -> None:
        """Count ``amount`` in the first bucket whose upper bound it does not exceed."""
        self._counts[bisect_left(self._bounds, amount)] += 1
        self._sum += amount

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            self._name, self._documentation,
            buckets=[(_go_float(bound), count) for bound, count in
                     zip(self._bounds, itertools.accumulate(self._counts), strict=True)],
            sum_value=self._sum,
        )
        yield family

EVENTS_INGESTED = Counter(
    "ridecast_events_ingested_total", "Events appended to the log.", ["message_type"],
    registry=REGISTRY,
)


def count_ingested(message_types: Sequence[str]) -> None:
    """Add appended events to ``EVENTS_INGESTED``, one increment per type present.

    The labelled children are looked up once per type and kept (``labels()`` takes a lock
    and builds a key on every call: the ingest path calls this for every batch).
    """
    counts = ({message_types[0]: 1} if len(message_types) == 1
              else Counter_(message_types))  # a batch is counted in C
    for message_type, count in counts.items():
        child = _INGESTED_BY_TYPE.get(message_type)
        if child is None:
            child = _INGESTED_BY_TYPE[message_type] = EVENTS_INGESTED.labels(message_type)
        child.inc(count)


# Bounded: message types are the closed set of the spec (ingest refuses any other).
_INGESTED_BY_TYPE: dict[str, Any] = {}

INGEST_REJECTED = Counter(
    "ridecast_ingest_rejected_total", "Ingest requests refused, by error code.", ["code"],
    registry=REGISTRY,
)
# Observed per ingest request, on the event loop's thread (both ingest paths).
INGEST_LATENCY = LoopHistogram(
    "ridecast_ingest_seconds", "Time to validate, commit and publish one ingest request.",
    registry=REGISTRY, buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
EVENTLOG_COMMITS = Counter(
    "ridecast_eventlog_commits_total",
    "Group commits of the event log; ridecast_eventlog_events_total over it is the mean "
    "number of events per commit.", registry=REGISTRY,
)
# Observed per group commit that succeeds, on the event loop's thread: the statement (or
# SQLite's steps) and the store's flush, from the writer's start to its answer. With the
# claim's histogram below it splits a delivery's latency into its store parts
# (docs/webhooks.md, "Latency").
EVENTLOG_COMMIT_SECONDS = LoopHistogram(
    "ridecast_eventlog_commit_seconds",
    "Time of one group commit of the event log, from its start to the store's answer.",
    registry=REGISTRY, buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
EVENTLOG_EVENTS = Counter(
    "ridecast_eventlog_events_total", "Events written by the event log's group commits.",
    registry=REGISTRY,
)
WS_CONNECTIONS = Gauge(
    "ridecast_ws_connections", "Open websocket streams.", registry=REGISTRY
)
WS_FRAMES_SENT = Counter(
    "ridecast_ws_frames_sent_total", "Frames queued to websocket clients.", registry=REGISTRY
)
WS_FANOUT = Histogram(
    "ridecast_ws_fanout_seconds",
    "Time for the hub to hand one bus batch to every receiving stream.",
    registry=REGISTRY,
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)
WS_CLOSED = Counter(
    "ridecast_ws_closed_total", "Websocket streams closed by the server, by reason.", ["reason"],
    registry=REGISTRY,
)
SIMULATOR_ENGINE_PROCESSES = Gauge(
    "ridecast_simulator_engine_processes",
    "Engine processes this process has running for its simulator runs.", registry=REGISTRY,
)
SIMULATOR_ENGINES = Gauge(
    "ridecast_simulator_engines",
    "Simulator engines alive in this process's engine processes (a run that finished or "
    "stopped has none).", registry=REGISTRY,
)
SIMULATOR_ENGINES_LOST = Counter(
    "ridecast_simulator_engine_processes_lost_total",
    "Engine processes that exited while serving; their runs stopped.", registry=REGISTRY,
)
WEBHOOK_ATTEMPTS = Counter(
    "ridecast_webhook_attempts_total", "Webhook delivery attempts, by outcome.", ["outcome"],
    registry=REGISTRY,
)
WEBHOOK_QUEUE = Gauge(
    "ridecast_webhook_queue_depth", "Webhook deliveries pending or in flight.", registry=REGISTRY
)
# Per simulation with deliveries still to send (the oldest ``webhook_backlog_metric_sims``
# of them, so the label set stays bounded), set by the dispatcher's maintenance loop.
WEBHOOK_BACKLOG = Gauge(
    "ridecast_webhook_backlog", "Webhook deliveries still to send, per simulation.",
    ["simulation_id"], registry=REGISTRY,
)
WEBHOOK_OLDEST_AGE = Gauge(
    "ridecast_webhook_oldest_undelivered_age_seconds",
    "Age of the simulation's oldest event whose webhook delivery is still to send.",
    ["simulation_id"], registry=REGISTRY,
)
# Observed per delivery by the dispatcher, on the event loop's thread.
WEBHOOK_LATENCY = LoopHistogram(
    "ridecast_webhook_attempt_seconds", "Duration of one webhook delivery attempt.",
    registry=REGISTRY, buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10),
)
# Observed per claim transaction of this process's webhook claimer that commits (results
# recorded, units leased, their bodies read), on the event loop's thread.
WEBHOOK_CLAIM_SECONDS = LoopHistogram(
    "ridecast_webhook_claim_seconds",
    "Time of one webhook claim transaction: finished attempts recorded, new deliveries "
    "leased and their bodies read.",
    registry=REGISTRY, buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
WS_DIRECT_STREAMS = Counter(
    "ridecast_ws_direct_streams_total",
    "Streams on the main HTTP port written directly to their connection (not through ASGI "
    "messages); every stream should be, under uvicorn's websockets-sansio protocol.",
    registry=REGISTRY,
)
LIMITS_FALLBACK = Gauge(
    "ridecast_limits_local_fallback",
    "1 while this node cannot reach Redis and enforces the cluster's limits (failed "
    "authentications, requests per key, streams per user and token) on its own counts.",
    registry=REGISTRY,
)
QUOTA_USAGE = Gauge(
    "ridecast_quota_usage",
    "An organisation's usage of a quota (runs, vehicles, simulations, templates, "
    "event_bytes: the cluster's, read from the store; events_per_s: this node's, sum the "
    "nodes). organisation is the organisation's id; only the RIDECAST_QUOTA_METRICS_ORGS "
    "largest users of each quota are named, the rest are summed under organisation=\"other\".",
    ["organisation", "quota"], registry=REGISTRY,
)
QUOTA_LIMIT = Gauge(
    "ridecast_quota_limit",
    "Each quota's limit per organisation (RIDECAST_QUOTA_*).",
    ["quota"], registry=REGISTRY,
)
QUOTA_REFUSED = Counter(
    "ridecast_quota_refused_total",
    "Requests refused because they would break an organisation's quota, by error code.",
    ["code"], registry=REGISTRY,
)
QUOTA_THROTTLED_SECONDS = Counter(
    "ridecast_quota_throttled_seconds_total",
    "Seconds simulator runs on this node waited for their organisation's events per second.",
    registry=REGISTRY,
)
