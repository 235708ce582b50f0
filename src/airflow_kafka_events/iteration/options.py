"""The runner's options in groups, validated on construction: a bad value is a
:class:`~airflow_kafka_events.errors.ConfigurationError` naming the option.

:class:`IterationOptions` is what :class:`~airflow_kafka_events.iteration.runner.IterationRunner`
takes; ``IterableOperator`` builds it from its keywords (seconds or ``timedelta``:
:func:`as_seconds`).  This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.items import Item

__all__ = [
    "CheckpointOptions",
    "IterationOptions",
    "ReportOptions",
    "RetryOptions",
    "ShardOptions",
    "as_seconds",
    "count_option",
    "number_option",
]


def number_option(name: str, value: Any, *, allow_zero: bool = False, optional: bool = False) -> float | None:
    """``value`` (a number or a ``timedelta``) as a float ``> 0`` (``>= 0`` with ``allow_zero``;
    ``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number (seconds) or a timedelta, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        raise ConfigurationError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


def count_option(name: str, value: Any, *, low: int) -> int:
    """``value``, an int ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def as_seconds(value: Any) -> Any:
    """``value`` in seconds if it is a ``timedelta``, else as it is (the options check it)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def _seconds(options: object, name: str, *, allow_zero: bool = False, optional: bool = False) -> None:
    """Check the duration ``options.<name>`` (:func:`number_option`) and store it as a float."""
    value = number_option(name, getattr(options, name), allow_zero=allow_zero, optional=optional)
    object.__setattr__(options, name, value)


@dataclass(frozen=True)
class ShardOptions:
    """Which items this runner handles (ordinal ``% shards == shard``), and how many at once."""

    shard: int = 0
    shards: int = 1
    concurrency: int = 1

    def __post_init__(self) -> None:
        count_option("shards", self.shards, low=1)
        if (
            isinstance(self.shard, bool)
            or not isinstance(self.shard, int)
            or not 0 <= self.shard < self.shards
        ):
            raise ConfigurationError(f"shard must be an int in 0..{self.shards - 1}, got {self.shard!r}")
        count_option("concurrency", self.concurrency, low=1)


@dataclass(frozen=True)
class RetryOptions:
    """How a failing item is tried again, how long a try may take, when the task gives up.

    ``max_abandoned_threads`` ``None``: ``max(4, concurrency)``.
    """

    item_retries: int = 0
    item_retry_delay: float = 0.0
    item_retry_backoff: float = 2.0
    max_item_retry_delay: float | None = None
    item_timeout: float | None = None
    max_abandoned_threads: int | None = None
    fail_fast: bool = False

    def __post_init__(self) -> None:
        count_option("item_retries", self.item_retries, low=0)
        _seconds(self, "item_retry_delay", allow_zero=True)
        given_backoff = self.item_retry_backoff
        _seconds(self, "item_retry_backoff")
        if self.item_retry_backoff < 1:
            raise ConfigurationError(f"item_retry_backoff must be >= 1, got {given_backoff!r}")
        _seconds(self, "max_item_retry_delay", allow_zero=True, optional=True)
        _seconds(self, "item_timeout", optional=True)
        if self.max_abandoned_threads is not None:
            count_option("max_abandoned_threads", self.max_abandoned_threads, low=0)
        object.__setattr__(self, "fail_fast", bool(self.fail_fast))


@dataclass(frozen=True)
class CheckpointOptions:
    """Save the progress checkpoint every ``checkpoint_every`` items or ``checkpoint_interval`` seconds."""

    checkpoint_every: int = 500
    checkpoint_interval: float = 15.0

    def __post_init__(self) -> None:
        count_option("checkpoint_every", self.checkpoint_every, low=1)
        _seconds(self, "checkpoint_interval")


@dataclass(frozen=True)
class ReportOptions:
    """The progress lines (every that many items or seconds) and the bounds of what failures report."""

    progress_every: int = 1000
    progress_interval: float = 30.0
    max_failed_ids: int = 100
    max_logged_failures: int = 20

    def __post_init__(self) -> None:
        count_option("progress_every", self.progress_every, low=1)
        _seconds(self, "progress_interval")
        count_option("max_failed_ids", self.max_failed_ids, low=0)
        count_option("max_logged_failures", self.max_logged_failures, low=0)


@dataclass(frozen=True)
class IterationOptions:
    """Everything the runner is told: the groups, and ``item_id(item) -> str`` (default: the ordinal)."""

    shard: ShardOptions = field(default_factory=ShardOptions)
    retry: RetryOptions = field(default_factory=RetryOptions)
    checkpoint: CheckpointOptions = field(default_factory=CheckpointOptions)
    report: ReportOptions = field(default_factory=ReportOptions)
    item_id: Callable[[Item], str] | None = None

    def __post_init__(self) -> None:
        for name, kind in (
            ("shard", ShardOptions),
            ("retry", RetryOptions),
            ("checkpoint", CheckpointOptions),
            ("report", ReportOptions),
        ):
            if not isinstance(getattr(self, name), kind):
                raise ConfigurationError(
                    f"IterationOptions.{name} must be a {kind.__name__}, got {getattr(self, name)!r}"
                )
        if self.item_id is not None and not callable(self.item_id):
            raise ConfigurationError(f"item_id must be callable, got {self.item_id!r}")

    @property
    def max_abandoned_threads(self) -> int:
        """The sync calls abandoned at their timeout that fail the task."""
        given = self.retry.max_abandoned_threads
        return max(4, self.shard.concurrency) if given is None else given
