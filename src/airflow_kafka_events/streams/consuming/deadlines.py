"""A stream reader's two clocks: the start timeout, then the gap timeout.

Until the stream's first element arrives, ``start_timeout`` applies, counted from the first
``next_batch`` call; after it, ``gap_timeout``, counted from the later of the last progress
(the stream started, the frontier moved, the attempt changed) and the current call, so time
the caller spends between calls does not count.  This module imports no Airflow module.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from airflow_kafka_events.errors import ConfigurationError, StreamGapError, StreamNotStartedError, TopicError
from airflow_kafka_events.streams.consuming.sequence import SequenceTracker, gap_error

__all__ = [
    "StreamDeadlines",
    "positive_seconds",
    "with_gap_timeout",
    "with_start_timeout",
]


def positive_seconds(name: str, value: Any) -> float:
    """``value`` (a number or a ``timedelta``) as seconds ``> 0``; else an error naming ``name``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{name} must be > 0 seconds (a number or a timedelta), got {value!r}")
    return float(value)


def with_gap_timeout(exc: StreamGapError, gap_timeout: float) -> StreamGapError:
    """``exc`` naming the real ``gap_timeout`` (a reader that gives the slot back waits less)."""
    return StreamGapError(
        re.sub(r"waited [^s ]+s", f"waited {gap_timeout:g}s", str(exc)),
        missing_index=exc.missing_index,
        attempt=exc.attempt,
        present=exc.present,
        topic=exc.topic,
        trigger_run_id=exc.trigger_run_id,
    )


def with_start_timeout(
    exc: StreamNotStartedError, start_timeout: float, hint: str = ""
) -> StreamNotStartedError:
    """``exc`` naming the real ``start_timeout`` (and ending with ``hint``)."""
    return StreamNotStartedError(
        re.sub(r"within [^s ]+s", f"within {start_timeout:g}s", str(exc)) + hint,
        topic=exc.topic,
        trigger_run_id=exc.trigger_run_id,
    )


class StreamDeadlines:
    """When a reader's wait ends, and the typed error it ends with."""

    def __init__(self, start_timeout: float, gap_timeout: float) -> None:
        self.start_timeout = float(start_timeout)
        self.gap_timeout = float(gap_timeout)
        self.first_call: float | None = None
        self.last_progress: float | None = None

    def begin(self, call_start: float) -> None:
        """A ``next_batch`` call starts (the first one starts the start clock)."""
        if self.first_call is None:
            self.first_call = call_start

    def deadline(self, call_start: float, *, started: bool) -> float:
        if not started:
            assert self.first_call is not None
            return self.first_call + self.start_timeout
        since = call_start if self.last_progress is None else max(self.last_progress, call_start)
        return since + self.gap_timeout

    def expired(
        self,
        now: float,
        call_start: float,
        tracker: SequenceTracker,
        *,
        assigned: bool,
        topic: str,
        where: str,
    ) -> StreamNotStartedError | TopicError | StreamGapError | None:
        """The error to raise once the deadline passed (``None`` before it)."""
        if now < self.deadline(call_start, started=tracker.started):
            return None
        if not tracker.started:
            reason = (
                "the topic does not exist (create it: `airflow-kafka-events topics ensure`)"
                if not assigned
                else "no element arrived: its producer never started"
            )
            return StreamNotStartedError(
                f"{where} did not start within {self.start_timeout:g}s: {reason}",
                topic=topic,
                trigger_run_id=tracker.trigger_run_id,
            )
        if not assigned:
            return TopicError(
                f"topic {topic!r} of {where} does not exist; create it: `airflow-kafka-events topics ensure`"
            )
        return gap_error(tracker, f"{where}: ", f"waited {self.gap_timeout:g}s", topic=topic)
