"""One consumed record as a watcher's trigger gets it: bytes, coordinates, the decoding, and the
ticket that ties the asset event it fires to the record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.kafka.positions import Partition
from airflow_kafka_events.kafka.shared_feed import FedRecord

__all__ = ["KafkaRecord", "Ticket", "kafka_record"]


class KafkaRecord(NamedTuple):
    """One consumed record as a watcher gets it: bytes, coordinates, and the decoding."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    #: the decoded envelope, or the error decoding raised (``None``: not decoded yet)
    decoded: AssetEventEnvelope | BaseException | None = None
    #: filled by the watcher when it turned the record into an asset event
    ticket: Ticket | None = None


@dataclass
class Ticket:
    #: the run of the stream that handed the record on, and the record's number in that run (in the
    #: order handed on): the event fired from it carries both (:mod:`.confirmations`)
    run: str = ""
    seq: int = -1
    accepted_key: str | None = None
    #: where the record is
    partition: Partition | None = None
    offset: int = -1


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    if not raw:
        return ()
    items = raw.items() if isinstance(raw, Mapping) else raw
    out: list[tuple[str, bytes | None]] = []
    for name, value in items:
        if value is not None and not isinstance(value, bytes):
            value = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        out.append((str(name), value))
    return tuple(out)


def kafka_record(fed: FedRecord, run: str = "", seq: int = -1) -> KafkaRecord:
    """The record the shared reader fed, as the watcher's trigger gets it."""
    message = fed.message
    timestamp_type, timestamp = message.timestamp()
    return KafkaRecord(
        topic=fed.tp[0],
        partition=fed.tp[1],
        offset=fed.offset,
        key=message.key(),
        value=message.value(),
        headers=_headers(message.headers()),
        timestamp_ms=timestamp if timestamp_type else None,
        decoded=fed.decoded,
        ticket=Ticket(run=run, seq=seq, partition=fed.tp, offset=fed.offset),
    )
