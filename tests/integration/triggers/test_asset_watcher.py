"""Asset watcher against a real Kafka broker.

* the dead-letter writer: the record lands with the original value/key and the reason headers;
* signatures: sign, publish, consume, verify;
* the whole watcher path in-process: ``KafkaAssetEventTrigger`` driven by Airflow's own
  ``SharedStreamManager`` (ack mode) over real partitions -- accepted events, repeats, poison,
  refused events in the dead-letter topic, positions stored only past handled records;
* two triggerers (two managers) running six watchers of one topic: nothing lost, nothing twice;
* a restarted watcher resumes at its stored position; a new one at ``auto.offset.reset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_events.assets.authz import sign_envelope, verify_envelope
from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import EnvelopeDecodeError
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS
from airflow_kafka_events.watcher import dead_letters as watcher_dead_letters
from airflow_kafka_events.watcher.stream import state_key
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger
from harness.waiting import until
from harness.watchers import MemoryStores, Watchers, memory_stores, watcher_conn

pytestmark = pytest.mark.integration

ASSET_A = AssetRef(name="it://watched/a", uri="it://watched/a")
ASSET_B = AssetRef(name="it://watched/b", uri="it://watched/b")


@pytest.fixture(autouse=True)
def _fresh_process_state():
    watcher_dead_letters.DEAD_LETTERED.clear()
    yield
    watcher_dead_letters.DEAD_LETTERED.clear()


def _producer(bootstrap: str):
    return get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())


def _read_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                messages.append(msg)
        # anything beyond what was expected would be a duplicate: give it a moment to show up
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                messages.append(msg)
    finally:
        consumer.close()
    assert len(messages) >= expected, f"only {len(messages)} of {expected} records on {topic}"
    return messages


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in offsets}
    finally:
        consumer.close()


def _event(asset: AssetRef, **kwargs: Any) -> AssetEventEnvelope:
    return build_envelope(asset=asset, source=EventSource(SourceKind.EXTERNAL, producer="itest"), **kwargs)


# --------------------------------------------------------------------------- dead-letter writer
def test_dead_letter_record_lands_with_reason_headers(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="dlq")
    writer = DeadLetterWriter(_producer(kafka_bootstrap), topic, timeout=30.0)
    letter = DeadLetter.from_exception(
        DeadLetterReason.UNDECODABLE,
        EnvelopeDecodeError("the bytes are no Avro single-object encoding"),
        topic="asset-events",
        partition=3,
        offset=1234,
        timestamp_ms=1_700_000_000_000,
        consumer="KafkaAssetEventTrigger(asset=it://watched/a, group=g)",
    )
    receipt = asyncio.run(
        writer.awrite(letter, value=b"\xffpoison", key=b"it://watched/a", headers=[("trace", b"t-1")])
    )
    sync_receipt = writer.write(letter, value=None)
    assert (receipt.topic, sync_receipt.topic) == (topic, topic)
    first, second = _read_all(kafka_bootstrap, topic, expected=2)
    assert first.value() == b"\xffpoison" and first.key() == b"it://watched/a"
    headers = first.headers()
    assert headers[0] == ("trace", b"t-1")
    named = dict(headers)
    assert named["x-reason"] == b"undecodable"
    assert named["x-error-type"] == b"airflow_kafka_events.errors.EnvelopeDecodeError"
    assert named["x-source-topic"] == b"asset-events"
    assert named["x-source-partition"] == b"3"
    assert named["x-source-offset"] == b"1234"
    assert DeadLetter.from_headers(headers) == letter
    assert second.value() is None and DeadLetter.from_headers(second.headers()).reason == "undecodable"


# --------------------------------------------------------------------------- signatures
def test_signed_envelope_survives_kafka_and_verifies(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="signed")
    key = "an HMAC key of at least thirty-two bytes"
    signed = sign_envelope(_event(ASSET_A, extra={"rows": 3, "ratio": 0.25, "note": "café ✓"}), key)
    publish(signed, producer=_producer(kafka_bootstrap), topic=topic, timeout=30)
    (msg,) = _read_all(kafka_bootstrap, topic, expected=1)
    decoded = ASSET_EVENT_CODEC.decode(msg.value())
    assert decoded == signed
    verify_envelope(decoded, key)
    verify_envelope(decoded, ["rotated-out key", key])


# --------------------------------------------------------------------------- the watcher path
@pytest.fixture
def stores(monkeypatch) -> MemoryStores:
    return memory_stores(monkeypatch)


def test_watchers_handle_only_their_records_and_store_positions_past_them(
    kafka_bootstrap, new_topic, monkeypatch, stores
):
    topic = new_topic(partitions=1, prefix="watched")
    dlq_topic = new_topic(partitions=1, prefix="watched-dlq")
    group = f"watchers-{uuid.uuid4().hex[:8]}"
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_it", group)
    monkeypatch.setenv(
        "AIRFLOW_CONN_ASSET_SIGNING_IT", json.dumps({"conn_type": "generic", "password": "b-signing-key"})
    )
    producer = _producer(kafka_bootstrap)
    a1 = _event(ASSET_A, extra={"n": 1}, idempotency_key="a-1")
    a1_again = _event(ASSET_A, extra={"n": 1}, idempotency_key="a-1")
    b_signed = sign_envelope(_event(ASSET_B, extra={"n": 2}), "b-signing-key")
    b_unsigned = _event(ASSET_B, extra={"n": 3})
    a_deep = _event(ASSET_A, extra={"n": 4}, causation=["E0", "E1", "E2"])
    a2 = _event(ASSET_A, extra={"n": 5})
    for envelope in (a1, a1_again, b_signed):
        publish(envelope, producer=producer, topic=topic)
    producer.send_and_wait(topic, b"plain text, not an envelope", key=b"it://watched/a")
    for envelope in (b_unsigned, a_deep, a2):
        publish(envelope, producer=producer, topic=topic)
    common = {"topics": [topic], "kafka_config_id": "kafka_watcher_it", "dlq_topic": dlq_topic}
    watcher_a = KafkaAssetEventTrigger(asset_uri=ASSET_A.uri, max_causation_depth=2, **common)
    watcher_b = KafkaAssetEventTrigger(asset_uri=ASSET_B.uri, signing_conn_id="asset_signing_it", **common)

    async def scenario() -> Watchers:
        async with Watchers().running({1: watcher_a, 2: watcher_b}) as watchers:
            for asset in (ASSET_A, ASSET_B):
                await until(
                    lambda a=asset: stores.positions(a.uri, "kafka_watcher_it") == {0: 7},
                    90,
                    f"{asset.uri}'s stored position to reach 7",
                )
        return watchers

    watchers = asyncio.run(scenario())
    assert [p["event_id"] for p in watchers.fired[1]] == [a1.event_id, a2.event_id]
    assert [p["event_id"] for p in watchers.fired[2]] == [b_signed.event_id]
    assert watchers.fired[2][0]["signed"] is True
    assert watchers.fired[1][0]["kafka"] == {"topic": topic, "partition": 0, "offset": 0}
    # the accepted keys are stored with the position (a repeat after a restart is dropped too)
    stored_a = stores.values[(ASSET_A.uri, state_key("kafka_watcher_it"))]
    assert "a-1" in stored_a["seen"]
    # no consumer group was joined or committed to
    assert _committed(kafka_bootstrap, group, topic, 1)[0] < 0
    letters = {
        DeadLetter.from_headers(msg.headers()).source_offset: (DeadLetter.from_headers(msg.headers()), msg)
        for msg in _read_all(kafka_bootstrap, dlq_topic, expected=3)
    }
    assert sorted(letters) == [3, 4, 5]  # one record each: the poison once, though both watchers saw it
    assert letters[3][0].reason == "undecodable" and letters[3][1].value() == b"plain text, not an envelope"
    assert letters[4][0].reason == "signature-missing" and letters[4][0].event_id == b_unsigned.event_id
    assert letters[5][0].reason == "causation-too-deep" and letters[5][0].asset_uri == ASSET_A.uri
    assert all(letter.source_topic == topic for letter, _ in letters.values())


WATCHED = [AssetRef(name=f"it://multi/{i}", uri=f"it://multi/{i}") for i in range(6)]


def test_two_triggerers_lose_nothing_whichever_watchers_each_runs(
    kafka_bootstrap, new_topic, monkeypatch, stores
):
    """Six watchers, one topic of 3 partitions, one connection with one group.id, two triggerers.

    Before: the group split the partitions between the triggerers and 60 of 120 events were lost.
    """
    topic = new_topic(partitions=3, prefix="multi")
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_multi", f"multi-{uuid.uuid4().hex[:8]}")
    producer = _producer(kafka_bootstrap)
    sent: dict[str, list[str]] = {asset.uri: [] for asset in WATCHED}
    for n in range(20):
        for asset in WATCHED:
            envelope = _event(asset, extra={"n": n})
            # spread every asset's events over every partition
            value = ASSET_EVENT_CODEC.encode(envelope, topic=topic)
            producer.send_and_wait(topic, value, key=asset.uri, partition=n % 3)
            sent[asset.uri].append(envelope.event_id)
    common = {"topics": [topic], "kafka_config_id": "kafka_watcher_multi"}
    triggers = {
        i + 1: KafkaAssetEventTrigger(asset_uri=asset.uri, **common) for i, asset in enumerate(WATCHED)
    }

    async def scenario() -> tuple[Watchers, Watchers]:
        first, second = Watchers(), Watchers()  # two triggerers: two managers, nothing shared
        for tid, trigger in triggers.items():
            (first if tid % 2 else second).start(tid, trigger)
        try:
            await until(
                lambda: sum(len(f) for w in (first, second) for f in w.fired.values()) >= 120,
                120,
                "120 asset events",
            )
            for asset in WATCHED:
                await until(
                    lambda a=asset: sum(stores.positions(a.uri, "kafka_watcher_multi").values()) == 120,
                    60,
                    f"{asset.uri}'s positions to pass every record",
                )
        finally:
            await first.stop()
            await second.stop()
        return first, second

    first, second = asyncio.run(scenario())
    fired = {**first.fired, **second.fired}
    for tid, asset in enumerate(WATCHED, start=1):
        got = [p["event_id"] for p in fired[tid]]
        assert sorted(got) == sorted(sent[asset.uri]), asset.uri  # all 20, none twice
        assert len(got) == len(set(got)) == 20


def test_many_watchers_of_one_topic_share_one_reader_in_a_triggerer(
    kafka_bootstrap, new_topic, monkeypatch, stores
):
    """30 watchers of one topic in one triggerer: ONE reader fetches each record once, and each
    watcher fires exactly its own events and stores its own position."""
    topic = new_topic(partitions=3, prefix="shared")
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_shared", f"shared-{uuid.uuid4().hex[:8]}")
    assets = [AssetRef(name=f"it://shared/{i}", uri=f"it://shared/{i}") for i in range(30)]
    triggers = {
        i + 1: KafkaAssetEventTrigger(asset_uri=a.uri, topics=[topic], kafka_config_id="kafka_watcher_shared")
        for i, a in enumerate(assets)
    }
    created_before = SHARED_READERS.created
    sent: dict[str, list[str]] = {a.uri: [] for a in assets}

    async def scenario() -> tuple[Watchers, Any]:
        async with Watchers().running(triggers) as watchers:
            readers = lambda: [r for r in SHARED_READERS.readers() if r.topics == [topic]]  # noqa: E731
            await until(lambda: [r.feeds for r in readers()] == [30], 60, "30 watchers on one reader")
            producer = _producer(kafka_bootstrap)
            for n in range(5):
                for asset in assets:
                    receipt = publish(_event(asset, extra={"n": n}), producer=producer, topic=topic)
                    sent[asset.uri].append(receipt.event_id)
            await until(lambda: sum(len(f) for f in watchers.fired.values()) >= 150, 60, "150 asset events")
            for asset in assets:
                await until(
                    lambda a=asset: sum(stores.positions(a.uri, "kafka_watcher_shared").values()) == 150,
                    60,
                    f"{asset.uri}'s positions to pass every record",
                )
            (reader,) = readers()
        return watchers, reader

    watchers, reader = asyncio.run(scenario())
    assert SHARED_READERS.created - created_before == 1  # one client for the topic, not 30
    assert reader.records_read == 150 and reader.catch_up_readers == 0  # each record fetched once
    for tid, asset in enumerate(assets, start=1):
        assert [p["event_id"] for p in watchers.fired[tid]] == sent[asset.uri]  # its own, in order, once
    assert not [r for r in SHARED_READERS.readers() if r.topics == [topic]]  # closed with the last watcher


def test_a_restarted_watcher_resumes_at_its_stored_position(kafka_bootstrap, new_topic, monkeypatch, stores):
    topic = new_topic(partitions=2, prefix="resume")
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_resume", f"resume-{uuid.uuid4().hex[:8]}")
    producer = _producer(kafka_bootstrap)
    before = [publish(_event(ASSET_A, extra={"n": n}), producer=producer, topic=topic) for n in range(4)]
    trigger = KafkaAssetEventTrigger(
        asset_uri=ASSET_A.uri, topics=[topic], kafka_config_id="kafka_watcher_resume"
    )

    async def run_until(count: int) -> list[str]:
        async with Watchers().running({1: trigger}) as watchers:
            await until(lambda: len(watchers.fired[1]) >= count, 60, f"{count} events")
            await asyncio.sleep(0)  # nothing else is awaited: stop right after the last event
        return [p["event_id"] for p in watchers.fired[1]]

    assert asyncio.run(run_until(4)) == [r.event_id for r in before]
    # a late watcher of another asset joining the topic now misses nothing either
    after = [publish(_event(ASSET_A, extra={"n": n}), producer=producer, topic=topic) for n in range(4, 7)]
    again = asyncio.run(run_until(3))
    assert sorted(again) == sorted(r.event_id for r in after)  # only the new ones: nothing twice


def test_a_new_watcher_starts_by_auto_offset_reset_whatever_its_group_committed(
    kafka_bootstrap, new_topic, monkeypatch, stores
):
    """A watcher never reads a consumer group's commits: without a stored position it starts at
    ``auto.offset.reset`` (earliest), even where its connection's group committed further on."""
    topic = new_topic(partitions=1, prefix="upgrade")
    group = f"upgrade-{uuid.uuid4().hex[:8]}"
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_upgrade", group)
    producer = _producer(kafka_bootstrap)
    receipts = [publish(_event(ASSET_A, extra={"n": n}), producer=producer, topic=topic) for n in range(5)]
    old = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        old.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)  # another client's commit
    finally:
        old.close()
    trigger = KafkaAssetEventTrigger(
        asset_uri=ASSET_A.uri, topics=[topic], kafka_config_id="kafka_watcher_upgrade"
    )

    async def scenario() -> list[str]:
        async with Watchers().running({1: trigger}) as watchers:
            await until(
                lambda: stores.positions(ASSET_A.uri, "kafka_watcher_upgrade") == {0: 5}, 60, "position 5"
            )
        return [p["event_id"] for p in watchers.fired[1]]

    assert asyncio.run(scenario()) == [r.event_id for r in receipts]


