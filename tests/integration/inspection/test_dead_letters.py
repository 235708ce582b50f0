"""Dead letters listed, read and replayed on a real broker: filters, redaction, replay semantics."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.ui.inspection.dead_letters import (
    dead_letters_by_source,
    get_dead_letter,
    list_dead_letters,
    load_dead_letter,
)
from airflow_kafka_events.ui.inspection.errors import (
    NotADeadLetterError,
    RecordNotFoundError,
    ReplayError,
    ReplayTargetRefusedError,
)
from airflow_kafka_events.ui.inspection.reader import TopicReader, message_headers
from airflow_kafka_events.ui.inspection.replay import AUDIT_LOGGER, replay_dead_letter
from airflow_kafka_events.ui.inspection.replay_targets import ReplayTargets
from airflow_kafka_events.ui.inspection.window import ScanWindow
from integration.inspection.records import asset_event, write_dead_letter

pytestmark = pytest.mark.integration

ORIGINAL_HEADERS = [("trace-id", b"trace-1"), ("x-api-token", b"tok-SECRET-1"), ("empty", None)]


def _targets(dlq: str, *sources: str, extra: tuple[str, ...] | list[str] = ()) -> ReplayTargets:
    """Replay targets of ``dlq`` whose configuration names ``sources`` as its sources."""
    return ReplayTargets(dlq, {source: "the test's configuration" for source in sources}, frozenset(extra))


def _read(config, topic: str, partition: int, offset: int):
    with TopicReader(config, topic, timeout=30) as reader:
        return reader.read_one(partition, offset)


def test_list_filters_by_reason_source_and_consumer_and_redacts(config, producer, new_topic):
    dlq, source = new_topic(partitions=2), new_topic(partitions=1)
    secret = asset_event(extra={"password": "hunter2", "note": "ok", "blob": "x" * 10_000})
    write_dead_letter(
        producer,
        dlq,
        value=ASSET_EVENT_CODEC.encode(secret),
        key=b"k1",
        headers=ORIGINAL_HEADERS,
        source=(source, 0, 5),
    )
    write_dead_letter(
        producer,
        dlq,
        value=b"\xff\x00 not an envelope",
        reason=DeadLetterReason.UNDECODABLE,
        source=(source, 0, 6),
        consumer="bridge (group=b1)",
    )
    write_dead_letter(producer, dlq, value=b"plain text", reason="unknown-asset", source=("other", 1, 1))
    producer.send_and_wait(dlq, b"no headers at all")

    listing = list_dead_letters(config, dlq, window=ScanWindow(), preview_limit=300)
    assert len(listing.records) == 3 and listing.not_dead_letters == 1 and listing.matched == 3
    newest = list_dead_letters(config, dlq, window=ScanWindow(), limit=2)
    assert newest.matched == 3 and [r.to_dict() for r in newest.records] == [
        r.to_dict() for r in list_dead_letters(config, dlq, window=ScanWindow()).records[:2]
    ]
    assert listing.window.records_scanned == 4 and not listing.window.truncated
    assert {r.reason for r in listing.records} == {"not-allowed", "undecodable", "unknown-asset"}

    (allowed,) = list_dead_letters(config, dlq, window=ScanWindow(), reason="not-allowed").records
    assert (allowed.source_topic, allowed.source_partition, allowed.source_offset) == (source, 0, 5)
    assert allowed.payload_format == "asset-event" and len(allowed.payload_preview) <= 2048
    assert allowed.error_type == "ValueError" and not allowed.is_reference
    shown = json.dumps(allowed.to_dict())
    assert "hunter2" not in shown and "tok-SECRET-1" not in shown  # extra, header and error message
    assert ("trace-id", "trace-1") in allowed.headers and ("x-api-token", "***") in allowed.headers
    assert ("x-reason", "not-allowed") in allowed.headers

    assert [
        r.source_offset
        for r in list_dead_letters(config, dlq, window=ScanWindow(), source_topic=source).records
    ] == [6, 5]
    (bridge,) = list_dead_letters(config, dlq, window=ScanWindow(), consumer="bridge").records
    assert bridge.payload_format == "binary"
    assert bridge.payload_preview.startswith("<18 bytes, not UTF-8>: ff00")

    bounded = list_dead_letters(config, dlq, window=ScanWindow(), preview_limit=300)
    assert all(len(r.payload_preview) <= 300 for r in bounded.records)

    again = get_dead_letter(config, dlq, allowed.partition, allowed.offset)
    assert again == allowed


def test_dead_letters_by_source_maps_source_coordinates_from_the_headers(config, producer, new_topic):
    dlq, source = new_topic(partitions=2), new_topic(partitions=1)
    first = write_dead_letter(producer, dlq, value=b"a", source=(source, 0, 5))
    second = write_dead_letter(
        producer, dlq, value=None, reason=DeadLetterReason.UNDECODABLE, source=(source, 0, 9)
    )
    write_dead_letter(producer, dlq, value=b"c", source=("other-topic", 0, 5))
    producer.send_and_wait(dlq, b"no headers at all")
    producer.send_and_wait(dlq, b"half", headers=[("x-reason", b"not-allowed"), ("x-source-topic", source)])

    found, window = dead_letters_by_source(config, dlq, window=ScanWindow(), source_topic=source)
    assert window.records_scanned == 5
    assert {key: (v.partition, v.offset, v.reason) for key, v in found.items()} == {
        (source, 0, 5): (first.partition, first.offset, "not-allowed"),
        (source, 0, 9): (second.partition, second.offset, "undecodable"),
    }


def test_get_names_records_that_are_not_dead_letters_or_not_there(config, producer, new_topic):
    dlq = new_topic(partitions=1)
    producer.send_and_wait(dlq, b"no headers at all")
    with pytest.raises(NotADeadLetterError, match="dlq ls"):
        get_dead_letter(config, dlq, 0, 0)
    with pytest.raises(RecordNotFoundError, match=r"offsets 0\.\.0"):
        get_dead_letter(config, dlq, 0, 7)
    with pytest.raises(RecordNotFoundError, match="no partition 3"):
        get_dead_letter(config, dlq, 3, 0)


def test_replay_republishes_key_value_original_headers_and_idempotency_key(
    config, producer, new_topic, caplog
):
    dlq, source, elsewhere = new_topic(partitions=1), new_topic(partitions=3), new_topic(partitions=3)
    event = asset_event(idempotency_key="order-42", partition_key="2026-12-01")
    value = ASSET_EVENT_CODEC.encode(event)
    written = write_dead_letter(
        producer, dlq, value=value, key=b"order-key", headers=ORIGINAL_HEADERS, source=(source, 2, 9)
    )

    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        receipt = replay_dead_letter(
            config, dlq, written.partition, written.offset, actor="alice", targets=_targets(dlq, source)
        )
    assert receipt.target_topic == source and receipt.idempotency_key == "order-42"
    assert receipt.event_id == event.event_id and not receipt.from_reference
    replayed = _read(config, source, receipt.target_partition, receipt.target_offset)
    assert replayed.key() == b"order-key" and replayed.value() == value
    assert message_headers(replayed) == [(n, v) for n, v in ORIGINAL_HEADERS]  # no x-* header left
    assert ASSET_EVENT_CODEC.decode(replayed.value()).idempotency_key == "order-42"
    (line,) = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER]
    assert "actor=alice" in line and f"dlq={dlq}[0]@{written.offset}" in line and f"target={source}[" in line

    other = replay_dead_letter(
        config,
        dlq,
        0,
        written.offset,
        target_topic=elsewhere,
        actor="bob",
        targets=_targets(dlq, source, extra=[elsewhere]),
    )
    assert other.target_topic == elsewhere
    assert _read(config, elsewhere, other.target_partition, other.target_offset).value() == value


def test_a_reference_dead_letter_replays_the_whole_original_from_its_source(config, producer, new_topic):
    dlq, source = new_topic(partitions=1), new_topic(partitions=1)
    big = asset_event(idempotency_key="big-1", extra={"rows": "r" * 20_000})
    value = ASSET_EVENT_CODEC.encode(big)
    original = producer.send_and_wait(source, value, key=b"big", headers=[("trace-id", b"t-big")])
    # a dead-letter producer that may send only 8 KB writes a reference (a 4 KB prefix)
    written = write_dead_letter(
        producer,
        dlq,
        value=value,
        key=b"big",
        headers=[("trace-id", b"t-big")],
        source=(source, original.partition, original.offset),
        max_message_bytes=8_000,
    )
    letter = get_dead_letter(config, dlq, 0, written.offset)
    assert letter.is_reference and letter.size < 8_000

    receipt = replay_dead_letter(config, dlq, 0, written.offset, actor="alice", targets=_targets(dlq, source))
    assert receipt.from_reference and receipt.idempotency_key == "big-1"
    replayed = _read(config, source, receipt.target_partition, receipt.target_offset)
    assert replayed.value() == value and replayed.key() == b"big"
    assert message_headers(replayed) == [("trace-id", b"t-big")]

    gone = write_dead_letter(
        producer, dlq, value=value, key=b"big", source=(source, 0, 10_000), max_message_bytes=8_000
    )
    with pytest.raises(ReplayError, match="reference dead letter"):
        replay_dead_letter(config, dlq, 0, gone.offset, actor="alice", targets=_targets(dlq, source))


def test_a_replay_of_a_loaded_dead_letter_reads_it_once_and_refuses_other_coordinates(
    config, producer, new_topic, monkeypatch
):
    dlq, source = new_topic(partitions=1), new_topic(partitions=1)
    value = ASSET_EVENT_CODEC.encode(asset_event(idempotency_key="once-1"))
    first = write_dead_letter(producer, dlq, value=value, key=b"k1", source=(source, 0, 3))
    second = write_dead_letter(producer, dlq, value=b"plain", key=b"k2", source=(source, 0, 4))
    reads: list[tuple[str, int, int]] = []
    read_one = TopicReader.read_one

    def counted(self, partition, offset):
        reads.append((self.topic, partition, offset))
        return read_one(self, partition, offset)

    monkeypatch.setattr(TopicReader, "read_one", counted)

    loaded = load_dead_letter(config, dlq, 0, first.offset)
    assert loaded.record.offset == first.offset and loaded.record.source_offset == 3
    receipt = replay_dead_letter(
        config, dlq, 0, first.offset, actor="alice", loaded=loaded, targets=_targets(dlq, source)
    )
    assert reads == [(dlq, 0, first.offset)]  # shown and replayed from one read
    assert receipt.idempotency_key == "once-1" and receipt.dlq_offset == first.offset
    assert _read(config, source, receipt.target_partition, receipt.target_offset).value() == value

    reads.clear()
    with pytest.raises(
        ValidationError,
        match=rf"read at {dlq}\[0\]@{first.offset} on .*, not {dlq}\[0\]@{second.offset} on ",
    ):
        replay_dead_letter(
            config, dlq, 0, second.offset, actor="alice", loaded=loaded, targets=_targets(dlq, source)
        )
    assert reads == []
    with TopicReader(config, source, timeout=30) as reader:
        assert reader.watermarks(0) == (0, receipt.target_offset + 1)  # nothing published

    unloaded = replay_dead_letter(config, dlq, 0, second.offset, actor="bob", targets=_targets(dlq, source))
    assert reads == [(dlq, 0, second.offset)] and unloaded.dlq_offset == second.offset


def _end(config, topic: str) -> int:
    with TopicReader(config, topic, timeout=30) as reader:
        return reader.watermarks(0)[1]


def test_a_reference_dead_letter_whose_source_now_holds_another_record_is_not_replayed(
    config, producer, new_topic
):
    """A topic deleted and re-created holds other records at the original's coordinates."""
    dlq, source = new_topic(partitions=1), new_topic(partitions=1)
    value = ASSET_EVENT_CODEC.encode(asset_event(idempotency_key="big-2", extra={"rows": "r" * 20_000}))
    shorter = producer.send_and_wait(source, value[:-1], key=b"big")
    same_size = producer.send_and_wait(source, value[:5000] + b"X" + value[5001:], key=b"big")
    other_prefix = producer.send_and_wait(source, b"Y" + value[1:], key=b"big")
    for where, why in (
        (shorter, rf"its value is {len(value) - 1} bytes, the dead-lettered one was {len(value)}"),
        (other_prefix, r"does not begin with the 4096-byte prefix"),
    ):
        written = write_dead_letter(
            producer, dlq, value=value, source=(source, 0, where.offset), max_message_bytes=8_000
        )
        before = _end(config, source)
        with pytest.raises(ReplayError, match=rf"record now at {source}\[0\]@{where.offset} .*{why}"):
            replay_dead_letter(config, dlq, 0, written.offset, actor="alice", targets=_targets(dlq, source))
        assert _end(config, source) == before  # nothing published

    # only the size and the 4 KB prefix are kept: a change past the prefix is the original's size
    written = write_dead_letter(
        producer, dlq, value=value, source=(source, 0, same_size.offset), max_message_bytes=8_000
    )
    assert replay_dead_letter(
        config, dlq, 0, written.offset, actor="alice", targets=_targets(dlq, source)
    ).from_reference


