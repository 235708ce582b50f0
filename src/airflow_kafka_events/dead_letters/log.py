"""The warning a consumer logs when it dead-lettered a record, and where that record came from.

The watcher's line begins ``Dead-lettered <source> to <dead letter>``, the bridge's
``<source> dead-lettered to <dead letter>`` (log-based alerts match these wordings), each
followed by the reason and the error message (at most 500 characters).  This module imports no
Airflow module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_events.kafka.consumer import SourceRecord

if TYPE_CHECKING:
    from airflow_kafka_events.dead_letters.letter import DeadLetter
    from airflow_kafka_events.kafka.delivery import DeliveryReceipt

__all__ = [
    "BRIDGE_LINE",
    "WATCHER_LINE",
    "log_dead_lettered",
]

#: The watcher's dead-lettered line: source, dead letter, reason, error message.
WATCHER_LINE = "Dead-lettered %s[%d]@%d to %s[%d]@%d: %s: %s"
#: The bridge's dead-lettered line: the same fields.
BRIDGE_LINE = "%s[%d]@%d dead-lettered to %s[%d]@%d: %s: %s"
#: Longest error message the line repeats.
MESSAGE_CHARS = 500


class _Logger(Protocol):
    def warning(self, msg: str, /, *args: Any) -> Any: ...


def log_dead_lettered(
    logger: _Logger,
    record: SourceRecord,
    receipt: DeliveryReceipt,
    letter: DeadLetter,
    *,
    line: str = WATCHER_LINE,
) -> None:
    """The one warning a consumer writes when ``record`` was dead-lettered (at ``receipt``).

    ``line``: :data:`WATCHER_LINE` or :data:`BRIDGE_LINE`.
    """
    message = letter.error_message
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 3] + "..."
    logger.warning(
        line,
        record.topic,
        record.partition,
        record.offset,
        receipt.topic,
        receipt.partition,
        receipt.offset,
        letter.reason,
        message,
    )
