"""The errors of task iteration, all under :class:`~airflow_kafka_events.errors.AirflowKafkaEventsError`.

This module imports no Airflow module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_kafka_events.errors import AirflowKafkaEventsError

if TYPE_CHECKING:
    from airflow_kafka_events.iteration.outcome import IterationSummary

__all__ = [
    "ItemTimeoutError",
    "IterationError",
    "IterationFailedError",
    "NonRetryableItemError",
    "ResultDeliveryError",
    "SkipItem",
    "SourceRestartedError",
    "TooManyAbandonedThreadsError",
]


class IterationError(AirflowKafkaEventsError):
    """Base class of the iteration errors."""


class ItemTimeoutError(IterationError, TimeoutError):
    """One try of an item took longer than ``item_timeout``."""


class NonRetryableItemError(IterationError):
    """Raised by a handler (or a sink) to fail an item at once, without its retries."""


class SkipItem(IterationError):
    """Raised by a handler: the item is done, without a result."""


class ResultDeliveryError(IterationError):
    """A result could not be delivered to the sink: the task fails (its retry resumes)."""


class SourceRestartedError(IterationError):
    """The item source started over (e.g. a producer wrote a new stream attempt)."""


class TooManyAbandonedThreadsError(IterationError):
    """Too many sync items are still running after their ``item_timeout``."""


class IterationFailedError(IterationError):
    """Items failed for good; ``summary`` is the :class:`IterationSummary` of the run."""

    def __init__(self, message: str, summary: IterationSummary) -> None:
        super().__init__(message)
        self.summary = summary

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.summary))