def test_a_replay_refuses_a_record_other_than_the_confirmed_one_or_from_another_cluster(
    config, producer, new_topic
):
    dlq, source = new_topic(partitions=1), new_topic(partitions=1)
    first = write_dead_letter(producer, dlq, value=b"first", key=b"k", source=(source, 0, 1))
    second = write_dead_letter(producer, dlq, value=b"second", key=b"k", source=(source, 0, 2))
    loaded = load_dead_letter(config, dlq, 0, first.offset)
    again = load_dead_letter(config, dlq, 0, first.offset)
    other = load_dead_letter(config, dlq, 0, second.offset)
    assert loaded.fingerprint == again.fingerprint != other.fingerprint
    assert loaded.record.to_dict()["fingerprint"] == loaded.fingerprint

    before = _end(config, source)
    with pytest.raises(ReplayError, match=rf"{dlq}\[0\]@{first.offset} .* is not the one confirmed"):
        replay_dead_letter(
            config,
            dlq,
            0,
            first.offset,
            actor="alice",
            fingerprint=other.fingerprint,
            targets=_targets(dlq, source),
        )
    with pytest.raises(ReplayError, match="is not the one confirmed"):
        replay_dead_letter(
            config,
            dlq,
            0,
            first.offset,
            actor="alice",
            loaded=loaded,
            fingerprint=other.fingerprint,
            targets=_targets(dlq, source),
        )
    elsewhere = {**config, "bootstrap.servers": f"{config['bootstrap.servers']},127.0.0.1:1"}
    with pytest.raises(ValidationError, match=r"on 127\.0\.0\.1:1|,127\.0\.0\.1:1"):
        replay_dead_letter(
            elsewhere, dlq, 0, first.offset, actor="alice", loaded=loaded, targets=_targets(dlq, source)
        )
    assert _end(config, source) == before  # nothing published

    receipt = replay_dead_letter(
        config,
        dlq,
        0,
        first.offset,
        actor="alice",
        loaded=loaded,
        fingerprint=loaded.fingerprint,
        targets=_targets(dlq, source),
    )
    assert _read(config, source, 0, receipt.target_offset).value() == b"first"


