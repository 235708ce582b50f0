"""The asset watcher (``KafkaAssetEventTrigger`` under Airflow's ``SharedStreamManager``, in-process) on
a connection with a real schema registry: both framings and confluent-kafka's own serializer fire asset
events, an unknown schema id is dead-lettered with its reason, a registry cut off mid-run holds the
watcher without a dead letter or a lost event, and a slow registry does not hold up the event loop."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.framing import frame_confluent
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher import dead_letters as watcher_dead_letters
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger
from harness.kafka_records import high_watermark
from harness.registry_records import confluent_serialized
from harness.waiting import until
from harness.watchers import MemoryStores, Watchers, memory_stores
from integration.registry.tcp_relay import relay_to
from integration.triggers.test_asset_watcher import _read_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ASSET = AssetRef(name="it://registry/a", uri="it://registry/a")
CONN = "kafka_registry_watcher_it"


@pytest.fixture(autouse=True)
def _fresh_process_state():
    watcher_dead_letters.DEAD_LETTERED.clear()
    yield
    watcher_dead_letters.DEAD_LETTERED.clear()


def _conn(monkeypatch: pytest.MonkeyPatch, bootstrap: str, registry_url: str) -> KafkaSettings:
    extra = {
        "bootstrap.servers": bootstrap,
        "group.id": f"watchers-{uuid.uuid4().hex[:8]}",
        "schema.registry.url": registry_url,
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))
    return KafkaSettings(extra)


def _event(n: int) -> AssetEventEnvelope:
    return build_envelope(
        asset=ASSET, source=EventSource(SourceKind.EXTERNAL, producer="registry-it"), extra={"n": n}
    )


@pytest.fixture
def stores(monkeypatch) -> MemoryStores:
    return memory_stores(monkeypatch)


def _run(watcher: KafkaAssetEventTrigger, done, during=None) -> Watchers:
    async def scenario() -> Watchers:
        async with Watchers().running({1: watcher}) as watchers:
            if during is not None:
                await during(watchers)
            await until(lambda: done(watchers), 120, "the watcher's events")
        return watchers

    return asyncio.run(scenario())


def test_the_watcher_fires_events_of_every_framing_and_dead_letters_an_unknown_schema_id(
    kafka_bootstrap,
    schema_registry_url,
    new_topic,
    monkeypatch,
    stores,
):
    topic, dlq = new_topic(partitions=1, prefix="watched"), new_topic(partitions=1, prefix="watched-dlq")
    settings = _conn(monkeypatch, kafka_bootstrap, schema_registry_url)
    producer = get_producer(settings.producer_config())
    by_confluent, by_project, single_object = _event(1), _event(2), _event(3)
    producer.send_and_wait(
        topic, confluent_serialized(schema_registry_url, topic, by_confluent), key=ASSET.uri, timeout=30
    )
    publish(by_project, producer=producer, topic=topic, timeout=30, codec=settings.codecs.asset)
    publish(single_object, producer=producer, topic=topic, timeout=30, codec=ASSET_EVENT_CODEC)
    producer.send_and_wait(topic, frame_confluent(2_000_000_001, b"\x00"), key=ASSET.uri, timeout=30)
    watcher = KafkaAssetEventTrigger(asset_uri=ASSET.uri, topics=[topic], kafka_config_id=CONN, dlq_topic=dlq)

    watchers = _run(watcher, lambda w: len(w.fired[1]) == 3 and stores.positions(ASSET.uri, CONN) == {0: 4})

    fired = [p["event_id"] for p in watchers.fired[1]]
    assert fired == [by_confluent.event_id, by_project.event_id, single_object.event_id]
    (dead,) = _read_all(kafka_bootstrap, dlq, expected=1)
    letter = DeadLetter.from_headers(dead.headers())
    assert letter.reason == "unknown-schema" and letter.source_offset == 3
    assert "no schema with id 2000000001" in letter.error_message


@pytest.mark.faults
def test_a_registry_cut_off_mid_run_holds_the_watcher_without_dead_letters_or_losses(
    kafka_bootstrap,
    schema_registry_url,
    new_topic,
    monkeypatch,
    stores,
    caplog,
):
    caplog.set_level(logging.WARNING, logger="airflow_kafka_events.watcher.stream")
    topic, dlq = new_topic(partitions=1, prefix="watched"), new_topic(partitions=1, prefix="watched-dlq")
    writer = KafkaSettings({"bootstrap.servers": kafka_bootstrap, "schema.registry.url": schema_registry_url})
    producer = get_producer(writer.producer_config())
    first, later = _event(1), [_event(2), _event(3)]
    publish(first, producer=producer, topic=topic, timeout=30, codec=ASSET_EVENT_CODEC)
    url = urlsplit(schema_registry_url)
    assert url.hostname is not None and url.port is not None
    with relay_to(url.hostname, url.port) as relay:
        _conn(monkeypatch, kafka_bootstrap, urlunsplit(url._replace(netloc=f"127.0.0.1:{relay.port}")))
        watcher = KafkaAssetEventTrigger(
            asset_uri=ASSET.uri, topics=[topic], kafka_config_id=CONN, dlq_topic=dlq
        )

        async def cut_then_restore(watchers: Watchers) -> None:
            await until(lambda: len(watchers.fired[1]) == 1, 120, "the first event")
            relay.stop()
            for envelope in later:  # registry-framed, written through the registry itself
                await asyncio.to_thread(
                    publish, envelope, producer=producer, topic=topic, timeout=30, codec=writer.codecs.asset
                )
            await until(
                lambda: sum("for the schema registry" in r.getMessage() for r in caplog.records) >= 2,
                120,
                "the watcher to try the registry twice",
            )
            assert len(watchers.fired[1]) == 1
            relay.start()

        watchers = _run(watcher, lambda w: len(w.fired[1]) == 3, during=cut_then_restore)

    assert [p["event_id"] for p in watchers.fired[1]] == [first.event_id] + [e.event_id for e in later]
    assert high_watermark(kafka_bootstrap, dlq) == 0


def test_the_first_fetch_of_a_schema_id_runs_off_the_event_loop(
    kafka_bootstrap,
    schema_registry_url,
    new_topic,
    monkeypatch,
    stores,
):
    """The registry answers each reply DELAY seconds late: the watcher fetches the writer schema in a
    thread, so the event loop goes on (no gap near DELAY), and the records still fire in order."""
    delay = 3.0
    topic, dlq = new_topic(partitions=1, prefix="watched"), new_topic(partitions=1, prefix="watched-dlq")
    writer = KafkaSettings({"bootstrap.servers": kafka_bootstrap, "schema.registry.url": schema_registry_url})
    producer = get_producer(writer.producer_config())
    events = [_event(n) for n in range(3)]
    for envelope in events:  # registry-framed: the watcher must fetch the id's writer schema
        publish(envelope, producer=producer, topic=topic, timeout=30, codec=writer.codecs.asset)
    url = urlsplit(schema_registry_url)
    assert url.hostname is not None and url.port is not None
    gaps: list[float] = []
    first_fired: list[float] = []
    with relay_to(url.hostname, url.port) as relay:
        relay.delay = delay  # a fresh URL: a registry client (and cache) of its own
        _conn(monkeypatch, kafka_bootstrap, urlunsplit(url._replace(netloc=f"127.0.0.1:{relay.port}")))
        watcher = KafkaAssetEventTrigger(
            asset_uri=ASSET.uri, topics=[topic], kafka_config_id=CONN, dlq_topic=dlq
        )

        async def watch_the_loop(watchers: Watchers) -> None:
            started = last = time.monotonic()
            while len(watchers.fired[1]) < len(events):
                await asyncio.sleep(0.02)
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                if watchers.fired[1] and not first_fired:
                    first_fired.append(now - started)
                assert now - started < 120, "the watcher's events did not come"

        watchers = _run(watcher, lambda w: len(w.fired[1]) == len(events), during=watch_the_loop)
        asked = relay.connections

    assert [p["event_id"] for p in watchers.fired[1]] == [e.event_id for e in events]
    assert asked >= 1 and first_fired[0] >= delay  # the writer schema came through the slow relay
    assert max(gaps) < delay / 2, f"the event loop stood still {max(gaps):.2f}s during the fetch"
    assert high_watermark(kafka_bootstrap, dlq) == 0
