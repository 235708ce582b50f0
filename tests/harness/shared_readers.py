"""A shared reader of one topic whose Kafka client is a test's stand-in (unit tests of the
reader's own logic: which requests it makes, which feed gets which record)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_kafka_events.kafka.shared_reader import SharedReader, SharedReaders


def shared_reader_of(
    client: Any,
    topic: str,
    *,
    name: str,
    decode: Callable[[Any], Any],
    route: Callable[[Any], Any],
    poll_timeout: float = 0.1,
    **options: Any,
) -> SharedReader:
    """A :class:`SharedReader` of ``topic`` (a broker that is never dialled) reading through
    ``client``; ``options`` are the reader's other keyword arguments."""
    shared = SharedReader(
        SharedReaders(),
        "key",
        {"bootstrap.servers": "b:9092"},
        [topic],
        name=name,
        decode=decode,
        route=route,
        poll_timeout=poll_timeout,
        **options,
    )
    shared.reader = client
    return shared
