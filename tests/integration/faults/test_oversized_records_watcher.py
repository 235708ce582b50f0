"""Records of any size never stall an asset watcher: the bridge's oversized cases, watcher path.

The same records as ``test_oversized_records.py`` (a 2 MB raw record, a valid envelope with a
2 MB ``extra``, a record the dead-letter topic cannot hold), each followed by a good event, go
through a real ``KafkaAssetEventTrigger`` driven by Airflow's ``SharedStreamManager`` over a
real broker: the dead letter carries the same reason as on the bridge (one admission pipeline),
the good event fires, and the watcher's stored position moves past both.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from airflow_kafka_events.assets.publish import publish
from airflow_kafka_events.dead_letters.letter import REFERENCE_PREFIX_BYTES, DeadLetter
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger
from harness.waiting import until
from harness.watchers import Watchers, memory_stores, watcher_conn
from integration.faults.test_oversized_records import (
    ASSET,
    CASES,
    SOURCE_LIMIT,
    big_producer,
    dlq_records,
    good_event,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.timeout(300)]


@pytest.mark.parametrize("case", list(CASES))
def test_watcher_dead_letters_oversized_records_and_the_next_event_fires(
    case, kafka_bootstrap, new_topic, monkeypatch
):
    write_bad, dlq_limit, reason, error_type = CASES[case]
    topic = new_topic(partitions=1, prefix="big-in", config={"max.message.bytes": SOURCE_LIMIT})
    dlq = new_topic(
        partitions=1, prefix="big-dlq", config={"max.message.bytes": dlq_limit} if dlq_limit else None
    )
    stores = memory_stores(monkeypatch)
    watcher_conn(monkeypatch, kafka_bootstrap, "kafka_watcher_big", f"big-{uuid.uuid4().hex[:8]}")
    bad = write_bad(kafka_bootstrap, topic)
    good = good_event("batch-after")
    publish(good, producer=big_producer(kafka_bootstrap), topic=topic, timeout=30)
    trigger = KafkaAssetEventTrigger(
        topics=[topic], asset_uri=ASSET.uri, kafka_config_id="kafka_watcher_big", dlq_topic=dlq
    )

    async def scenario() -> Watchers:
        async with Watchers().running({1: trigger}) as watchers:
            await until(
                lambda: stores.positions(ASSET.uri, "kafka_watcher_big") == {0: 2}, 90, "position past both"
            )
        return watchers

    watchers = asyncio.run(scenario())
    assert [p["event_id"] for p in watchers.fired[1]] == [good.event_id]
    (dead,) = dlq_records(kafka_bootstrap, dlq, 1)
    letter = DeadLetter.from_headers(dead.headers())
    assert letter.reason == reason and letter.error_type.endswith(error_type)
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (topic, 0, 0)
    assert letter.truncated and letter.original_value_bytes == len(bad)
    assert dead.value() == bad[:REFERENCE_PREFIX_BYTES]
    assert ("trace", b"t-1") in dead.headers()
