"""Metrics: names with bounded parts, StatsD lines (plain, influxdb, datadog), config read lazily."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from airflow_kafka_events import metrics
from airflow_kafka_events.airflow_config import airflow_option, as_bool
from airflow_kafka_events.errors import DeliveryOutcomeUnknownError, NotSentError, RecordTooLargeError

pytestmark = pytest.mark.unit


@pytest.fixture
def udp() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5.0)
    yield sock
    sock.close()


def _lines(sock: socket.socket, count: int) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + 5.0
    while len(got) < count and time.monotonic() < deadline:
        got.append(sock.recv(65536).decode())
    return got


@pytest.fixture(autouse=True)
def _fresh_sink():
    metrics.set_sink(None)
    yield
    metrics.set_sink(None)


def test_plain_statsd_drops_tags_and_names_stay_bounded(udp):
    metrics.set_sink(metrics.StatsdSink("127.0.0.1", udp.getsockname()[1], "airflow"))
    metrics.delivered("emit", "airflow.asset-events", 0.0123)
    metrics.delivered("my-own-role-42", "t", 0.001)
    metrics.dead_lettered("signature-invalid", "bridge", "airflow.asset-events")
    lines = _lines(udp, 6)
    assert lines[0] == "airflow.kafka_events.producer.delivered:1|c"
    assert lines[1] == "airflow.kafka_events.producer.delivery_time.emit:12.300|ms"
    assert lines[2] == "airflow.kafka_events.emit.latency:12.300|ms"
    assert lines[4] == "airflow.kafka_events.producer.delivery_time.other:1.000|ms"  # unknown role
    assert lines[5] == "airflow.kafka_events.dlq.records.signature_invalid:1|c"


def test_influxdb_and_datadog_tags(udp):
    port = udp.getsockname()[1]
    metrics.set_sink(metrics.StatsdSink("127.0.0.1", port, "airflow", "influxdb"))
    metrics.incr(metrics.PAGES_WRITTEN, tags={"topic": "airflow.trigger-events"})
    metrics.set_sink(metrics.StatsdSink("127.0.0.1", port, "", "datadog"))
    metrics.gauge(metrics.BRIDGE_LAG, 7, {"topic": "a", "partition": "2"})
    metrics.incr("x", tags={"bad": "a,b=c"})  # a tag that would break the line is dropped
    assert _lines(udp, 3) == [
        "airflow.kafka_events.stream.pages_written,topic=airflow.trigger-events:1|c",
        "kafka_events.bridge.lag:7|g|#topic:a,partition:2",
        "x:1|c",
    ]


def test_failure_causes_are_a_fixed_set():
    assert metrics.failure_cause(NotSentError("x")) == "not_sent"
    assert metrics.failure_cause(DeliveryOutcomeUnknownError("x")) == "outcome_unknown"
    assert metrics.failure_cause(RecordTooLargeError("x", size=2, limit=1, limit_name="m")) == "too_large"
    assert metrics.failure_cause(ValueError("x")) == "other"


def test_config_comes_from_the_environment_then_airflow_cfg(tmp_path, udp):
    cfg = tmp_path / "airflow.cfg"
    port = udp.getsockname()[1]
    cfg.write_text(f"[metrics]\nstatsd_on = True\nstatsd_host = 127.0.0.1\nstatsd_port = {port}\n")
    env = {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__METRICS__STATSD_PREFIX": "custom"}
    assert airflow_option("metrics", "statsd_port", environ=env) == str(port)
    assert as_bool(airflow_option("metrics", "statsd_on", environ=env))
    sink = metrics.statsd_sink_from_config(env)
    assert sink is not None and sink.address == ("127.0.0.1", port) and sink.prefix == "custom."
    assert metrics.statsd_sink_from_config({"AIRFLOW_HOME": str(tmp_path / "none")}) is None


def test_a_broken_sink_never_breaks_the_caller():
    class Broken:
        def incr(self, *args):
            raise RuntimeError("boom")

    metrics.set_sink(Broken())  # type: ignore[arg-type]
    metrics.incr("x")  # no exception


def test_nothing_is_read_or_sent_at_import(tmp_path):
    code = (
        "import sys, airflow_kafka_events.metrics as m\n"
        "assert m._PROCESS_SINK.current is None\n"
        "assert not [n for n in sys.modules if n == 'airflow' or n.startswith('airflow.')]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


class _Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float, dict[str, str]]] = []

    def gauge(self, name, value, tags):
        self.calls.append(("gauge", name, value, dict(tags)))

    def incr(self, name, count, tags):
        self.calls.append(("incr", name, count, dict(tags)))

    def timing(self, name, ms, tags):
        self.calls.append(("timing", name, ms, dict(tags)))


def test_a_batch_of_deliveries_is_one_count_and_its_slowest_time(udp):
    metrics.set_sink(metrics.StatsdSink("127.0.0.1", udp.getsockname()[1], "airflow"))
    metrics.delivered("stream", "airflow.trigger-events", 0.25, count=128)
    assert _lines(udp, 2) == [
        "airflow.kafka_events.producer.delivered:128|c",
        "airflow.kafka_events.producer.delivery_time.stream:250.000|ms",
    ]


def test_a_producers_deliveries_are_reported_per_topic_at_most_every_interval():
    from airflow_kafka_events.kafka.producer import DeliveryTally

    sink = _Recorded()
    metrics.set_sink(sink)
    tally = DeliveryTally("stream", interval=3600.0)
    for seconds in (0.002, 0.009, 0.004):
        tally.add("a", seconds)
    tally.add("b", 0.001)
    tally.report()  # the interval has not passed since the tally was made
    assert sink.calls == []
    tally.report(force=True)
    tags_a, tags_b = {"role": "stream", "topic": "a"}, {"role": "stream", "topic": "b"}
    assert sink.calls == [
        ("incr", metrics.DELIVERED, 3, tags_a),
        ("timing", f"{metrics.DELIVERY_TIME}.stream", pytest.approx(9.0), tags_a),
        ("incr", metrics.DELIVERED, 1, tags_b),
        ("timing", f"{metrics.DELIVERY_TIME}.stream", pytest.approx(1.0), tags_b),
    ]
    sink.calls.clear()
    tally.report(force=True)  # nothing counted since
    assert sink.calls == []
    due = DeliveryTally("emit", interval=0.0)
    due.add("c", 0.003)
    due.report()
    assert [call[:3] for call in sink.calls] == [
        ("incr", metrics.DELIVERED, 1),
        ("timing", f"{metrics.DELIVERY_TIME}.emit", pytest.approx(3.0)),
        ("timing", metrics.EMIT_LATENCY, pytest.approx(3.0)),
    ]
