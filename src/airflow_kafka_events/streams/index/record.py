"""The records of the stream index, their keys and their codec (versioned JSON).

Two kinds of record share the index topic, each under a key only one writer writes (so the topic's
compaction keeps each writer's latest word and no writer reads before it writes):

* :class:`StreamRecord` -- a stream's producer (the streaming trigger) at key ``trigger_run_id``
  (:func:`stream_key`): where the stream is (topic, partition, first/last offset), how far
  (attempt, pages, last sequence index), its status and the producer's task instance;
* :class:`ConsumerRecord` -- one consumer of a stream at key ``["consumer", stream, consumer]``
  (:func:`consumer_key`, a JSON array: no task's stream id starts with ``[``): the consumer's task
  instance and its position (attempt, next sequence index, offset, finished).

Every value is a JSON object with ``"v"`` (the schema version, :data:`SCHEMA_VERSION`) and
``"kind"``.  Decoding reads the fields it knows and ignores the others, so a record of a newer
version (more fields) is read as far as it is understood and one of an older version (fewer) gets
the defaults; a value that is not such a record raises :class:`~airflow_kafka_events.errors.
ValidationError` (the reader skips it and says so).  Times are epoch seconds (floats).  The time
series (``pages_over_time``, ``positions_over_time``) hold at most :data:`MAX_SAMPLES` samples.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.streams.descriptor import parse_stream_id

__all__ = [
    "KIND_CONSUMER",
    "KIND_STREAM",
    "MAX_SAMPLES",
    "SCHEMA_VERSION",
    "STATUSES",
    "ConsumerRecord",
    "StreamRecord",
    "consumer_key",
    "decode_record",
    "encode_record",
    "sampled",
    "stream_key",
]

#: The version this package writes; readers take any version (known fields only).
SCHEMA_VERSION = 1
KIND_STREAM = "stream"
KIND_CONSUMER = "consumer"
#: A stream's status in the index.
STATUSES = ("running", "finished", "failed")
#: Samples a time series keeps (the newest).
MAX_SAMPLES = 60

Sample = tuple[float, int]


def stream_key(stream_id: str) -> bytes:
    """The key of a stream's record: its ``trigger_run_id`` (the key of its envelopes too)."""
    return stream_id.encode("utf-8")


def consumer_key(stream_id: str, consumer_id: str) -> bytes:
    """The key of one consumer's record of one stream."""
    return json.dumps([KIND_CONSUMER, stream_id, consumer_id], separators=(",", ":")).encode("utf-8")


def sampled(samples: Sequence[Sample], at: float, value: int, limit: int = MAX_SAMPLES) -> tuple[Sample, ...]:
    """``samples`` with ``(at, value)`` appended, times to the millisecond (samples after ``at``
    dropped: a series only goes forward in time; two in the same millisecond both stay), the newest
    ``limit`` kept."""
    at = round(at, 3)
    kept = [s for s in samples if s[0] <= at]
    kept.append((at, value))
    return tuple(kept[-limit:])


# --------------------------------------------------------------------------- field readers
def _str(data: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = data.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise ValidationError(f"index record field {name!r} must be a non-empty str, got {value!r}")
    return value


def _int(data: Mapping[str, Any], name: str, *, low: int = 0, default: int | None = None) -> int | None:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValidationError(f"index record field {name!r} must be an int >= {low}, got {value!r}")
    return value


def _time(data: Mapping[str, Any], name: str, *, required: bool = False) -> float | None:
    value = data.get(name)
    if value is None:
        if required:
            raise ValidationError(f"index record field {name!r} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"index record field {name!r} must be epoch seconds, got {value!r}")
    return float(value)


def _samples(data: Mapping[str, Any], name: str) -> tuple[Sample, ...]:
    value = data.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValidationError(f"index record field {name!r} must be a list of [time, int], got {value!r}")
    out: list[Sample] = []
    for item in value[-MAX_SAMPLES:]:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or isinstance(item[0], bool)
            or not isinstance(item[0], (int, float))
            or not math.isfinite(item[0])
            or isinstance(item[1], bool)
            or not isinstance(item[1], int)
        ):
            raise ValidationError(
                f"index record field {name!r} has a sample that is not [time, int]: {item!r}"
            )
        out.append((float(item[0]), item[1]))
    return tuple(out)


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class StreamRecord:
    """A stream as its producer last described it (its latest attempt)."""

    stream_id: str
    topic: str
    partition: int
    attempt: int
    status: str  # running | finished | failed
    #: data pages of the attempt written so far (sequence indexes 0..pages-1)
    pages: int
    updated_at: float
    started_at: float | None = None
    ended_at: float | None = None
    #: when the attempt's latest page (or terminal marker) was written
    last_page_at: float | None = None
    #: the highest sequence index written (the terminal marker's once finished or failed)
    last_sequence: int | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    generation: int | None = None
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    try_number: int | None = None
    #: ``"Type: message"`` when the attempt failed
    error: str | None = None
    #: ``(time, pages)`` samples, the newest :data:`MAX_SAMPLES`
    pages_over_time: tuple[Sample, ...] = field(default_factory=tuple)
    version: int = SCHEMA_VERSION

    @functools.cached_property
    def key_parts(self) -> tuple[str | None, str | None, str | None, int | None]:
        """``(dag_id, run_id, task_id, map_index)`` of the stream: from its id (a task's stream id),
        else the producer's fields.  Computed once per record (a listing filters on it)."""
        try:
            key = parse_stream_id(self.stream_id)
        except ValidationError:
            return self.dag_id, self.run_id, self.task_id, self.map_index
        return key.dag_id, key.run_id, key.task_id, key.map_index

    def with_pages(self, at: float, pages: int, **changes: Any) -> StreamRecord:
        """This record at ``at`` with ``pages`` written (a sample added) and ``changes``."""
        return replace(
            self,
            pages=pages,
            updated_at=at,
            pages_over_time=sampled(self.pages_over_time, at, pages),
            **changes,
        )

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, KIND_STREAM)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamRecord:
        status = data.get("status")
        if status not in STATUSES:
            raise ValidationError(f"index record field 'status' must be one of {STATUSES}, got {status!r}")
        updated = _time(data, "updated_at", required=True) or 0.0
        return cls(
            stream_id=_str(data, "stream_id", required=True) or "",
            topic=_str(data, "topic", required=True) or "",
            partition=_int(data, "partition", default=0) or 0,
            attempt=_int(data, "attempt", default=0) or 0,
            status=status,
            pages=_int(data, "pages", default=0) or 0,
            updated_at=updated,
            started_at=_time(data, "started_at"),
            ended_at=_time(data, "ended_at"),
            last_page_at=_time(data, "last_page_at"),
            last_sequence=_int(data, "last_sequence"),
            first_offset=_int(data, "first_offset"),
            last_offset=_int(data, "last_offset"),
            generation=_int(data, "generation"),
            dag_id=_str(data, "dag_id"),
            run_id=_str(data, "run_id"),
            task_id=_str(data, "task_id"),
            map_index=_int(data, "map_index", low=-1),
            try_number=_int(data, "try_number"),
            error=_str(data, "error"),
            pages_over_time=_samples(data, "pages_over_time"),
            version=_int(data, "v", low=1) or SCHEMA_VERSION,
        )