def test_a_dead_letter_naming_a_source_topic_the_configuration_does_not_name_is_not_replayed(
    config, producer, new_topic, monkeypatch
):
    """Whoever may write to the dead-letter topic writes its x-source-topic header: a forged one
    neither publishes to the topic it names nor reads a record from it (a reference's original)."""
    dlq, source, victim, outbox = (new_topic(partitions=1) for _ in range(4))
    secret = producer.send_and_wait(victim, b"a record of the victim topic " * 400, key=b"s")
    targets = _targets(dlq, source, extra=[outbox])
    forged = write_dead_letter(producer, dlq, value=b"forged", source=(victim, 0, 0))
    forged_reference = write_dead_letter(
        producer,
        dlq,
        value=b"a record of the victim topic " * 400,
        source=(victim, 0, secret.offset),
        max_message_bytes=8_000,
    )
    reads: list[str] = []
    read_one = TopicReader.read_one

    def counted(self, partition, offset):
        reads.append(self.topic)
        return read_one(self, partition, offset)

    monkeypatch.setattr(TopicReader, "read_one", counted)
    ends = {topic: _end(config, topic) for topic in (victim, source, outbox)}
    for written, asked in ((forged, None), (forged, source), (forged, outbox), (forged_reference, outbox)):
        with pytest.raises(ReplayTargetRefusedError) as refused:
            replay_dead_letter(
                config, dlq, 0, written.offset, actor="mallory", targets=targets, target_topic=asked
            )
        message = str(refused.value)
        assert repr(victim) in message and "[kafka_events] replay_extra_target_topics" in message
        assert "nothing was published" in message
    assert victim not in reads  # a forged reference's "original" was never read
    assert {topic: _end(config, topic) for topic in ends} == ends  # nothing published anywhere

    # an administrator who lists the topic allows it
    allowed = _targets(dlq, source, extra=[victim])
    receipt = replay_dead_letter(config, dlq, 0, forged.offset, actor="admin", targets=allowed)
    assert receipt.target_topic == victim
    with pytest.raises(ValidationError, match="targets passed are those of dead-letter topic"):
        replay_dead_letter(config, dlq, 0, forged.offset, actor="admin", targets=_targets(source, victim))
