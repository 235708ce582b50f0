"""Benchmark DAG handlers (imported by dotted path in the workers: the DAGs folder is on sys.path)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def record_handled(events: Any, context: Any) -> None:
    """Append each handled page with the time its batch was handed over; one write per batch.

    Writes ``<dir>/<task_id>.jsonl`` (``dir`` of the DAG run's conf), one line per page:
    ``{"seq", "attempt", "at", "batch", "max_events", "max_wait", "poll_timeout"}``.
    """
    now = time.time()
    task = context["task"]
    out = Path((context["dag_run"].conf or {})["dir"]) / f"{task.task_id}.jsonl"
    common = {
        "at": now,
        "batch": len(events),
        "max_events": task.max_events,
        "max_wait": task.max_wait,
        "poll_timeout": task.poll_timeout,
    }
    lines = (json.dumps({"seq": e.sequence_index, "attempt": e.attempt, **common}) for e in events)
    with out.open("a", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines))
