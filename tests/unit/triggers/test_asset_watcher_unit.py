"""KafkaAssetEventTrigger without a broker: identity, filtering, dead letters, the shared stream.

Kafka I/O is faked (records are handed to the filter directly, the dead-letter producer and the
consumer are fakes); the shared-stream machinery in the ack-mode test is Airflow's own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from airflow._shared.module_loading import import_string
from airflow.jobs.triggerer_job_runner import TriggerEventEntry, messages
from airflow.providers.apache.kafka.triggers.shared_stream import KafkaBrokerPayload, KafkaSharedStreamTrigger
from airflow.serialization.encoders import encode_trigger
from airflow.serialization.serialized_objects import BaseSerialization
from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, SharedStreamManager, SharedStreamProducer

from airflow_kafka_events.assets.authz import sign_envelope
from airflow_kafka_events.assets.publish import PROVENANCE_EXTRA_KEY
from airflow_kafka_events.assets.watcher_payload import (
    causation_from_watcher_extra,
    envelope_payload,
    watcher_causation,
    watcher_payload,
)
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    EventSource,
    SourceKind,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import (
    ConfigurationError,
    DeliveryError,
    ValidationError,
)
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.provider.serialization import roundtrip_trigger_kwargs
from airflow_kafka_events.watcher import dead_letters as watcher_dead_letters
from airflow_kafka_events.watcher import trigger as asset_watcher
from airflow_kafka_events.watcher.records import KafkaRecord
from airflow_kafka_events.watcher.stream import WatcherStream
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger, kafka_watched_asset

pytestmark = pytest.mark.unit

ASSET = AssetRef(name="ops://investigate", uri="ops://investigate/")
OTHER = AssetRef(name="ops://cleanup", uri="ops://cleanup/")
KEY = b"s" * 32


@pytest.fixture(autouse=True)
def _fresh_process_state():
    watcher_dead_letters.DEAD_LETTERED.clear()
    yield
    watcher_dead_letters.DEAD_LETTERED.clear()


# --------------------------------------------------------------------------- fakes
class FakeDlqProducer:
    """Records dead-letter sends; ``fail`` first sends raise ``DeliveryError``."""

    def __init__(self, fail: int = 0) -> None:
        self.sent: list[dict[str, Any]] = []
        self.fail = fail
        self.attempts = 0

    async def send_async(self, topic, value, *, key=None, headers=None, partition=None, timeout=30.0):
        self.attempts += 1
        await asyncio.sleep(0)
        if self.attempts <= self.fail:
            raise DeliveryError("broker down")
        self.sent.append({"topic": topic, "value": value, "key": key, "headers": list(headers or [])})
        return DeliveryReceipt(
            topic=topic, partition=0, offset=len(self.sent) - 1, timestamp_ms=None, key=key
        )

    def send_and_wait(self, *args, **kwargs):  # pragma: no cover - the watcher only awaits
        raise AssertionError("the watcher must not block the event loop")

    def letters(self) -> list[DeadLetter]:
        return [DeadLetter.from_headers(sent["headers"]) for sent in self.sent]


def make_trigger(dlq: FakeDlqProducer | None = None, **kwargs: Any) -> KafkaAssetEventTrigger:
    kwargs.setdefault("topics", ["events"])
    if "asset_uri" not in kwargs and "asset_name" not in kwargs:
        kwargs["asset_uri"] = ASSET.uri
    if dlq is not None:
        kwargs.setdefault("dlq_topic", "events.dlq")
    trigger = KafkaAssetEventTrigger(**kwargs)
    if dlq is not None:
        trigger._dlq_writer = DeadLetterWriter(dlq, trigger.dlq_topic or "events.dlq")
    return trigger


def envelope(asset: AssetRef = ASSET, **kwargs: Any) -> AssetEventEnvelope:
    kwargs.setdefault("source", EventSource(SourceKind.DAG_CALLBACK, dag_id="etl", run_id="r1"))
    kwargs.setdefault("extra", {"reason": "task failed", "dag_id": "etl"})
    return AssetEventEnvelope(asset=asset, **kwargs)


def record(value: AssetEventEnvelope | bytes | None, offset: int, *, partition: int = 0) -> KafkaRecord:
    raw = ASSET_EVENT_CODEC.encode(value) if isinstance(value, AssetEventEnvelope) else value
    key = value.asset.uri.encode() if isinstance(value, AssetEventEnvelope) else None
    return KafkaRecord(
        topic="events",
        partition=partition,
        offset=offset,
        key=key,
        value=raw,
        headers=(("event_id", b"x"),),
        timestamp_ms=1_700_000_000_000 + offset,
    )


def run_filter(
    trigger: KafkaAssetEventTrigger, records: list[KafkaRecord], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """Feed ``records`` to the filter; return ({offset: payload fired}, [offsets rejected])."""
    current: dict[str, KafkaRecord] = {}
    rejected: list[int] = []
    monkeypatch.setattr(
        asset_watcher, "reject_shared_stream_event", lambda: rejected.append(current["r"].offset)
    )

    async def stream() -> AsyncIterator[KafkaRecord]:
        for item in records:
            current["r"] = item
            yield item

    async def collect() -> dict[int, dict[str, Any]]:
        fired: dict[int, dict[str, Any]] = {}
        async for event in trigger.filter_shared_stream(stream()):
            assert current["r"].offset not in fired, "one record fired twice"
            fired[current["r"].offset] = event.payload
        return fired

    return asyncio.run(collect()), rejected


# --------------------------------------------------------------------------- identity
FULL_KWARGS: dict[str, Any] = {
    "topics": ["b-events", "a-events"],
    "asset_uri": "ops://investigate",
    "asset_name": "investigate",
    "kafka_config_id": "kafka_watcher_ops",
    "group_id": "ops-watchers",
    "poll_timeout": 0.5,
    "dlq_topic": "events.dlq",
    "dlq_kafka_config_id": "kafka_dlq",
    "allow": [{"source_kinds": ["dag_callback"], "dag_ids": ["etl_*"]}, {"producers": ["ci"]}],
    "signing_conn_id": "asset_signing",
    "max_causation_depth": 3,
    "include_partitioned": False,
    "dedupe_max_keys": 500,
    "dedupe_ttl": 60.0,
    "max_record_bytes": 512 * 1024,
    "max_extra_bytes": 32 * 1024,
}


def test_serialize_names_this_class_and_maps_one_to_one_onto_init():
    trigger = KafkaAssetEventTrigger(**FULL_KWARGS)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger"
    assert classpath != KafkaSharedStreamTrigger(topics=["x"]).serialize()[0]
    assert import_string(classpath) is KafkaAssetEventTrigger
    assert set(kwargs) == set(FULL_KWARGS)
    assert kwargs["topics"] == ["a-events", "b-events"]
    assert kwargs["asset_uri"] == "ops://investigate/"  # normalized like airflow.sdk.Asset
    rebuilt = KafkaAssetEventTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.shared_stream_key() == trigger.shared_stream_key()


@pytest.mark.parametrize("kwargs", [FULL_KWARGS, {"topics": ["events"], "asset_name": "n"}])
def test_serialize_round_trips_through_airflow_storage(kwargs):
    trigger = KafkaAssetEventTrigger(**kwargs)
    classpath, stored = trigger.serialize()
    # the trigger table (serde, as Trigger.encrypt_kwargs / _decrypt_kwargs)
    from_table = roundtrip_trigger_kwargs(stored)
    assert KafkaAssetEventTrigger(**from_table).serialize() == (classpath, stored)
    # the serialized DAG's watcher (BaseSerialization, as encode_trigger)
    encoded = encode_trigger(trigger)
    decoded = {key: BaseSerialization.deserialize(value) for key, value in encoded["kwargs"].items()}
    assert encoded["classpath"] == classpath
    assert KafkaAssetEventTrigger(**decoded).serialize() == (classpath, stored)
    # same hash: the scheduler does not recreate the watcher's trigger on every parse
    assert BaseEventTrigger.hash(classpath, decoded) == BaseEventTrigger.hash(classpath, stored)


def test_shared_stream_key_is_one_stream_per_watcher():
    base = make_trigger(topics=["b", "a"], dlq_topic="dlq")
    key = base.shared_stream_key()
    assert key == (
        "airflow_kafka_events.asset_watcher",
        "airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger",
        ("a", "b"),
        "kafka_watcher",
        None,
        "dlq",
        "kafka_watcher",
        "ops://investigate/",
        None,
        True,
    )
    hash(key)
    # a watcher of another asset has a stream (a reader, a position) of its own
    sibling = make_trigger(topics=["a", "b"], dlq_topic="dlq", asset_uri="ops://cleanup")
    assert sibling.shared_stream_key() != key
    # filters that the stream does not apply keep the key
    assert make_trigger(topics=["a", "b"], dlq_topic="dlq", max_causation_depth=1).shared_stream_key() == key
    for change in (
        {"topics": ["a"]},
        {"kafka_config_id": "kafka_other"},
        {"group_id": "other-group"},
        {"dlq_topic": "dlq2"},
        {"dlq_topic": None},
        {"dlq_kafka_config_id": "kafka_dlq"},
        {"asset_name": "investigate"},
        {"include_partitioned": False},
    ):
        kwargs = {"topics": ["a", "b"], "dlq_topic": "dlq", **change}
        assert make_trigger(**kwargs).shared_stream_key() != key, change

    class Subclass(KafkaAssetEventTrigger):
        pass

    assert Subclass(topics=["a", "b"], asset_uri=ASSET.uri, dlq_topic="dlq").shared_stream_key() != key
    provider = KafkaSharedStreamTrigger(topics=["a", "b"], kafka_config_id="kafka_watcher", dlq_topic="dlq")
    assert provider.shared_stream_key() != key


def test_shared_stream_producer_is_ours_and_never_republishes_rejects():
    trigger = KafkaAssetEventTrigger(**FULL_KWARGS)
    producer = type(trigger).create_shared_stream_producer(trigger.serialize()[1])
    assert isinstance(producer, WatcherStream)
    assert producer.topics == ["a-events", "b-events"]
    assert producer.kafka_config_id == "kafka_watcher_ops"
    assert producer.group_id == "ops-watchers"
    assert producer.poll_timeout == 0.5
    assert (producer.asset_uri, producer.asset_name) == (trigger.asset_uri, trigger.asset_name)
    assert producer.include_partitioned == trigger.include_partitioned
    # the watcher writes its own dead letters, with reasons: the stream never re-publishes
    assert not hasattr(producer, "dlq_topic")
    assert producer.identity == trigger.shared_stream_key()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topics": []},
        {"topics": "events"},
        {"topics": ["events"], "asset_uri": None},
        {"topics": ["events"], "asset_uri": " "},
        {"topics": ["events"], "asset_uri": "a://b", "max_causation_depth": -1},
        {"topics": ["events"], "asset_uri": "a://b", "max_causation_depth": True},
        {"topics": ["events"], "asset_uri": "a://b", "allow": []},
        {"topics": ["events"], "asset_uri": "a://b", "group_id": ""},
        {"topics": ["events"], "asset_uri": "a://b", "signing_conn_id": 3},
        {"topics": ["events"], "asset_uri": "a://b", "dedupe_ttl": "a day"},
        {"topics": ["events"], "asset_uri": "a://b", "dedupe_ttl": 0},
        {"topics": ["events"], "asset_uri": "a://b", "dedupe_max_keys": 0},
    ],
)
def test_bad_arguments_fail_at_parse_time(kwargs):
    with pytest.raises(ValidationError):
        KafkaAssetEventTrigger(**kwargs)


def test_run_is_not_supported():
    async def first():
        async for _ in make_trigger().run():
            pass

    with pytest.raises(NotImplementedError):
        asyncio.run(first())


def test_kafka_watched_asset_builds_the_asset_and_its_watcher():
    asset = kafka_watched_asset(
        "ops://investigate", topics=["events"], dlq_topic="dlq", max_causation_depth=2
    )
    assert (asset.name, asset.uri) == ("ops://investigate", "ops://investigate/")
    (watcher,) = asset.watchers
    assert watcher.name == "kafka:ops://investigate"
    trigger = watcher.trigger
    assert isinstance(trigger, KafkaAssetEventTrigger)
    assert (trigger.asset_uri, trigger.asset_name) == (asset.uri, asset.name)
    assert (trigger.dlq_topic, trigger.max_causation_depth) == ("dlq", 2)
    named = kafka_watched_asset("s3://b/k", name="orders", topics=["events"], watcher_name="w", group="g")
    assert (named.name, named.group, named.watchers[0].name) == ("orders", "g", "w")


# --------------------------------------------------------------------------- filtering
def test_own_events_fire_with_the_envelope_in_the_payload(monkeypatch):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq)
    ours = envelope(
        partition_key="p1",
        partition_date=datetime(2026, 1, 2, tzinfo=timezone.utc),
        idempotency_key="k1",
        causation=("E0",),
    )
    fired, rejected = run_filter(trigger, [record(ours, 0), record(envelope(OTHER), 1)], monkeypatch)
    assert rejected == [] and dlq.sent == []
    assert list(fired) == [0]
    payload = fired[0]
    assert payload == json.loads(json.dumps(payload))  # plain JSON: it becomes AssetEvent.extra
    assert payload["event_id"] == ours.event_id
    assert payload["asset"] == {"name": ASSET.name, "uri": ASSET.uri}
    assert payload["partition_key"] == "p1"
    assert payload["partition_date"] == "2026-01-02T00:00:00.000000+00:00"
    assert payload["extra"] == {"reason": "task failed", "dag_id": "etl"}
    assert payload["source"]["kind"] == "dag_callback" and payload["source"]["dag_id"] == "etl"
    assert payload["causation"] == ["E0"]
    assert payload["idempotency_key"] == "k1"
    assert payload["signed"] is False
    assert payload["kafka"] == {"topic": "events", "partition": 0, "offset": 0}
    assert payload[PROVENANCE_EXTRA_KEY] == {
        "event_id": ours.event_id,
        "causation": ["E0"],
        "idempotency_key": "k1",
    }
    assert payload == envelope_payload(ours, record(ours, 0))


def test_a_fired_event_logs_as_its_asset_event_and_reaches_airflow_whole(monkeypatch):
    trigger = make_trigger(FakeDlqProducer())
    ours = envelope(extra={"note": "<script>alert(1)</script> token=hunter2"}, idempotency_key="k1")
    fired: list[Any] = []

    async def stream() -> AsyncIterator[KafkaRecord]:
        yield record(ours, 7)

    async def collect() -> None:
        async for event in trigger.filter_shared_stream(stream()):
            fired.append(event)

    asyncio.run(collect())
    [event] = fired
    logged = repr(event)  # Airflow's runner logs "Trigger fired event" with result=<the event>
    assert ours.event_id in logged and ASSET.uri in logged
    assert "'kafka': {'topic': 'events', 'partition': 0, 'offset': 7}" in logged
    assert "hunter2" not in logged and "<script>" not in logged and "k1" not in logged  # not the payload
    # to the supervisor it is Airflow's TriggerEvent with the whole payload
    changes = messages.TriggerStateChanges(events=[TriggerEventEntry(1, event, None)])
    received = messages.TriggerStateChanges.model_validate_json(changes.model_dump_json()).events[0].event
    assert type(received) is TriggerEvent and received.payload == event.payload
    assert received.payload["extra"] == {"note": "<script>alert(1)</script> token=hunter2"}


def test_matching_by_name_and_or_uri(monkeypatch):
    by_name = make_trigger(asset_name=ASSET.name)
    fired, _ = run_filter(by_name, [record(envelope(), 0), record(envelope(OTHER), 1)], monkeypatch)
    assert list(fired) == [0]
    both = make_trigger(asset_uri=ASSET.uri, asset_name="another name")
    fired, _ = run_filter(both, [record(envelope(), 0)], monkeypatch)
    assert fired == {}
    # a producer that did not normalize the URI still matches
    raw_uri = envelope(AssetRef(name="x", uri="OPS://investigate"))
    fired, _ = run_filter(make_trigger(asset_uri="ops://investigate"), [record(raw_uri, 0)], monkeypatch)
    assert list(fired) == [0]


def test_duplicates_are_dropped_by_idempotency_key_then_event_id(monkeypatch):
    trigger = make_trigger(FakeDlqProducer())
    first = envelope(idempotency_key="same")
    again = envelope(idempotency_key="same")  # a retry: same key, new event id
    other = envelope(idempotency_key="different")
    no_key = envelope(idempotency_key=None)
    records = [
        record(first, 0),
        record(again, 1),
        record(other, 2),
        record(first, 3),  # the very same record redelivered
        record(no_key, 4),
        record(no_key, 5),
    ]
    fired, rejected = run_filter(trigger, records, monkeypatch)
    assert sorted(fired) == [0, 2, 4]
    assert rejected == []
    # the memory belongs to the watcher instance: a new instance (triggerer restart) forgets
    fired, _ = run_filter(make_trigger(), [record(again, 1)], monkeypatch)
    assert list(fired) == [1]


def test_dedupe_memory_is_bounded_and_expires():
    trigger = make_trigger(dedupe_max_keys=2, dedupe_ttl=30.0)
    assert trigger._seen.max_size == 2 and trigger._seen.ttl == 30.0
    assert make_trigger(dedupe_ttl=None)._seen.ttl is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not avro at all", "undecodable"),
        (b'{"event_id": "E1"}', "undecodable"),
        (None, "undecodable"),
        (
            TRIGGER_EVENT_CODEC.encode(
                TriggerEventEnvelope(trigger_run_id="r", sequence_index=0, is_last=True)
            ),
            "unknown-schema",
        ),
    ],
    ids=["not-avro", "json", "no-value", "another-envelope-type"],
)
def test_poison_goes_to_the_dlq_with_its_reason_and_the_stream_goes_on(
    monkeypatch, capsys, caplog, value, reason
):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq)
    poison = record(value, 7, partition=2)
    fired, rejected = run_filter(trigger, [poison, record(envelope(), 8, partition=2)], monkeypatch)
    assert list(fired) == [8]
    assert rejected == [7]
    (sent,) = dlq.sent
    assert sent["topic"] == "events.dlq" and sent["value"] == value
    assert ("event_id", b"x") in sent["headers"]  # original headers kept
    (letter,) = dlq.letters()
    assert letter.reason == reason
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("events", 2, 7)
    assert letter.source_timestamp_ms == 1_700_000_000_007
    assert letter.error_type.startswith("airflow_kafka_events.errors.")
    assert letter.consumer == f"KafkaAssetEventTrigger(asset={ASSET.uri}, group=group.id of kafka_watcher)"
    assert letter.event_id is None and letter.asset_uri is None
    # the watcher's dead-lettered line, as log-based alerts match it
    captured = capsys.readouterr()  # the SDK's structlog writes to stdout
    assert "Dead-lettered events[2]@7 to events.dlq[0]@0: " in captured.out + captured.err + caplog.text


def test_invalid_envelope_fields_are_a_reason_of_their_own(monkeypatch):
    dlq = FakeDlqProducer()
    bad = envelope()
    monkeypatch.setattr(
        AssetEventEnvelope,
        "to_avro",
        lambda self, _orig=AssetEventEnvelope.to_avro: {**_orig(self), "event_id": ""},
    )
    value = ASSET_EVENT_CODEC.encode(bad)
    monkeypatch.undo()
    _, rejected = run_filter(make_trigger(dlq), [record(value, 0)], monkeypatch)
    assert rejected == [0]
    assert dlq.letters()[0].reason == "invalid-envelope"


def test_poison_is_dead_lettered_once_per_triggerer(monkeypatch):
    dlq = FakeDlqProducer()
    one = make_trigger(dlq)
    two = make_trigger(dlq, asset_uri=OTHER.uri)  # another watcher (another stream) of the topic
    poison = record(b"garbage", 3)
    _, rejected_one = run_filter(one, [poison], monkeypatch)
    _, rejected_two = run_filter(two, [poison], monkeypatch)
    assert rejected_one == [3] and rejected_two == []  # the second watcher just moves on
    assert len(dlq.sent) == 1
    # a watcher reading through another connection dead-letters its own copy
    other_group = make_trigger(dlq, kafka_config_id="kafka_elsewhere")
    _, rejected = run_filter(other_group, [poison], monkeypatch)
    assert rejected == [3] and len(dlq.sent) == 2


def test_causation_too_deep_goes_to_the_dlq(monkeypatch):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq, max_causation_depth=2)
    ok = envelope(causation=("E0", "E1"))
    deep = envelope(causation=("E0", "E1", "E2"))
    fired, rejected = run_filter(trigger, [record(ok, 0), record(deep, 1)], monkeypatch)
    assert list(fired) == [0] and rejected == [1]
    (letter,) = dlq.letters()
    assert letter.reason == "causation-too-deep"
    assert letter.error_type.endswith("CausationTooDeepError")
    assert "3 ancestor" in letter.error_message and "max_causation_depth=2" in letter.error_message
    assert (letter.event_id, letter.asset_uri) == (deep.event_id, ASSET.uri)
    # zero means: only events nothing caused
    fired, rejected = run_filter(
        make_trigger(FakeDlqProducer(), max_causation_depth=0), [record(ok, 2)], monkeypatch
    )
    assert fired == {} and rejected == [2]


def test_allowlist_denial_goes_to_the_dlq(monkeypatch):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq, allow=[{"source_kinds": ["dag_callback"], "dag_ids": ["etl*"]}])
    allowed = envelope()
    denied = envelope(source=EventSource(SourceKind.EXTERNAL, producer="laptop"))
    fired, rejected = run_filter(trigger, [record(allowed, 0), record(denied, 1)], monkeypatch)
    assert list(fired) == [0] and rejected == [1]
    (letter,) = dlq.letters()
    assert letter.reason == "not-allowed"
    assert "producer='laptop'" in letter.error_message


def test_signatures_are_verified_with_the_connection_key(monkeypatch):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq, signing_conn_id="asset_signing")

    async def keys():
        return [KEY, b"previous-key"]

    monkeypatch.setattr(trigger, "_load_signing_keys", keys)
    signed = sign_envelope(envelope(), KEY)
    rotated = sign_envelope(envelope(), b"previous-key")
    forged = sign_envelope(envelope(), b"attacker")
    unsigned = envelope()
    tampered = sign_envelope(envelope(extra={"x": 1}), KEY)
    tampered = AssetEventEnvelope(**{**tampered.__dict__, "extra": {"x": 2}})
    records = [
        record(signed, 0),
        record(rotated, 1),
        record(forged, 2),
        record(unsigned, 3),
        record(tampered, 4),
    ]
    fired, rejected = run_filter(trigger, records, monkeypatch)
    assert sorted(fired) == [0, 1] and rejected == [2, 3, 4]
    assert fired[0]["signed"] is True
    assert [letter.reason for letter in dlq.letters()] == [
        "signature-invalid",
        "signature-missing",
        "signature-invalid",
    ]
    # other assets' events are not this watcher's business: no key needed, nothing refused
    fired, rejected = run_filter(trigger, [record(envelope(OTHER), 5)], monkeypatch)
    assert fired == {} and rejected == []


def test_unavailable_signing_key_refuses_instead_of_guessing(monkeypatch):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq, signing_conn_id="missing_conn")
    calls = []

    async def keys():
        calls.append(1)
        raise ConfigurationError("connection missing_conn holds no signing key")

    monkeypatch.setattr(trigger, "_load_signing_keys", keys)
    fired, rejected = run_filter(
        trigger, [record(sign_envelope(envelope(), KEY), i) for i in range(3)], monkeypatch
    )
    assert fired == {} and rejected == [0, 1, 2]
    assert {letter.reason for letter in dlq.letters()} == {"signing-key-unavailable"}
    assert len(calls) == 1  # retried at most every few seconds, not per record


def test_signing_key_comes_from_the_connection_password_and_previous_keys(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_ASSET_SIGNING",
        json.dumps({"conn_type": "generic", "password": "current", "extra": {"previous_keys": ["old"]}}),
    )
    trigger = make_trigger(signing_conn_id="asset_signing")
    assert asyncio.run(trigger._load_signing_keys()) == [b"current", b"old"]
    monkeypatch.setenv("AIRFLOW_CONN_ASSET_SIGNING", json.dumps({"conn_type": "generic"}))
    with pytest.raises(ConfigurationError, match="holds no signing key"):
        asyncio.run(make_trigger(signing_conn_id="asset_signing")._load_signing_keys())


def test_partitioned_events_can_be_left_to_a_bridge(monkeypatch):
    trigger = make_trigger(include_partitioned=False)
    fired, rejected = run_filter(
        trigger, [record(envelope(partition_key="p"), 0), record(envelope(), 1)], monkeypatch
    )
    assert list(fired) == [1] and rejected == []


def test_a_bug_while_checking_keeps_the_record_in_the_dlq(monkeypatch):
    dlq = FakeDlqProducer()
    trigger = make_trigger(dlq)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(asset_watcher, "envelope_payload", broken)
    fired, rejected = run_filter(trigger, [record(envelope(), 0)], monkeypatch)
    assert fired == {} and rejected == [0]
    assert dlq.letters()[0].reason == "internal-error"
    assert dlq.letters()[0].error_type == "RuntimeError"


def test_without_a_dlq_topic_refused_records_are_logged_and_dropped(monkeypatch, capsys, caplog):
    trigger = make_trigger(max_causation_depth=0)
    fired, rejected = run_filter(trigger, [record(envelope(causation=("E0",)), 0)], monkeypatch)
    assert fired == {} and rejected == [0]
    captured = capsys.readouterr()
    assert "no dlq_topic" in captured.out + captured.err + caplog.text


def test_dead_letter_delivery_is_retried_before_the_record_is_rejected(monkeypatch):
    monkeypatch.setattr(watcher_dead_letters, "_DLQ_RETRY_FIRST_DELAY", 0.01)
    dlq = FakeDlqProducer(fail=2)
    trigger = make_trigger(dlq)
    fired, rejected = run_filter(trigger, [record(b"junk", 0), record(envelope(), 1)], monkeypatch)
    assert dlq.attempts == 3 and len(dlq.sent) == 1
    assert rejected == [0] and list(fired) == [1]


def test_cancelled_dead_letter_write_releases_the_record_for_a_sibling(monkeypatch):
    monkeypatch.setattr(watcher_dead_letters, "_DLQ_RETRY_FIRST_DELAY", 10.0)
    trigger = make_trigger(FakeDlqProducer(fail=1_000))
    verdict = asyncio.run(trigger.judge(record(b"junk", 0)))
    assert verdict.action == "reject"

    async def cancelled_write():
        task = asyncio.create_task(trigger._dead_letter(record(b"junk", 0), verdict))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_write())
    sibling_dlq = FakeDlqProducer()
    sibling = make_trigger(sibling_dlq, asset_uri=OTHER.uri)
    _, rejected = run_filter(sibling, [record(b"junk", 0)], monkeypatch)
    assert rejected == [0] and len(sibling_dlq.sent) == 1


# --------------------------------------------------------------------------- ack mode, for real
class FakeStreamProducer(SharedStreamProducer):
    """Yields fixed records (as the Kafka producer would) and records the advances."""

    def __init__(self, records: list[KafkaRecord]) -> None:
        self.records = records
        self.advanced: list[AdvanceItem] = []

    async def open_stream(self):
        for item in self.records:
            yield item, KafkaBrokerPayload(topic=item.topic, partition=item.partition, offset=item.offset)
        await asyncio.Event().wait()

    def get_advance_lane(self, broker_payload):
        return broker_payload.topic, broker_payload.partition

    async def advance(self, batch):
        self.advanced.extend(batch)


def test_rejects_and_persist_confirmations_reach_the_broker_advance(monkeypatch):
    """Two watchers on one shared stream, driven by Airflow's SharedStreamManager (ack mode)."""
    dlq = FakeDlqProducer()
    ours, theirs = envelope(idempotency_key="a"), envelope(OTHER, idempotency_key="b")
    records = [
        record(ours, 0),
        record(b"poison", 1),
        record(theirs, 2),
        record(envelope(causation=tuple(f"E{i}" for i in range(9))), 3),  # too deep for the first
        record(envelope(idempotency_key="a"), 4),  # a repeat
    ]
    fake = FakeStreamProducer(records)
    monkeypatch.setattr(
        KafkaAssetEventTrigger, "create_shared_stream_producer", classmethod(lambda cls, kw: fake)
    )
    first, second = make_trigger(dlq), make_trigger(dlq, asset_uri=OTHER.uri)
    key = first.shared_stream_key()
    fired: dict[int, list[str]] = {1: [], 2: []}

    async def scenario():
        manager = SharedStreamManager(ack_timeout=30.0)
        streams = {
            tid: manager.subscribe(trigger_id=tid, trigger=t, key=key) for tid, t in ((1, first), (2, second))
        }

        async def run(tid: int, trigger: KafkaAssetEventTrigger):
            async for event in trigger.filter_shared_stream(streams[tid]):
                seq = manager.bind_pending_event(trigger_id=tid, key=key)
                assert seq is not None  # bound to the raw record: its commit waits for this
                fired[tid].append(event.payload["event_id"])
                await asyncio.sleep(0.01)
                manager.confirm_persisted([seq])  # what the triggerer does once Airflow stored it

        tasks = [asyncio.create_task(run(1, first)), asyncio.create_task(run(2, second))]
        for _ in range(500):
            if len(fake.advanced) >= 4:
                break
            await asyncio.sleep(0.01)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await manager.stop_all()

    asyncio.run(scenario())
    assert fired == {1: [ours.event_id], 2: [theirs.event_id]}
    outcomes = {item.broker_payload.offset: item.outcome for item in fake.advanced}
    assert outcomes[0].acked == 2 and outcomes[0].rejected == 0
    assert outcomes[1].rejected == 1 and outcomes[1].acked == 1  # dead-lettered once, by one watcher
    assert outcomes[2].acked == 2
    assert outcomes[3].rejected == 1 and outcomes[3].acked == 1
    assert all(outcome.failed == 0 for outcome in outcomes.values())
    assert sorted(letter.reason for letter in dlq.letters()) == ["causation-too-deep", "undecodable"]


