"""The bridge's decisions for one record, without Kafka: bodies, dead letters, retries, dedup."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition

from airflow_kafka_events.assets.airflow_api import AirflowApiClient, AuthenticationError, ForbiddenError
from airflow_kafka_events.assets.authz import Allowlist, sign_envelope
from airflow_kafka_events.assets.publish import build_envelope, causation_from_extra
from airflow_kafka_events.bridge.airflow_event import event_extra
from airflow_kafka_events.bridge.config import BridgeConfig
from airflow_kafka_events.bridge.errors import DeadLetterError, RetriesExhaustedError
from airflow_kafka_events.bridge.service import BridgeService, Outcome, _StopRequested
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import (
    DeliveryError,
    EnvelopeDecodeError,
    UnknownSchemaError,
    ValidationError,
)
from airflow_kafka_events.kafka.consumer import ConsumedRecord
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.retry import RetryPolicy
from integration.bridge.fake_airflow import FakeAirflow

pytestmark = pytest.mark.unit

TOPIC = "asset-events"
PASSWORD = "bridge-pw"
ASSET = AssetRef(name="batches", uri="s3://lake/batches")


class FakeProducer:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.fail = fail

    def send_and_wait(self, topic: str, value: bytes | None, **kwargs: Any) -> DeliveryReceipt:
        if self.fail:
            raise DeliveryError("broker down")
        self.sent.append({"topic": topic, "value": value, **kwargs})
        return DeliveryReceipt(topic=topic, partition=0, offset=len(self.sent) - 1, timestamp_ms=1, key=None)


def envelope(key: str | None = "batch-41", **kwargs: Any) -> AssetEventEnvelope:
    return build_envelope(
        asset=kwargs.pop("asset", ASSET),
        source=kwargs.pop("source", EventSource(SourceKind.TASK, dag_id="ingest", run_id="r1", task_id="t")),
        partition_key=key,
        **kwargs,
    )


_offsets = iter(range(10**6))


def record(value: AssetEventEnvelope | None = None, *, raw: bytes | None = None, partition: int = 0) -> Any:
    error = None
    if value is not None:
        raw = ASSET_EVENT_CODEC.encode(value)
    else:
        error = EnvelopeDecodeError("not an envelope")
    return ConsumedRecord(
        topic=TOPIC,
        partition=partition,
        offset=next(_offsets),
        key=b"s3://lake/batches",
        headers=(("event_id", value.event_id.encode()),) if value else (),
        timestamp_ms=1_700_000_000_000,
        value=value,
        raw=raw,
        error=error,
    )


def _decode_error_caused_by_validation() -> EnvelopeDecodeError:
    try:
        try:
            raise ValidationError("AssetRef.uri must not be empty")
        except ValidationError as cause:
            raise EnvelopeDecodeError("invalid envelope fields") from cause
    except EnvelopeDecodeError as error:
        return error


@pytest.fixture
def fake() -> FakeAirflow:
    api = FakeAirflow(users={"bridge": PASSWORD})
    api.add_asset(ASSET.name, ASSET.uri)
    return api


def make_service(fake: FakeAirflow, *, producer: FakeProducer | None = None, **options: Any) -> BridgeService:
    options.setdefault("retry", RetryPolicy(max_attempts=4, initial_backoff=0, max_backoff=0))
    config = BridgeConfig(
        kafka=KafkaSettings({"bootstrap.servers": "unused:9092"}),
        api_url="http://airflow.test",
        username="bridge",
        password=PASSWORD,
        topic=TOPIC,
        **options,
    )
    api = AirflowApiClient(config.api_url, "bridge", PASSWORD, transport=fake.transport())
    service = BridgeService(config, api=api, producer=producer or FakeProducer())  # type: ignore[arg-type]
    service._on_assign(None, [TopicPartition(TOPIC, p) for p in range(3)])
    return service


# --------------------------------------------------------------------------- request body
def test_extra_carries_partition_date_and_provenance():
    date = datetime(2026, 1, 31, 1, 0, tzinfo=timezone(timedelta(hours=1)))
    env = envelope(
        partition_date=date, extra={"rows": 10, "path": "s3://lake/b/41"}, causation=["root-event"]
    )
    rec = record(env)
    extra = event_extra(env, rec)
    assert extra["rows"] == 10 and extra["path"] == "s3://lake/b/41"
    assert extra["partition_date"] == "2026-01-31T00:00:00+00:00"
    info = extra["airflow_kafka_events"]
    assert info["event_id"] == env.event_id
    assert info["idempotency_key"] == env.idempotency_key
    assert info["causation"] == ["root-event"]
    assert info["source"] == {
        "kind": "task",
        "dag_id": "ingest",
        "run_id": "r1",
        "task_id": "t",
        "map_index": None,
        "try_number": None,
        "producer": None,
    }
    assert info["emitted_at"] == env.emitted_at.isoformat()
    assert info["partition_date"] == "2026-01-31T00:00:00+00:00"
    assert info["kafka"] == {"topic": TOPIC, "partition": 0, "offset": rec.offset}
    # what the emit side reads back from a triggering event: the chain, then this event
    assert causation_from_extra(extra) == ("root-event", env.event_id)


def test_extra_without_partition_date_has_none_and_keeps_the_envelopes_own_keys():
    env = envelope(extra={"partition_date": "user-value", "airflow_kafka_events": "spoofed"})
    extra = event_extra(env)
    assert extra["partition_date"] == "user-value"  # no envelope date: the user's key stays
    assert isinstance(extra["airflow_kafka_events"], dict)  # provenance cannot be spoofed
    assert "kafka" not in extra["airflow_kafka_events"]
    dated = envelope(partition_date=datetime(2026, 2, 1, tzinfo=timezone.utc), extra={"partition_date": "x"})
    assert event_extra(dated)["partition_date"] == "2026-02-01T00:00:00+00:00"


def test_posted_body(fake):
    service = make_service(fake)
    env = envelope(partition_date=datetime(2026, 1, 31, tzinfo=timezone.utc), extra={"rows": 1})
    assert service.handle(record(env)) is Outcome.POSTED
    (event,) = fake.events
    assert event["asset_id"] == 1
    assert event["partition_key"] == "batch-41"
    assert event["extra"]["partition_date"] == "2026-01-31T00:00:00+00:00"
    assert event["extra"]["from_rest_api"] is True
    assert event["extra"]["airflow_kafka_events"]["event_id"] == env.event_id


# --------------------------------------------------------------------------- dead letters
def _dead(producer: FakeProducer) -> dict[str, Any]:
    (sent,) = producer.sent
    sent["headers"] = {k: v.decode() if isinstance(v, bytes) else v for k, v in sent["headers"]}
    sent["letter"] = DeadLetter.from_headers(sent["headers"])
    return sent


def test_poison_is_dead_lettered_with_its_bytes(fake, caplog):
    producer = FakeProducer()
    service = make_service(fake, producer=producer, dlq_topic="dlq")
    assert service.handle(record(raw=b"\x00junk")) is Outcome.DEAD_LETTERED
    sent = _dead(producer)
    assert sent["topic"] == "dlq" and sent["value"] == b"\x00junk"
    letter = sent["letter"]
    assert letter.reason == "undecodable"
    assert "not an envelope" in letter.error_message
    assert (
        letter.event_id is None
        and letter.consumer == "airflow-kafka-events bridge (group=airflow-kafka-events.bridge)"
    )
    assert fake.events == []
    # the bridge's dead-lettered line, as log-based alerts match it
    (line,) = [r.getMessage() for r in caplog.records if "dead-lettered to" in r.getMessage()]
    assert re.match(r"\S+\[\d+\]@\d+ dead-lettered to dlq\[\d+\]@\d+: undecodable: ", line), line


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (UnknownSchemaError("fingerprint ab"), "unknown-schema"),
        (EnvelopeDecodeError("truncated"), "undecodable"),
        (_decode_error_caused_by_validation(), "invalid-envelope"),
    ],
)
def test_undecodable_records_are_classified_like_the_watcher_does(fake, error, reason):
    producer = FakeProducer()
    rec = dataclasses.replace(record(raw=b"x"), error=error)
    assert make_service(fake, producer=producer).handle(rec) is Outcome.DEAD_LETTERED
    assert _dead(producer)["letter"].reason == reason


def test_unknown_asset_is_dead_lettered(fake):
    producer = FakeProducer()
    service = make_service(fake, producer=producer)
    env = envelope(asset=AssetRef(name="nope", uri="s3://nope"))
    rec = record(env)
    assert service.handle(rec) is Outcome.DEAD_LETTERED
    sent = _dead(producer)
    assert sent["value"] == rec.raw and sent["key"] == rec.key
    letter = sent["letter"]
    assert letter.reason == "unknown-asset"
    assert letter.error_type.endswith("UnknownAssetError")
    assert "no active asset named 'nope'" in letter.error_message
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (TOPIC, 0, rec.offset)
    assert letter.source_timestamp_ms == 1_700_000_000_000
    assert (letter.event_id, letter.asset_uri) == (env.event_id, "s3://nope")
    assert sent["headers"]["event_id"] == env.event_id  # the original headers are kept


def test_client_error_is_dead_lettered_with_airflows_answer(fake):
    producer = FakeProducer()
    fake.reject_partition_key("batch-41")
    service = make_service(fake, producer=producer)
    assert service.handle(record(envelope())) is Outcome.DEAD_LETTERED
    letter = _dead(producer)["letter"]
    assert letter.reason == "rejected-by-airflow"
    assert "answered 422" in letter.error_message
    assert "partition key batch-41 refused" in letter.error_message


def test_partition_key_airflow_would_refuse_is_dead_lettered_without_a_request(fake):
    producer = FakeProducer()
    service = make_service(fake, producer=producer)
    bad = AssetEventEnvelope(asset=ASSET, partition_key="   ")
    assert service.handle(record(bad)) is Outcome.DEAD_LETTERED
    letter = _dead(producer)["letter"]
    assert letter.reason == "invalid-envelope" and letter.error_type.endswith("PartitionKeyError")
    assert fake.count("POST", "/api/v2/assets/events") == 0


def test_other_assets_are_skipped(fake):
    service = make_service(fake, assets=("s3://other/*",))
    assert service.handle(record(envelope())) is Outcome.SKIPPED
    assert fake.requests == []
    assert make_service(fake, assets=("batch*",)).handle(record(envelope())) is Outcome.POSTED


def test_sources_outside_the_allowlist_are_dead_lettered(fake):
    producer = FakeProducer()
    allowlist = Allowlist.from_config([{"source_kinds": ["task"], "dag_ids": ["etl_*"]}])
    service = make_service(fake, producer=producer, allowlist=allowlist)
    assert service.handle(record(envelope())) is Outcome.DEAD_LETTERED  # dag_id "ingest"
    letter = _dead(producer)["letter"]
    assert letter.reason == "not-allowed" and "matches no allow rule" in letter.error_message
    etl = EventSource(SourceKind.TASK, dag_id="etl_orders", run_id="r", task_id="t")
    assert service.handle(record(envelope(source=etl))) is Outcome.POSTED


def test_signatures_are_checked_with_every_accepted_key(fake):
    producer = FakeProducer()
    service = make_service(fake, producer=producer, signing_keys=(b"current-key", b"previous-key"))
    assert service.handle(record(sign_envelope(envelope("a"), "current-key"))) is Outcome.POSTED
    assert service.handle(record(sign_envelope(envelope("b"), b"previous-key"))) is Outcome.POSTED
    assert service.handle(record(envelope("c"))) is Outcome.DEAD_LETTERED
    assert service.handle(record(sign_envelope(envelope("d"), "stolen-key"))) is Outcome.DEAD_LETTERED
    tampered = dataclasses.replace(sign_envelope(envelope("e"), "current-key"), partition_key="other")
    assert service.handle(record(tampered)) is Outcome.DEAD_LETTERED
    reasons = [DeadLetter.from_headers(sent["headers"]).reason for sent in producer.sent]
    assert reasons == ["signature-missing", "signature-invalid", "signature-invalid"]
    assert [e["partition_key"] for e in fake.events] == ["a", "b"]


def test_causation_chains_longer_than_the_bound_are_dead_lettered(fake):
    producer = FakeProducer()
    service = make_service(fake, producer=producer, max_causation_depth=2)
    assert service.handle(record(envelope("ok", causation=["e1", "e2"]))) is Outcome.POSTED
    assert service.handle(record(envelope("loop", causation=["e1", "e2", "e3"]))) is Outcome.DEAD_LETTERED
    letter = _dead(producer)["letter"]
    assert letter.reason == "causation-too-deep" and "feedback loop" in letter.error_message


def test_failed_dead_letter_write_is_fatal(fake):
    service = make_service(fake, producer=FakeProducer(fail=True))
    with pytest.raises(DeadLetterError, match="nothing was committed"):
        service.handle(record(raw=b"junk"))


# --------------------------------------------------------------------------- retries
def test_server_errors_are_retried(fake):
    fake.fail_posts(503, 502)
    service = make_service(fake)
    assert service.handle(record(envelope())) is Outcome.POSTED
    assert len(fake.events) == 1
    assert fake.count("POST", "/api/v2/assets/events") == 3


def test_ambiguous_failure_is_checked_before_posting_again(fake):
    fake.fail_after_apply(500)  # stored, but the answer says 500
    service = make_service(fake, recheck_records=0)
    assert service.handle(record(envelope())) is Outcome.ALREADY_PRESENT
    assert len(fake.events) == 1
    assert fake.count("POST", "/api/v2/assets/events") == 1
    assert fake.count("GET", "/api/v2/assets/events") == 1


def test_retries_are_bounded(fake):
    fake.fail_posts(*[503] * 10)
    service = make_service(fake, retry=RetryPolicy(max_attempts=3, initial_backoff=0, max_backoff=0))
    with pytest.raises(RetriesExhaustedError, match="giving up after 3 attempts"):
        service.handle(record(envelope()))
    assert fake.events == []


def test_stop_during_backoff_abandons_the_record(fake):
    fake.fail_posts(503)
    service = make_service(fake, retry=RetryPolicy(max_attempts=3, initial_backoff=60, max_backoff=60))
    service.request_stop()
    with pytest.raises(_StopRequested):
        service.handle(record(envelope()))


def test_stale_asset_id_is_resolved_again(fake):
    service = make_service(fake)
    assert service.handle(record(envelope("k1"))) is Outcome.POSTED
    fake.remove_asset(1)
    new_id = fake.add_asset(ASSET.name, ASSET.uri)
    assert service.handle(record(envelope("k2"))) is Outcome.POSTED
    assert [e["asset_id"] for e in fake.events] == [1, new_id]


def test_asset_removed_for_good_is_dead_lettered(fake):
    producer = FakeProducer()
    service = make_service(fake, producer=producer)
    assert service.handle(record(envelope("k1"))) is Outcome.POSTED
    fake.remove_asset(1)
    assert service.handle(record(envelope("k2"))) is Outcome.DEAD_LETTERED
    assert _dead(producer)["letter"].reason == "unknown-asset"


def test_forbidden_and_bad_credentials_are_fatal(fake):
    service = make_service(fake)
    service.api._password = "wrong"
    with pytest.raises(AuthenticationError):
        service.handle(record(envelope()))

    def forbidden(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return fake.transport().handle_request(request)
        return httpx.Response(403, json={"detail": "Forbidden"})

    other = make_service(fake)
    other.api._http = httpx.Client(base_url="http://airflow.test/", transport=httpx.MockTransport(forbidden))
    with pytest.raises(ForbiddenError):
        other.handle(record(envelope()))


# --------------------------------------------------------------------------- duplicates
def test_repeated_idempotency_key_is_skipped(fake):
    service = make_service(fake)
    first = envelope(idempotency_key="batch-41-v1")
    again = envelope(idempotency_key="batch-41-v1")
    assert first.event_id != again.event_id
    assert service.handle(record(first)) is Outcome.POSTED
    assert service.handle(record(again)) is Outcome.DUPLICATE
    assert len(fake.events) == 1


def test_same_key_on_another_asset_is_not_a_duplicate(fake):
    fake.add_asset("other", "s3://lake/other")
    service = make_service(fake)
    assert service.handle(record(envelope(idempotency_key="k"))) is Outcome.POSTED
    other = envelope(idempotency_key="k", asset=AssetRef(name="other", uri="s3://lake/other"))
    assert service.handle(record(other)) is Outcome.POSTED


def test_recheck_window_finds_an_event_posted_before_a_restart(fake):
    env = envelope()
    first = make_service(fake)
    assert first.handle(record(env)) is Outcome.POSTED  # ... and the process died before the commit
    restarted = make_service(fake, recheck_records=2)
    assert restarted.handle(record(env)) is Outcome.ALREADY_PRESENT
    assert restarted.handle(record(envelope("batch-42"))) is Outcome.POSTED
    lookups = fake.count("GET", "/api/v2/assets/events")
    assert restarted.handle(record(envelope("batch-43"))) is Outcome.POSTED
    assert fake.count("GET", "/api/v2/assets/events") == lookups  # window of 2 records used up
    assert len(fake.events) == 3


def test_recheck_window_also_finds_a_repeated_idempotency_key(fake):
    make_service(fake).handle(record(envelope(idempotency_key="k")))
    restarted = make_service(fake)
    assert restarted.handle(record(envelope(idempotency_key="k"))) is Outcome.ALREADY_PRESENT
    assert len(fake.events) == 1


def test_recheck_window_is_per_partition_and_reset_on_assignment(fake):
    service = make_service(fake, recheck_records=1)
    service.handle(record(envelope("a"), partition=0))
    service.handle(record(envelope("b"), partition=1))
    assert fake.count("GET", "/api/v2/assets/events") == 2
    service.handle(record(envelope("c"), partition=0))
    assert fake.count("GET", "/api/v2/assets/events") == 2
    service._on_revoke(None, [TopicPartition(TOPIC, 0)])
    service._on_assign(None, [TopicPartition(TOPIC, 0)])
    service.handle(record(envelope("d"), partition=0))
    assert fake.count("GET", "/api/v2/assets/events") == 3


def test_unpartitioned_events_are_posted_or_skipped(fake):
    assert make_service(fake).handle(record(envelope(None))) is Outcome.POSTED
    assert fake.events[-1]["partition_key"] is None
    skipping = make_service(fake, skip_unpartitioned=True)
    assert skipping.handle(record(envelope(None, extra={"n": 2}))) is Outcome.SKIPPED
    assert len(fake.events) == 1


def test_after_post_hook_and_fault_config(fake):
    calls: list[str] = []
    service = make_service(fake)
    service._after_post = lambda env: calls.append(env.event_id)
    env = envelope()
    service._fire_after_post(env)
    assert calls == [env.event_id]
