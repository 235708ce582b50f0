"""``make_runner(handler, concurrency=2, store=...)``: an ``IterationRunner`` from the options' flat names."""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow_kafka_events.iteration.options import (
    CheckpointOptions,
    IterationOptions,
    ReportOptions,
    RetryOptions,
    ShardOptions,
)
from airflow_kafka_events.iteration.runner import IterationRunner

_GROUPS = {
    "shard": ShardOptions,
    "retry": RetryOptions,
    "checkpoint": CheckpointOptions,
    "report": ReportOptions,
}


def make_runner(handler: Any, item_id: Any = None, **kwargs: Any) -> IterationRunner:
    """The runner of ``handler``; each option keyword goes to its group, the rest to the runner."""
    groups = {
        group: kind(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(kind) if f.name in kwargs})
        for group, kind in _GROUPS.items()
    }
    return IterationRunner(handler, IterationOptions(**groups, item_id=item_id), **kwargs)
