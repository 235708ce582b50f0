"""What an iteration logs: progress lines, item failures, the end of the run.

One progress line every ``progress_every`` completed items or ``progress_interval``
seconds (done / failed / retrying / running / rate), never one per item; the first
``max_logged_failures`` item failures are logged one by one (:class:`RunLog`).

This module imports no Airflow module.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from airflow_kafka_events.iteration.outcome import IterationSummary

__all__ = ["RunLog"]


class RunLog:
    """The log lines of one run; ``clock`` is the runner's clock."""

    def __init__(self, logger: logging.Logger | Any, *, max_logged_failures: int) -> None:
        self.log = logger
        self.max_logged_failures = max_logged_failures
        self.failures_logged = 0
        self.last_progress_at = 0.0
        self.last_progress_count = 0

    def failure(self, message: str, *args: Any, exc_info: BaseException | None = None) -> None:
        """Log an item failure, unless ``max_logged_failures`` were logged already."""
        if self.failures_logged < self.max_logged_failures:
            self.failures_logged += 1
            self.log.warning(message, *args, exc_info=exc_info)
            if self.failures_logged == self.max_logged_failures:
                self.log.warning("iteration: not logging further item failures one by one")

    def progress(self, now: float, summary: IterationSummary, done: int, retrying: int, running: int) -> None:
        """One progress line: ``done`` items in all, the rate since the last line."""
        this_try = summary.succeeded_this_try
        window = now - self.last_progress_at
        rate = (this_try - self.last_progress_count) / window if window > 0 else 0.0
        self.last_progress_at = now
        self.last_progress_count = this_try
        self.log.info(
            "iteration: %d done (%d this try), %d failed, %d waiting to retry, %d running; %.1f items/s",
            done,
            this_try,
            summary.failed,
            retrying,
            running,
            rate,
        )

    def environ(self, before: Mapping[str, str]) -> None:
        """Warn when items changed ``os.environ`` (shared by every item and thread)."""
        if dict(os.environ) != before:
            changed = sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k))
            self.log.warning(
                "iteration: items changed os.environ (%s); it is shared by every item and thread: "
                "pass env= to subprocesses instead",
                ", ".join(changed[:10]),
            )

    def end(self, summary: IterationSummary, error: BaseException | None) -> None:
        """The run's last line."""
        self.log.info(
            "iteration%s: %d item(s) of this shard seen; %d done (%d this try, %d by earlier tries), "
            "%d failed, %d item retries, %d timed out; %.1f items/s%s",
            "" if summary.shards == 1 else f" shard {summary.shard}/{summary.shards}",
            summary.items,
            summary.succeeded,
            summary.succeeded_this_try,
            summary.skipped,
            summary.failed,
            summary.item_retries,
            summary.timed_out,
            summary.items_per_second,
            "" if error is None else f"; stopped by {type(error).__name__}",
        )
