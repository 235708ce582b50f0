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
