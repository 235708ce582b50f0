"""Metrics received on a real StatsD UDP socket from real paths against the real broker.

* inside Airflow: Airflow's own stats (``airflow.sdk.observability.stats`` with ``[metrics] statsd_on``
  and influxdb-style tags) carry a streaming trigger's pages, the producer's delivery times and an
  asset watcher's events, lag and dead letters;
* outside Airflow: the CLI's ``emit`` and the ``bridge`` command, in processes of their own that import
  no Airflow, send the same names through their own StatsD sink configured by ``AIRFLOW__METRICS__*``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_kafka_events import metrics
from harness.statsd_server import StatsdServer
from harness.waiting import until
from harness.watchers import Watchers, memory_stores, watcher_conn
from integration.bridge.fake_airflow import FakeAirflow
from integration.bridge.test_bridge_kafka import ASSET as BRIDGE_ASSET
from integration.bridge.test_bridge_kafka import PASSWORD, envelope, send, send_raw
from integration.triggers.sample_triggers import PagedTrigger, collect
from integration.triggers.test_asset_watcher import ASSET_A, _event

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SRC_DIR = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def statsd() -> Iterator[StatsdServer]:
    server = StatsdServer()
    yield server
    server.close()


@pytest.fixture
def airflow_stats(statsd: StatsdServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdServer]:
    """Airflow's stats pointed at ``statsd`` the way an Airflow process sets them up."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    for key, value in statsd.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    metrics.set_sink(None)
    monkeypatch.setenv(metrics.ENV_SINK, "airflow")
    try:
        yield statsd
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        metrics.set_sink(None)


def test_a_streaming_trigger_and_a_watcher_report_through_airflow_stats(
    airflow_stats, kafka_bootstrap, new_topic, monkeypatch
):
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    topic = new_topic(partitions=3)
    run = f"dag/t/-1/run-{uuid.uuid4().hex}"
    asyncio.run(collect(PagedTrigger(total=4, trigger_run_id=run, topic=topic)))
    # pages are counted as their receipts are taken, in batches; no stream id or run id in any name:
    # one name per topic tag
    airflow_stats.wait_for_total(rf"airflow\.kafka_events\.stream\.pages_written,topic={topic}:\d+\|c", 4)
    airflow_stats.wait_for(r"airflow\.kafka_events\.stream\.ended\.complete:1\|c")
    # the producer's deliveries (4 pages, the end marker) are counted in batches too, each batch with
    # one delivery time (its slowest)
    delivered = airflow_stats.wait_for_total(
        rf"airflow\.kafka_events\.producer\.delivered,role=stream,topic={topic}:\d+\|c", 5
    )
    times = airflow_stats.wait_for(
        rf"airflow\.kafka_events\.producer\.delivery_time\.stream,role=stream,topic={topic}:[0-9.]+\|ms",
        count=len(delivered),
    )
    assert len(times) == len(delivered)

    # a consumer of that stream: pages handled, the handler's time and its lag behind the writes
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from airflow_kafka_events.streams.consuming.consumption import drive_stream
    from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader

    handled: list[int] = []
    config = KafkaSettings({"bootstrap.servers": kafka_bootstrap}).consumer_config(
        f"m-{uuid.uuid4().hex[:8]}"
    )
    with StreamReader(
        config, topic, run, options=ReadOptions(max_events=10, max_wait=0.2, start_timeout=30, gap_timeout=30)
    ) as reader:
        summary, _ = drive_stream(
            reader,
            trigger_run_id=run,
            topic=topic,
            handle_batch=lambda events: handled.extend(e.sequence_index for e in events),
        )
    assert handled == [0, 1, 2, 3] and summary.finished
    counts = airflow_stats.wait_for(rf"airflow\.kafka_events\.stream\.pages_handled,topic={topic}:(\d+)\|c")
    assert sum(int(line.split(":")[1].split("|")[0]) for line in counts) == 4
    airflow_stats.wait_for(rf"airflow\.kafka_events\.stream\.batch_time,topic={topic}:[0-9.]+\|ms")
    airflow_stats.wait_for(rf"airflow\.kafka_events\.stream\.consumer_lag,topic={topic}:[0-9.]+\|g")

    # the asset watcher: two events fired, one poison record dead-lettered, lag reported
    watched = new_topic(partitions=1, prefix="watched")
    dlq_topic = new_topic(partitions=1, prefix="watched-dlq")
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_metrics", f"w-{uuid.uuid4().hex[:8]}")
    memory_stores(monkeypatch)
    from airflow_kafka_events.assets.publish import publish
    from airflow_kafka_events.kafka.producer import get_producer
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger

    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    publish(_event(ASSET_A, extra={"n": 1}), producer=producer, topic=watched)
    producer.send_and_wait(watched, b"not an envelope", key=ASSET_A.uri.encode())
    publish(_event(ASSET_A, extra={"n": 2}), producer=producer, topic=watched)
    trigger = KafkaAssetEventTrigger(
        asset_uri=ASSET_A.uri, topics=[watched], kafka_config_id="kafka_watcher_metrics", dlq_topic=dlq_topic
    )

    async def scenario() -> Watchers:
        async with Watchers().running({1: trigger}) as watchers:
            await until(lambda: len(watchers.fired[1]) == 2, 90, "two events fired")
        return watchers

    asyncio.run(scenario())
    airflow_stats.wait_for(rf"airflow\.kafka_events\.watcher\.events_fired,topic={watched}:1\|c", count=2)
    airflow_stats.wait_for(
        rf"airflow\.kafka_events\.dlq\.records\.undecodable,consumer=watcher,source_topic={watched}:1\|c"
    )
    airflow_stats.wait_for(rf"airflow\.kafka_events\.watcher\.lag,topic={watched},partition=0:\d+\|g")