@dataclass(frozen=True)
class ConsumerRecord:
    """One consumer's position in one stream, as the consumer last wrote it."""

    stream_id: str
    #: the consumer's task instance as a stream id (``dag_id/task_id/map_index/run_id``)
    consumer_id: str
    updated_at: float
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    #: the consumer's generation (its DAG run's clear number)
    generation: int | None = None
    attempt: int | None = None
    #: the sequence index of the next page to hand over (pages 0..next-1 are handled)
    next_sequence_index: int | None = None
    offset: int | None = None
    finished: bool = False
    #: pages the consumer knew were written and not handled, when it wrote this (``None``: it did
    #: not know; readers compute it from the stream's record)
    lag_pages: int | None = None
    #: ``(time, next_sequence_index)`` samples, the newest :data:`MAX_SAMPLES`
    positions_over_time: tuple[Sample, ...] = field(default_factory=tuple)
    version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return _to_json(self, KIND_CONSUMER)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConsumerRecord:
        updated = _time(data, "updated_at", required=True) or 0.0
        finished = data.get("finished", False)
        if not isinstance(finished, bool):
            raise ValidationError(f"index record field 'finished' must be a bool, got {finished!r}")
        return cls(
            stream_id=_str(data, "stream_id", required=True) or "",
            consumer_id=_str(data, "consumer_id", required=True) or "",
            updated_at=updated,
            dag_id=_str(data, "dag_id"),
            run_id=_str(data, "run_id"),
            task_id=_str(data, "task_id"),
            map_index=_int(data, "map_index", low=-1),
            generation=_int(data, "generation"),
            attempt=_int(data, "attempt"),
            next_sequence_index=_int(data, "next_sequence_index"),
            offset=_int(data, "offset"),
            finished=finished,
            lag_pages=_int(data, "lag_pages"),
            positions_over_time=_samples(data, "positions_over_time"),
            version=_int(data, "v", low=1) or SCHEMA_VERSION,
        )


def _to_json(record: StreamRecord | ConsumerRecord, kind: str) -> dict[str, Any]:
    """``record`` as JSON values: its schema version and kind, then its fields in their order."""
    out: dict[str, Any] = {"v": record.version, "kind": kind}
    for name in (f.name for f in fields(record) if f.name != "version"):
        value = getattr(record, name)
        out[name] = [list(s) for s in value] if name.endswith("_over_time") else value
    return out


def encode_record(record: StreamRecord | ConsumerRecord) -> bytes:
    return json.dumps(record.to_json(), separators=(",", ":"), allow_nan=False).encode("utf-8")


def decode_record(raw: bytes) -> StreamRecord | ConsumerRecord:
    """The record in ``raw``; :class:`ValidationError` naming what is wrong when it is none."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(f"an index record is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValidationError(f"an index record is a JSON object, got {type(data).__name__}")
    version = data.get("v")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValidationError(f"an index record has no schema version 'v' (an int >= 1), got {version!r}")
    kind = data.get("kind")
    if kind == KIND_STREAM:
        return StreamRecord.from_json(data)
    if kind == KIND_CONSUMER:
        return ConsumerRecord.from_json(data)
    raise ValidationError(f"an index record's kind is {KIND_STREAM!r} or {KIND_CONSUMER!r}, got {kind!r}")
