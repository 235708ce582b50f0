"""Reading the stream index topic: every key's latest record, decoded, poison records set aside.

:func:`read_index` reads the whole topic (the CLI); :class:`IndexCache` keeps what it read and, on
each call, reads only the records written since (the view: one per app, so a page costs the new
records, not the index).  Compaction removes only records a newer one of the same key supersedes,
so reading on from the last position misses nothing; a topic that was recreated (its offsets went
back) is read again from its start.

A record that is not an index record (not JSON, no version, a wrong type, a key that does not match
its content) is skipped and listed in :attr:`IndexSnapshot.skipped` with the reason; it never breaks
a listing.  The topic missing raises :class:`~airflow_kafka_events.ui.inspection.errors.
StreamIndexNotFoundError`, naming ``topics ensure``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.compacted import CompactedRead, read_compacted
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.index.options import TOPIC_OPTION
from airflow_kafka_events.streams.index.record import (
    ConsumerRecord,
    StreamRecord,
    consumer_key,
    decode_record,
    stream_key,
)
from airflow_kafka_events.ui.inspection.errors import (
    BrokerTimeoutError,
    InspectionError,
    StreamIndexNotFoundError,
)
from airflow_kafka_events.ui.inspection.reader import DEFAULT_TIMEOUT

__all__ = [
    "IndexCache",
    "IndexSnapshot",
    "SkippedRecord",
    "apply_records",
    "read_index",
]

#: librdkafka's errors of brokers that do not answer.
_NO_ANSWER = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


@dataclass(frozen=True)
class SkippedRecord:
    """An index record that could not be read (its key as text, and why)."""

    key: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IndexSnapshot:
    """The index as read: each key's latest record, and the records skipped."""

    topic: str
    records: dict[bytes, StreamRecord | ConsumerRecord] = field(default_factory=dict)
    skipped: dict[bytes, SkippedRecord] = field(default_factory=dict)
    read_at: float = 0.0

    def copy(self) -> IndexSnapshot:
        return IndexSnapshot(self.topic, dict(self.records), dict(self.skipped), self.read_at)

    def streams(self) -> dict[str, StreamRecord]:
        return {r.stream_id: r for r in self.records.values() if isinstance(r, StreamRecord)}

    def consumers(self) -> dict[str, list[ConsumerRecord]]:
        """stream id -> its consumers' records."""
        out: dict[str, list[ConsumerRecord]] = {}
        for record in self.records.values():
            if isinstance(record, ConsumerRecord):
                out.setdefault(record.stream_id, []).append(record)
        return out


def _key_text(key: bytes) -> str:
    return key.decode("utf-8", errors="backslashreplace")


def apply_records(snapshot: IndexSnapshot, latest: Mapping[bytes, bytes | None]) -> None:
    """Put each key's latest value into ``snapshot`` (a tombstone removes the key; poison is skipped)."""
    for key, value in latest.items():
        snapshot.records.pop(key, None)
        snapshot.skipped.pop(key, None)
        if value is None:
            continue
        try:
            record = decode_record(value)
            expected = (
                stream_key(record.stream_id)
                if isinstance(record, StreamRecord)
                else consumer_key(record.stream_id, record.consumer_id)
            )
            if expected != key:
                raise ValidationError(
                    f"its key does not match its content (expected {_key_text(expected)!r})"
                )
        except ValidationError as exc:
            snapshot.skipped[key] = SkippedRecord(_key_text(key), str(exc))
            continue
        snapshot.records[key] = record


def _read(
    config: Mapping[str, Any], topic: str, timeout: float, after: Mapping[int, int] | None
) -> CompactedRead:
    settings = config if isinstance(config, KafkaSettings) else KafkaSettings(config)

    def missing() -> StreamIndexNotFoundError:
        return StreamIndexNotFoundError(
            f"the stream index topic {topic!r} does not exist at {settings.bootstrap_servers} "
            f"([kafka_events] {TOPIC_OPTION}); fix: create it with `airflow-kafka-events topics ensure` "
            "(streams are listed from their index records: those written from then on)"
        )

    def no_answer(detail: str) -> BrokerTimeoutError:
        return BrokerTimeoutError(
            f"no answer from the Kafka brokers at {settings.bootstrap_servers} within {timeout:g}s while "
            f"reading the stream index topic {topic!r} ({detail}); fix: check that the brokers run and "
            "that bootstrap.servers names them (or allow more time)",
            kafka_error=KafkaError(KafkaError._TIMED_OUT),
        )

    try:
        return read_compacted(
            settings, topic, timeout=timeout, purpose="stream-index", missing=missing, after=after
        )
    except TimeoutError as exc:
        raise no_answer(str(exc)) from exc
    except KafkaException as exc:
        if isinstance(exc, InspectionError):
            raise
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() in _NO_ANSWER:
            raise no_answer(error.str()) from exc
        raise InspectionError.from_exception(f"reading the stream index topic {topic!r} failed", exc) from exc


def read_index(config: Mapping[str, Any], topic: str, *, timeout: float = DEFAULT_TIMEOUT) -> IndexSnapshot:
    """The whole index (each key's latest record)."""
    read = _read(config, topic, timeout, None)
    snapshot = IndexSnapshot(topic, read_at=time.time())
    apply_records(snapshot, read.latest)
    return snapshot


class IndexCache:
    """The index read so far per (brokers, topic); each :meth:`read` reads only what is new."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], tuple[dict[int, int], IndexSnapshot]] = {}

    def read(
        self, config: Mapping[str, Any], topic: str, *, timeout: float = DEFAULT_TIMEOUT
    ) -> IndexSnapshot:
        """The index now (a copy: later reads do not change it)."""
        servers = str(config.get("bootstrap.servers", ""))
        with self._lock:
            positions, snapshot = self._known.get((servers, topic), ({}, IndexSnapshot(topic)))
            read = _read(config, topic, timeout, positions or None)
            if read.restarted:
                snapshot = IndexSnapshot(topic)
                read = _read(config, topic, timeout, None)
            apply_records(snapshot, read.latest)
            snapshot.read_at = time.time()
            self._known[(servers, topic)] = (read.positions, snapshot)
            return snapshot.copy()