# --------------------------------------------------------------------------- consumer-side helpers
def _asset_event(extra: Any) -> SimpleNamespace:
    return SimpleNamespace(extra=extra)


def test_watcher_causation_reads_the_payload_of_watcher_events():
    parent = envelope(causation=("E0",))
    watcher_extra = {"from_trigger": True, "payload": envelope_payload(parent)}
    bridged_extra = {PROVENANCE_EXTRA_KEY: {"event_id": "B1", "causation": ["B0"]}}
    context = {
        "triggering_asset_events": {
            "asset-1": [_asset_event(watcher_extra), _asset_event({"from_trigger": True, "payload": "x"})],
            "asset-2": [_asset_event(bridged_extra), _asset_event(watcher_extra), _asset_event({})],
        }
    }
    assert watcher_causation(context) == ("E0", parent.event_id, "B0", "B1")
    assert causation_from_watcher_extra(watcher_extra) == ("E0", parent.event_id)
    assert causation_from_watcher_extra(None) == ()
    assert watcher_causation({}) == () and watcher_causation(None) == ()
    assert watcher_payload(_asset_event(watcher_extra))["event_id"] == parent.event_id
    assert watcher_payload(watcher_extra)["event_id"] == parent.event_id
    assert watcher_payload({"from_trigger": True, "payload": {"no": "provenance"}}) is None
    assert watcher_payload(_asset_event(bridged_extra)) is None


