"""A Kafka record's size as size limits count it, and the errors that say a record is too large.

Used by admission (a consumed record over the configured limit) and by the dead-letter writer (a
record the dead-letter topic cannot carry).  This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError

__all__ = ["RECORD_OVERHEAD_BYTES", "Header", "is_size_error", "record_size"]


#: What librdkafka and the broker add to a record's key, value and headers (record batch and
#: record framing), with a margin: a record within ``message.max.bytes`` minus this is sent whole.
RECORD_OVERHEAD_BYTES = 512


#: Errors of a write that is too large to ever succeed: client-side ``message.max.bytes``, or
#: the topic's ``max.message.bytes`` answered by the broker.
_SIZE_ERROR_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


Header = tuple[str, "bytes | str | None"]


def _header_bytes(name: str, value: bytes | str | None) -> int:
    size = len(name.encode("utf-8"))
    if isinstance(value, str):
        return size + len(value.encode("utf-8"))
    return size + (len(value) if value is not None else 0)


def record_size(
    value: bytes | None, key: bytes | str | None = None, headers: Iterable[Header] | None = None
) -> int:
    """Bytes of a record's value, key and headers (names and values): what size limits count."""
    size = len(value) if value is not None else 0
    if key is not None:
        size += len(key.encode("utf-8") if isinstance(key, str) else key)
    return size + sum(_header_bytes(name, item) for name, item in (headers or ()))


def is_size_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the record is too large to be written at all (never worth a retry).

    ``MSG_SIZE_TOO_LARGE`` is librdkafka's answer for a record over the producer's
    ``message.max.bytes`` *and* the broker's for one over the topic's ``max.message.bytes``;
    ``RECORD_LIST_TOO_LARGE`` the broker's for a batch over it.
    """
    code: Any = getattr(exc, "code", None)
    if callable(code):
        code = code()
    if code is None and exc.args and isinstance(exc.args[0], KafkaError):
        code = exc.args[0].code()
    return code in _SIZE_ERROR_CODES
