"""Metrics: Airflow's own stats inside Airflow, a plain StatsD sink with the same names outside it.

Inside an Airflow process (triggerer, worker) the metrics go through ``airflow.sdk.observability.stats``,
so whatever ``[metrics]`` configures — StatsD, DogStatsD, OpenTelemetry — receives them (with Airflow's
``statsd_prefix``, default ``airflow``).  The bridge and the CLI import no Airflow: they send StatsD
lines over UDP themselves, configured by the same ``[metrics]`` options (``AIRFLOW__METRICS__STATSD_ON``,
``_HOST``, ``_PORT``, ``_PREFIX``, ``_INFLUXDB_ENABLED``, ``_DATADOG_ENABLED`` or airflow.cfg), so both
produce the same names.  Configuration is read at the first metric, never at import.

Cardinality is bounded: names hold only fixed sets (a producer role, a dead-letter reason, a failure
cause), never a stream id, run id, asset or topic; those go in tags, which plain StatsD drops unless
influxdb-style tags (``statsd_influxdb_enabled``) or DogStatsD are on.  A metric never raises.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from airflow_kafka_events.airflow_config import airflow_option, as_bool

log = logging.getLogger(__name__)

#: Environment variable choosing the sink: ``airflow``, ``statsd`` or ``off`` (default: ``airflow``
#: when Airflow is loaded in the process, else ``statsd`` when ``[metrics] statsd_on``, else off).
ENV_SINK = "AIRFLOW_KAFKA_EVENTS_METRICS"

# ----------------------------------------------------------------------------- names
# Each name's ``#:`` line is its entry in the documentation's metrics reference (type; tags; what).
#: timer (ms); role, topic; emit → Kafka acknowledgement (acks=all) of an asset event, the slowest of
#: the emits acknowledged within 0.1 s (one observation per such batch)
EMIT_LATENCY = "kafka_events.emit.latency"
#: counter; role, topic; records acknowledged by Kafka
DELIVERED = "kafka_events.producer.delivered"
#: timer (ms), ``.<role>``; role, topic; send → acknowledgement, the slowest of the records a producer
#: acknowledged within 0.1 s (one observation per such batch); role ``emit``, ``stream``,
#: ``dead_letter``, ``iteration_results``, ``default``, ``other``
DELIVERY_TIME = "kafka_events.producer.delivery_time"
#: counter, ``.<cause>``; role, topic; failed deliveries: ``not_sent``, ``outcome_unknown``,
#: ``too_large``, ``authentication``, ``tls``, ``other``
DELIVERY_FAILED = "kafka_events.producer.delivery_failed"
#: counter, ``.<reason>``; consumer (``watcher``/``bridge``), source_topic; dead letters by reason
#: (``undecodable``, ``signature_invalid``, ``unknown_asset``, …)
DLQ_RECORDS = "kafka_events.dlq.records"
#: counter; topic; pages a streaming trigger wrote (acknowledged)
PAGES_WRITTEN = "kafka_events.stream.pages_written"
#: counter, ``.complete`` / ``.failed``; no tags; stream attempts that ended (``failed``: ``pages()`` raised)
STREAMS_ENDED = "kafka_events.stream.ended"
#: counter; topic; pages a stream consumer (operator, ``@task.stream_consumer``, a resumed streaming
#: task) handed to its handler
PAGES_HANDLED = "kafka_events.stream.pages_handled"
#: timer (ms); topic; how long a consumer's handler took for one batch
BATCH_TIME = "kafka_events.stream.batch_time"
#: gauge; topic; seconds between a batch's last page being written and being handled
CONSUMER_LAG = "kafka_events.stream.consumer_lag"
#: counter; topic; envelopes a watcher turned into Airflow asset events
WATCHER_EVENTS_FIRED = "kafka_events.watcher.events_fired"
#: gauge; topic, partition; records behind the partition's end (at most once a second per partition)
WATCHER_LAG = "kafka_events.watcher.lag"
#: counter, ``.<ErrorType>``; no tags; failures inside a watcher's admission (dead-lettered
#: ``internal-error``)
WATCHER_ERRORS = "kafka_events.watcher.errors"
#: counter, ``.<outcome>``; topic; ``posted``, ``already_present``, ``duplicate``, ``dead_lettered``,
#: ``skipped``
BRIDGE_RECORDS = "kafka_events.bridge.records"
#: gauge; topic, partition; records behind the partition's end
BRIDGE_LAG = "kafka_events.bridge.lag"
#: counter, ``.<ErrorType>``; no tags; the fatal error a bridge stopped with
BRIDGE_ERRORS = "kafka_events.bridge.errors"

#: Producer roles that get a name of their own; any other role is reported as ``other``.
KNOWN_ROLES = frozenset({"default", "emit", "stream", "dead-letter", "iteration-results"})
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def name_part(value: str) -> str:
    """``value`` as one segment of a metric name (``dead-letter`` → ``dead_letter``)."""
    return _UNSAFE.sub("_", value.strip().lower()) or "unknown"


@functools.lru_cache(maxsize=64)
def role_part(role: str) -> str:
    return name_part(role if role in KNOWN_ROLES else "other")


# ----------------------------------------------------------------------------- sinks
class Sink(Protocol):
    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None: ...
    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None: ...
    def timing(self, name: str, ms: float, tags: Mapping[str, str]) -> None: ...


class NullSink:
    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None:
        return None

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        return None

    def timing(self, name: str, ms: float, tags: Mapping[str, str]) -> None:
        return None


class StatsdSink:
    """StatsD lines over UDP (standard library only).

    :param tag_style: ``None`` (plain StatsD: tags dropped), ``"influxdb"`` (``name,k=v:1|c``) or
        ``"datadog"`` (``name:1|c|#k:v``).
    """

    def __init__(self, host: str, port: int, prefix: str = "airflow", tag_style: str | None = None):
        self.address = (host, int(port))
        self.prefix = f"{prefix}." if prefix else ""
        self.tag_style = tag_style
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_DGRAM)

    def _line(self, name: str, value: str, kind: str, tags: Mapping[str, str]) -> str:
        stat = self.prefix + name
        clean = {k: str(v) for k, v in tags.items() if not set(f"{k}{v}") & set(",=:|#")}
        if self.tag_style == "influxdb" and clean:
            stat += "".join(f",{k}={v}" for k, v in clean.items())
        line = f"{stat}:{value}|{kind}"
        if self.tag_style == "datadog" and clean:
            line += "|#" + ",".join(f"{k}:{v}" for k, v in clean.items())
        return line

    def _send(self, line: str) -> None:
        try:
            self._socket.sendto(line.encode("ascii", "replace"), self.address)
        except OSError as exc:  # a metric never breaks the caller
            log.debug("cannot send metric %r: %s", line, exc)

    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None:
        self._send(self._line(name, str(count), "c", tags))

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._send(self._line(name, f"{max(0.0, value):g}", "g", tags))

    def timing(self, name: str, ms: float, tags: Mapping[str, str]) -> None:
        self._send(self._line(name, f"{ms:.3f}", "ms", tags))


class AirflowSink:
    """``airflow.sdk.observability.stats``; initialised from ``[metrics]`` when the process did not."""

    def __init__(self) -> None:
        from airflow.sdk._shared.observability.metrics import stats as shared_stats
        from airflow.sdk.observability import stats

        if getattr(shared_stats, "_factory", None) is None:
            from airflow.sdk.configuration import conf
            from airflow.sdk.observability.metrics import stats_utils

            stats.initialize(
                factory=stats_utils.get_stats_factory(),
                export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=False),
            )
        self._stats = stats

    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None:
        self._stats.incr(name, count, tags=dict(tags))

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._stats.gauge(name, value, tags=dict(tags))

    def timing(self, name: str, ms: float, tags: Mapping[str, str]) -> None:
        self._stats.timing(name, ms, tags=dict(tags))


def statsd_sink_from_config(environ: Mapping[str, str] | None = None) -> StatsdSink | None:
    """The StatsD sink ``[metrics]`` configures (env or airflow.cfg), ``None`` when StatsD is off."""

    def option(key: str, default: str | None = None) -> str | None:
        return airflow_option("metrics", key, default, environ=environ)

    datadog = as_bool(option("statsd_datadog_enabled"))
    if not (as_bool(option("statsd_on")) or datadog):
        return None
    style = "datadog" if datadog else ("influxdb" if as_bool(option("statsd_influxdb_enabled")) else None)
    return StatsdSink(
        option("statsd_host", "localhost") or "localhost",
        int(option("statsd_port", "8125") or 8125),
        option("statsd_prefix", "airflow") or "",
        style,
    )


def _make_sink() -> Sink:
    choice = os.environ.get(ENV_SINK, "").strip().lower()
    if choice == "off":
        return NullSink()
    if choice == "airflow" or (not choice and "airflow.sdk" in sys.modules):
        try:
            return AirflowSink()
        except Exception as exc:  # a task SDK without stats, a broken [metrics]: no metrics, no failure
            log.warning("Airflow's stats are not usable (%s); metrics of this process go nowhere", exc)
            return NullSink()
    return statsd_sink_from_config() or NullSink()


class _ProcessSink:
    """The process's one sink, made at the first metric (process-wide on purpose, as Airflow's ``Stats``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: Sink | None = None

    def get(self) -> Sink:
        current = self.current
        if current is None:
            with self.lock:
                if self.current is None:
                    self.current = _make_sink()
                current = self.current
        return current

    def set(self, new: Sink | None) -> None:
        with self.lock:
            self.current = new


_PROCESS_SINK = _ProcessSink()
# Held across fork(), so that a forked child never inherits the lock taken by a thread it does not have.
os.register_at_fork(
    before=_PROCESS_SINK.lock.acquire,
    after_in_parent=_PROCESS_SINK.lock.release,
    after_in_child=_PROCESS_SINK.lock.release,
)


def sink() -> Sink:
    """The process's sink, made at the first metric."""
    return _PROCESS_SINK.get()


def set_sink(new: Sink | None) -> None:
    """Use ``new`` from now on (``None``: decide again at the next metric)."""
    _PROCESS_SINK.set(new)


def _off() -> bool:
    """Whether metrics go nowhere (a metric per delivered record then costs only this check)."""
    try:
        return isinstance(sink(), NullSink)
    except Exception:  # a sink that cannot be made: _safely logs it
        return False


def _safely(method: str, name: str, value: Any, tags: Mapping[str, str] | None) -> None:
    try:
        getattr(sink(), method)(name, value, {k: str(v) for k, v in (tags or {}).items() if v is not None})
    except Exception as exc:  # a metric never breaks the caller
        log.debug("metric %s failed: %s", name, exc)


def incr(name: str, count: int = 1, tags: Mapping[str, str] | None = None) -> None:
    _safely("incr", name, count, tags)


def gauge(name: str, value: float, tags: Mapping[str, str] | None = None) -> None:
    _safely("gauge", name, value, tags)


def timing(name: str, seconds: float, tags: Mapping[str, str] | None = None) -> None:
    """A duration, given in seconds, sent in milliseconds."""
    _safely("timing", name, seconds * 1000.0, tags)


# ----------------------------------------------------------------------------- what is measured
def delivered(role: str, topic: str, seconds: float, count: int = 1) -> None:
    """``count`` records acknowledged by Kafka, the slowest ``seconds`` after it was sent (a producer
    reports its deliveries in batches: one timer observation per batch)."""
    if _off():
        return
    part = role_part(role)
    tags = {"role": part, "topic": topic}
    incr(DELIVERED, count, tags=tags)
    timing(f"{DELIVERY_TIME}.{part}", seconds, tags)
    if role == "emit":
        timing(EMIT_LATENCY, seconds, tags)


#: Delivery failure causes (the error's class) that get a name of their own.
_FAILURE_CAUSES = {
    "RecordTooLargeError": "too_large",
    "AuthenticationNotSentError": "authentication",
    "TlsNotSentError": "tls",
    "NotSentError": "not_sent",
    "DeliveryOutcomeUnknownError": "outcome_unknown",
}


def failure_cause(error: BaseException) -> str:
    """The bounded cause of a failed delivery: too_large, authentication, tls, not_sent, ..."""
    for cls in type(error).__mro__:
        if cls.__name__ in _FAILURE_CAUSES:
            return _FAILURE_CAUSES[cls.__name__]
    return "other"


def delivery_failed(role: str, topic: str, error: BaseException) -> None:
    incr(f"{DELIVERY_FAILED}.{failure_cause(error)}", tags={"role": role_part(role), "topic": topic})


def dead_lettered(reason: str, consumer: str | None = None, topic: str | None = None) -> None:
    """A record written to a dead-letter topic (``reason`` is one of ``dlq.REASONS``)."""
    tags = {"consumer": consumer or "", "source_topic": topic or ""}
    incr(f"{DLQ_RECORDS}.{name_part(reason)}", tags={k: v for k, v in tags.items() if v})


def batch_handled(topic: str, pages: int, seconds: float, lag_seconds: float) -> None:
    """A stream consumer handed ``pages`` pages to its handler, which took ``seconds``; the
    batch's last page was written ``lag_seconds`` before it was handled (the consumer's lag)."""
    tags = {"topic": topic}
    incr(PAGES_HANDLED, pages, tags)
    timing(BATCH_TIME, seconds, tags)
    gauge(CONSUMER_LAG, max(0.0, lag_seconds), tags)


def error_part(error: BaseException) -> str:
    """An error's class name as a name segment (a bounded set: the classes that exist)."""
    return name_part(type(error).__name__)


class LagReporter:
    """Consumer lag (high watermark - next offset) per partition as a gauge, at most once per
    ``interval`` seconds per partition; the watermark is the client's cached one (no request)."""

    def __init__(self, name: str, interval: float = 1.0, *, records: str | None = None) -> None:
        self.name, self.interval, self.records = name, interval, records
        self._last: dict[tuple[str, int], float] = {}

    def record(self, outcome: str, client: Any, topic: str, partition: int, offset: int) -> None:
        """Count one handled record (``<records>.<outcome>``) and observe the lag."""
        incr(f"{self.records}.{name_part(outcome)}", tags={"topic": topic})
        self.observe(client, topic, partition, offset)

    def observe(self, client: Any, topic: str, partition: int, offset: int) -> None:
        now = time.monotonic()
        if now - self._last.get((topic, partition), -1e9) < self.interval:
            return
        self._last[(topic, partition)] = now
        try:
            from confluent_kafka import TopicPartition

            _low, high = client.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        except Exception as exc:
            log.debug("no watermark of %s[%d] for %s: %s", topic, partition, self.name, exc)
            return
        if high is not None and high >= 0:
            gauge(self.name, max(0, int(high) - offset - 1), {"topic": topic, "partition": str(partition)})