# --------------------------------------------------------------------------- the example DAG
def test_example_dag_parses_and_wires_the_watcher():
    import runpy
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    path = Path(__file__).resolve().parents[3] / "examples" / "dags" / "investigate_on_failure.py"
    bag = DagBag(dag_folder=str(path), safe_mode=False)
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"nightly_load", "investigate_failure"}
    assert bag.dags["nightly_load"].on_failure_callback
    asset = runpy.run_path(str(path))["INVESTIGATE"]
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, KafkaAssetEventTrigger)
    assert trigger.kafka_config_id == "kafka_watcher" and trigger.dlq_topic == "airflow.kafka-events.dlq"
    assert trigger.max_causation_depth == 3
    assert trigger.allow == [{"source_kinds": ["dag_callback"], "dag_ids": ["nightly_*"]}]
    classpath, kwargs = trigger.serialize()
    assert KafkaAssetEventTrigger(**roundtrip_trigger_kwargs(kwargs)).serialize() == (classpath, kwargs)


@pytest.mark.parametrize("kwargs", [FULL_KWARGS, {"topics": ["events"], "asset_name": "n"}])
def test_the_watcher_hash_survives_the_trigger_table_so_airflow_registers_it(kwargs):
    # What the dag-processor does (dag_processing/collection.py, Airflow 3.3): hash the encoded
    # watcher trigger, store it as a Trigger row, and later compare with the hash of the row's
    # kwargs. A difference makes Airflow drop and re-create the trigger on every parse and never
    # link the watcher (seen with `allow` as a list of dicts).
    from airflow.models.trigger import Trigger

    encoded = encode_trigger(KafkaAssetEventTrigger(**kwargs))
    row = Trigger(classpath=encoded["classpath"], kwargs=encoded["kwargs"])
    assert BaseEventTrigger.hash(row.classpath, row.kwargs) == BaseEventTrigger.hash(
        encoded["classpath"], encoded["kwargs"]
    )
    rebuilt = KafkaAssetEventTrigger(**row.kwargs)
    assert rebuilt.allow == KafkaAssetEventTrigger(**kwargs).allow