def _environ(statsd: StatsdServer) -> dict[str, str]:
    """A process that knows no Airflow: no AIRFLOW* variables but the metrics ones."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "PYTHONPATH": str(SRC_DIR),
        **statsd.env(),
    }


def test_the_cli_emit_sends_the_same_names_without_airflow(statsd, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    result = subprocess.run(
        [sys.executable, "-m", "airflow_kafka_events.cli.main", "emit", "--asset", "s3://lake/metrics",
         "--bootstrap-servers", kafka_bootstrap, "--topic", topic],
        env=_environ(statsd), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    latency = statsd.wait_for(r"airflow\.kafka_events\.emit\.latency:([0-9.]+)\|ms")
    assert 0 < float(latency[0].split(":")[1].split("|")[0]) < 30_000
    statsd.wait_for(r"airflow\.kafka_events\.producer\.delivered:1\|c")


def test_the_bridge_command_reports_posts_lag_and_dead_letters(statsd, kafka_bootstrap, new_topic, tmp_path):
    topic, dlq = new_topic(partitions=1, prefix="bridge-in"), new_topic(partitions=1, prefix="bridge-dlq")
    with FakeAirflow(users={"bridge": PASSWORD}) as fake:
        fake.add_asset(BRIDGE_ASSET.name, BRIDGE_ASSET.uri)
        send(kafka_bootstrap, topic, envelope("k1"), envelope("k2"))
        send_raw(kafka_bootstrap, topic, b"poison")
        password_file = tmp_path / "passwords.json"
        password_file.write_text(f'{{"bridge": "{PASSWORD}"}}')
        env = {**_environ(statsd), "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE": str(password_file)}
        group = f"bridge-metrics-{uuid.uuid4().hex[:8]}"
        command = ["bridge", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--group", group]
        command += ["--dlq-topic", dlq, "--api-url", fake.base_url, "--username", "bridge"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow_kafka_events.cli.main", *command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            statsd.wait_for(r"airflow\.kafka_events\.bridge\.records\.posted:1\|c", count=2, timeout=120)
            statsd.wait_for(r"airflow\.kafka_events\.bridge\.records\.dead_lettered:1\|c")
            statsd.wait_for(r"airflow\.kafka_events\.dlq\.records\.undecodable:1\|c")
            statsd.wait_for(r"airflow\.kafka_events\.bridge\.lag:\d+\|g")
            statsd.wait_for(r"airflow\.kafka_events\.producer\.delivery_time\.dead_letter:[0-9.]+\|ms")
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