def test_a_record_every_watcher_refuses_is_dead_lettered_once_over_two_triggerers(
    kafka_bootstrap, new_topic, monkeypatch, stores
):
    """Two triggerers (two shared-stream managers; watchers of different connections, so that no
    in-process claim is shared between them) each run a watcher of the topic; both refuse the
    undecodable record, both claim it in the watchers' topic, one writes its dead letter."""
    topic = new_topic(partitions=2, prefix="claims")
    dlq_topic = new_topic(partitions=1, prefix="claims-dlq")
    # two triggerers in one test process: each one's registry of the watchers running in it would
    # hold only its own watcher; here neither counts as running beside the other
    monkeypatch.setattr(KafkaAssetEventTrigger, "running_here", lambda self: contextlib.nullcontext())
    stops = new_topic(partitions=3, prefix="claims-stops", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", stops)
    for conn_id in ("kafka_watcher_t1", "kafka_watcher_t2"):
        watcher_conn(monkeypatch, kafka_bootstrap, conn_id, f"claims-{uuid.uuid4().hex[:8]}")
    producer = _producer(kafka_bootstrap)
    poison = producer.send_and_wait(topic, b"\x7f not an envelope", key=b"it://watched/a", partition=1)
    after = [publish(_event(asset), producer=producer, topic=topic) for asset in (ASSET_A, ASSET_B)]
    first = KafkaAssetEventTrigger(
        asset_uri=ASSET_A.uri, topics=[topic], kafka_config_id="kafka_watcher_t1", dlq_topic=dlq_topic
    )
    second = KafkaAssetEventTrigger(
        asset_uri=ASSET_B.uri, topics=[topic], kafka_config_id="kafka_watcher_t2", dlq_topic=dlq_topic
    )

    def past_the_poison(asset: AssetRef, conn_id: str) -> bool:
        stored = stores.values.get((asset.uri, state_key(conn_id))) or {}
        return stored.get("positions", {}).get(topic, {}).get(str(poison.partition), 0) > poison.offset

    async def scenario() -> tuple[Watchers, Watchers]:
        one, two = Watchers(), Watchers()
        one.start(1, first)
        two.start(2, second)
        try:
            await until(lambda: one.fired[1] and two.fired[2], 90, "both watchers firing")
            await until(
                lambda: (
                    past_the_poison(ASSET_A, "kafka_watcher_t1")
                    and past_the_poison(ASSET_B, "kafka_watcher_t2")
                ),
                60,
                "both watchers' stored positions past the poison (dead-lettered, or left to the other)",
            )
        finally:
            await one.stop()
            await two.stop()
        return one, two

    one, two = asyncio.run(scenario())
    assert [p["event_id"] for p in one.fired[1]] == [after[0].event_id]
    assert [p["event_id"] for p in two.fired[2]] == [after[1].event_id]
    messages = _read_all(kafka_bootstrap, dlq_topic, expected=1)  # and 2 s more for a second one
    letters = [DeadLetter.from_headers(msg.headers()) for msg in messages]
    assert [(d.source_partition, d.source_offset, d.reason) for d in letters] == [
        (poison.partition, poison.offset, "undecodable")
    ]


def test_a_claim_won_by_a_run_that_stopped_before_writing_is_written_by_the_next(
    kafka_bootstrap, new_topic, monkeypatch, stores
):
    """The watcher of asset B claimed the undecodable record in an earlier run that stopped before
    its dead letter was acknowledged (its position stayed before the record). Now it runs again
    beside the watcher of asset A in one triggerer: whichever of the two meets the record first, the
    claim is this triggerer's, and the record is dead-lettered once."""
    from airflow_kafka_events.watcher.dead_letter_claims import DeadLetterClaims
    from airflow_kafka_events.watcher.stops import mark_key

    topic = new_topic(partitions=1, prefix="claims-again")
    dlq_topic = new_topic(partitions=1, prefix="claims-again-dlq")
    stops = new_topic(partitions=3, prefix="claims-again-stops", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", stops)
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_again", f"again-{uuid.uuid4().hex[:8]}")
    producer = _producer(kafka_bootstrap)
    poison = producer.send_and_wait(topic, b"\x7f not an envelope", partition=0)
    after = [publish(_event(asset), producer=producer, topic=topic) for asset in (ASSET_A, ASSET_B)]
    earlier_b = mark_key("kafka_watcher_again", ASSET_B.uri, None).decode()
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    claims = DeadLetterClaims(get_producer(settings.producer_config()), settings, stops, earlier_b)
    first = asyncio.run(claims.first_claimer(dlq_topic, topic, 0, poison.offset, poison.timestamp_ms))
    assert first == earlier_b  # the earlier run of B's watcher won the claim, and stopped
    common = {"topics": [topic], "kafka_config_id": "kafka_watcher_again", "dlq_topic": dlq_topic}

    async def scenario() -> Watchers:
        triggers = {
            1: KafkaAssetEventTrigger(asset_uri=ASSET_A.uri, **common),
            2: KafkaAssetEventTrigger(asset_uri=ASSET_B.uri, **common),
        }
        async with Watchers().running(triggers) as watchers:
            await until(lambda: watchers.fired[1] and watchers.fired[2], 90, "both watchers firing")
            await until(
                lambda: all(
                    stores.positions(a.uri, "kafka_watcher_again").get(0, 0) > 2 for a in (ASSET_A, ASSET_B)
                ),
                60,
                "both watchers' stored positions past every record",
            )
        return watchers

    asyncio.run(scenario())
    messages = _read_all(kafka_bootstrap, dlq_topic, expected=1)  # and 2 s more for a second one
    letters = [DeadLetter.from_headers(msg.headers()) for msg in messages]
    assert [(d.source_offset, d.reason) for d in letters] == [(poison.offset, "undecodable")]
    assert [r.event_id for r in after]  # published behind the poison, fired by their watchers
