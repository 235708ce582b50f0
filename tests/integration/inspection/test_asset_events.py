"""Asset events listed from a real topic: fields, the asset filter, redacted bounded extra, a limit."""

from __future__ import annotations

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.ui.inspection.asset_events import list_asset_events
from airflow_kafka_events.ui.inspection.window import ScanWindow
from integration.inspection.records import asset_event

pytestmark = pytest.mark.integration


def test_list_asset_events_describes_each_envelope_and_filters_by_asset(config, producer, new_topic):
    topic = new_topic(partitions=3)
    cause = asset_event("s3://bucket/raw")
    child = asset_event(
        "s3://bucket/table",
        partition_key="2026-12-01",
        idempotency_key="table-2026-12-01",
        causation=(cause.event_id,),
        extra={"rows": 10, "api_token": "tok-xyz", "zz_long": "y" * 5000},
    )
    for envelope in (cause, child):
        producer.send_and_wait(topic, ASSET_EVENT_CODEC.encode(envelope), key=envelope.asset.uri)
    producer.send_and_wait(topic, b"junk", key=b"junk")

    listing = list_asset_events(config, topic, window=ScanWindow(), preview_limit=500)
    assert {r.event_id for r in listing.records} == {cause.event_id, child.event_id}
    assert listing.undecodable == 1

    (record,) = list_asset_events(config, topic, window=ScanWindow(), asset="s3://bucket/table").records
    assert (record.asset_name, record.partition_key, record.idempotency_key) == (
        "table",
        "2026-12-01",
        "table-2026-12-01",
    )
    assert record.causation == [cause.event_id] and record.source["dag_id"] == "producer"
    assert "tok-xyz" not in record.extra_preview and '"rows": 10' in record.extra_preview
    assert len(record.extra_preview) <= 2048
    assert [
        r.event_id for r in list_asset_events(config, topic, window=ScanWindow(), asset="raw").records
    ] == [cause.event_id]


def test_a_limit_builds_the_newest_matches_only_and_counts_them_all(config, producer, new_topic):
    topic = new_topic(partitions=2)
    written = []
    for n in range(12):
        envelope = asset_event(f"s3://bucket/{'even' if n % 2 == 0 else 'odd'}", extra={"n": n})
        producer.send_and_wait(topic, ASSET_EVENT_CODEC.encode(envelope), key=envelope.asset.uri)
        written.append(envelope)
    producer.send_and_wait(topic, b"junk", key=b"junk")
    everything = list_asset_events(config, topic, window=ScanWindow())
    newest_first = [r.event_id for r in everything.records]
    assert everything.matched == 12 and everything.undecodable == 1

    limited = list_asset_events(config, topic, window=ScanWindow(), limit=5)
    assert [r.event_id for r in limited.records] == newest_first[:5]
    assert limited.to_dict()["records"] == [r.to_dict() for r in everything.records[:5]]
    assert (limited.matched, limited.undecodable) == (12, 1)

    even = list_asset_events(config, topic, window=ScanWindow(), limit=2, asset="even")
    assert [r.event_id for r in even.records] == [
        e for e in newest_first if e in {w.event_id for w in written[::2]}
    ][:2]
    assert even.matched == 6
    one = written[3].event_id
    by_id = list_asset_events(config, topic, window=ScanWindow(), limit=5, event_id=one)
    assert [r.event_id for r in by_id.records] == [one] and by_id.matched == 1
    unlimited = list_asset_events(config, topic, window=ScanWindow(), event_id=one)
    assert [r.event_id for r in unlimited.records] == [one] and unlimited.matched == 1
    assert (
        list_asset_events(config, topic, window=ScanWindow(), limit=5, asset="odd", event_id=one).matched == 1
    )
    with pytest.raises(ValidationError, match="limit"):
        list_asset_events(config, topic, window=ScanWindow(), limit=0)
