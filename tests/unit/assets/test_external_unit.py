"""The Airflow-free emit path (no broker: a recording producer) and the CLI ``emit`` group."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

import pytest

from airflow_kafka_events.assets import publish as external
from airflow_kafka_events.assets.publish import (
    PROVENANCE_EXTRA_KEY,
    Receipt,
    build_envelope,
    causation_depth,
    causation_from_extra,
    provenance_extra,
    resolve_asset,
)
from airflow_kafka_events.cli import main as cli
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import (
    ConfigurationError,
    ExtraTooLargeError,
    InvalidAssetError,
    NaiveDatetimeError,
    PartitionDateWithoutKeyError,
)
from airflow_kafka_events.kafka.settings import KafkaSettings
from harness.airflow_free import run_without_airflow
from unit.assets.sdk_contexts import RecordingProducer

pytestmark = pytest.mark.unit

SETTINGS = KafkaSettings({"bootstrap.servers": "127.0.0.1:1"})


@pytest.fixture
def producer(monkeypatch):
    recording = RecordingProducer()
    configs: list = []

    def get_producer(config, **kwargs):
        configs.append(config)
        return recording

    monkeypatch.setattr(external, "get_producer", get_producer)
    recording.configs = configs  # type: ignore[attr-defined]
    return recording


def test_external_emit_publishes_an_external_event(producer, monkeypatch):
    monkeypatch.delenv(external.ENV_TOPIC, raising=False)
    receipt = external.emit(
        "s3://lake/orders/",
        name="orders",
        partition_key="2026-01-31",
        partition_date=datetime(2026, 1, 31, tzinfo=timezone.utc),
        extra={"rows": 5, "token": "abc"},
        producer="billing",
        settings=SETTINGS,
    )
    (envelope,) = producer.envelopes()
    assert envelope.asset == AssetRef(name="orders", uri="s3://lake/orders")
    assert envelope.source == EventSource(SourceKind.EXTERNAL, producer="billing")
    assert envelope.extra == {"rows": 5, "token": "***"}
    assert producer.sent[0]["topic"] == "airflow.asset-events"
    assert producer.sent[0]["key"] == b"s3://lake/orders"
    assert producer.configs[0]["acks"] == "all"
    assert producer.configs[0]["enable.idempotence"] is True
    assert isinstance(receipt, Receipt) and receipt.event_id == envelope.event_id


def test_external_defaults_come_from_the_environment(producer, monkeypatch):
    monkeypatch.setenv(external.ENV_TOPIC, "team.asset-events")
    monkeypatch.setenv(external.ENV_PRODUCER, "nightly-export")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:2")
    external.emit("s3://lake/orders")
    assert producer.sent[0]["topic"] == "team.asset-events"
    assert producer.envelopes()[0].source.producer == "nightly-export"
    assert producer.configs[0]["bootstrap.servers"] == "127.0.0.1:2"


def test_external_emit_without_kafka_settings_is_a_configuration_error(producer, monkeypatch):
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("AIRFLOW_KAFKA_EVENTS_PROPERTIES", raising=False)
    with pytest.raises(ConfigurationError, match=r"bootstrap\.servers"):
        external.emit("s3://lake/orders")
    assert producer.sent == []


def test_identical_external_events_share_a_key_unless_distinct_keys_are_passed(producer):
    for name in ("a", "b"):
        external.emit("s3://lake/orders", extra={"n": 1}, producer=name, settings=SETTINGS)
    external.emit("s3://lake/orders", extra={"n": 1}, idempotency_key="second", settings=SETTINGS)
    first, second, third = producer.envelopes()
    assert first.idempotency_key == second.idempotency_key != third.idempotency_key
    assert third.idempotency_key == "second"


def test_external_validation_runs_before_settings_or_producer(producer, monkeypatch):
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(PartitionDateWithoutKeyError):
        external.emit("s3://x/y", partition_date=datetime(2026, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(NaiveDatetimeError):
        external.emit("s3://x/y", partition_key="k", partition_date=datetime(2026, 1, 1))
    with pytest.raises(ExtraTooLargeError):
        external.emit("s3://x/y", extra={"a": "b" * 100}, max_extra_bytes=10)
    assert producer.configs == []


def test_resolve_asset_accepts_uris_refs_and_asset_like_objects():
    class Like:
        name = "orders"
        uri = "S3://lake/orders/"

    assert resolve_asset("s3://a/b") == AssetRef(name="s3://a/b", uri="s3://a/b")
    assert resolve_asset(Like()) == AssetRef(name="orders", uri="s3://lake/orders")
    assert resolve_asset(AssetRef(name="n", uri="s3://a/b/")) == AssetRef(name="n", uri="s3://a/b")
    with pytest.raises(InvalidAssetError):
        resolve_asset(AssetRef(name="n", uri="s3://a/b"), name="m")
    with pytest.raises(InvalidAssetError):
        resolve_asset(3)


def test_provenance_round_trips_through_an_airflow_event_extra():
    parent = build_envelope(
        asset=AssetRef(name="a", uri="s3://a"), source=EventSource(SourceKind.EXTERNAL), causation=["E0"]
    )
    extra = {"rows": 1, **provenance_extra(parent)}
    assert extra[PROVENANCE_EXTRA_KEY]["event_id"] == parent.event_id
    assert causation_from_extra(extra) == ("E0", parent.event_id)
    child = build_envelope(
        asset=AssetRef(name="b", uri="s3://b"),
        source=EventSource(SourceKind.EXTERNAL),
        causation=causation_from_extra(extra),
    )
    assert (causation_depth(parent), causation_depth(child)) == (1, 2)
    for other in (
        None,
        {},
        {"rows": 1},
        {PROVENANCE_EXTRA_KEY: "x"},
        {PROVENANCE_EXTRA_KEY: {"event_id": ""}},
    ):
        assert causation_from_extra(other) == ()


def test_receipt_as_json():
    receipt = Receipt("e1", "t", 2, 7, datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert json.loads(receipt.to_json()) == {
        "event_id": "e1",
        "topic": "t",
        "partition": 2,
        "offset": 7,
        "timestamp": "2026-01-01T00:00:00+00:00",
    }


def test_external_modules_import_no_airflow():
    run_without_airflow(
        "from airflow_kafka_events.assets import publish as external, validation, idempotency, SeenKeys\n"
        "from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind\n"
        "e = external.build_envelope(asset=external.resolve_asset('s3://a/b'),\n"
        "    source=EventSource(SourceKind.EXTERNAL), extra={'password': 'x'})\n"
        "assert e.extra == {'password': '***'}\n"
    )


# --------------------------------------------------------------------------- CLI
def _parse(*argv):
    return cli.build_parser().parse_args(["emit", *argv])


def test_cli_emit_parses_every_option(tmp_path):
    props = tmp_path / "client.properties"
    args = _parse(
        "--asset",
        "s3://lake/orders",
        "--name",
        "orders",
        "--partition-key",
        "batch-1",
        "--partition-date",
        "2026-01-31T00:00:00Z",
        "--extra",
        '{"rows": 3}',
        "--idempotency-key",
        "k1",
        "--causation",
        "E0",
        "--causation",
        "E1",
        "--bootstrap-servers",
        "h:9092",
        "--properties",
        str(props),
        "--property",
        "client.id=exporter",
        "--topic",
        "t",
        "--producer",
        "exporter",
        "--timeout",
        "5",
        "--max-extra-bytes",
        "1000",
    )
    assert args.handler is cli._emit
    assert args.asset == "s3://lake/orders"
    assert args.name == "orders"
    assert args.partition_key == "batch-1"
    assert args.partition_date == datetime(2026, 1, 31, tzinfo=timezone.utc)
    assert args.extra == {"rows": 3}
    assert args.idempotency_key == "k1"
    assert args.causation == ["E0", "E1"]
    assert args.bootstrap_servers == "h:9092"
    assert args.properties == props
    assert args.property == [("client.id", "exporter")]
    assert (args.topic, args.producer, args.timeout, args.max_extra_bytes) == ("t", "exporter", 5.0, 1000)


def test_cli_emit_defaults():
    args = _parse("--asset", "s3://lake/orders")
    assert (args.name, args.partition_key, args.partition_date, args.extra) == (None, None, None, None)
    assert (args.topic, args.producer, args.bootstrap_servers, args.properties) == (None, None, None, None)
    assert args.causation == [] and args.property == []
    assert args.max_extra_bytes == 65536


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--asset", "a", "--partition-date", "yesterday"],
        ["--asset", "a", "--extra", "[1, 2]"],
        ["--asset", "a", "--extra", "{not json"],
        ["--asset", "a", "--property", "no-equals-sign"],
    ],
)
def test_cli_emit_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(*argv)
    assert exc.value.code == 2


def test_cli_emit_prints_the_receipt_as_json(producer, capsys, monkeypatch):
    monkeypatch.delenv(external.ENV_TOPIC, raising=False)
    code = cli.main(
        [
            "emit",
            "--asset",
            "s3://lake/orders",
            "--partition-key",
            "b1",
            "--extra",
            '{"rows": 3, "api_key": "k"}',
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--property",
            "client.id=exporter",
        ]
    )
    assert code == cli.EXIT_OK
    receipt = json.loads(capsys.readouterr().out)
    (envelope,) = producer.envelopes()
    assert receipt["event_id"] == envelope.event_id
    assert receipt["topic"] == "airflow.asset-events"
    assert envelope.extra == {"rows": 3, "api_key": "***"}
    assert envelope.source.kind is SourceKind.EXTERNAL
    assert producer.configs[0]["client.id"] == "exporter"


def test_cli_emit_default_producer_name(producer, capsys, monkeypatch):
    monkeypatch.delenv(external.ENV_PRODUCER, raising=False)
    assert cli.main(["emit", "--asset", "s3://x", "--bootstrap-servers", "127.0.0.1:1"]) == cli.EXIT_OK
    monkeypatch.setenv(external.ENV_PRODUCER, "from-env")
    assert cli.main(["emit", "--asset", "s3://x", "--bootstrap-servers", "127.0.0.1:1"]) == cli.EXIT_OK
    assert [e.source.producer for e in producer.envelopes()] == [cli.CLI_PRODUCER, "from-env"]


def test_default_producer_name(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/nightly-export", "--x"])
    assert external.default_producer_name({}) == "nightly-export"
    assert external.default_producer_name({external.ENV_PRODUCER: "named"}) == "named"
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert external.default_producer_name({}) == "external"


def test_cli_emit_validation_errors_exit_1_before_sending(producer, capsys):
    code = cli.main(
        ["emit", "--asset", "s3://x", "--partition-date", "2026-01-31T00:00:00", "--partition-key", "k"]
    )
    assert code == cli.EXIT_ERROR
    assert "timezone-aware" in capsys.readouterr().err
    assert producer.sent == []


def test_provenance_is_found_in_a_watcher_made_event_payload():
    from airflow_kafka_events.assets.watcher_payload import envelope_payload

    parent = build_envelope(
        asset=AssetRef(name="a", uri="s3://a"), source=EventSource(SourceKind.EXTERNAL), causation=["E0"]
    )
    # what an AssetWatcher turns the watcher's TriggerEvent payload into (Airflow 3.3.2)
    extra = {"from_trigger": True, "payload": envelope_payload(parent)}
    assert causation_from_extra(extra) == ("E0", parent.event_id)
    assert causation_from_extra({"payload": envelope_payload(parent)}) == ()  # not from a trigger


def test_emits_use_no_linger_unless_the_settings_set_one():
    config = external.emit_config(SETTINGS)
    assert config["linger.ms"] == external.EMIT_LINGER_MS == 0  # each emit waits for its own receipt
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    assert external.emit_config(SETTINGS.with_overrides({"linger.ms": 5}))["linger.ms"] == 5
    aliased = external.emit_config(SETTINGS.with_overrides({"queue.buffering.max.ms": 7}))
    assert aliased["queue.buffering.max.ms"] == 7 and "linger.ms" not in aliased


def test_external_emit_sends_with_the_emit_configuration(producer):
    external.emit("s3://lake/orders", producer="billing", settings=SETTINGS)
    assert producer.configs == [external.emit_config(SETTINGS)]
