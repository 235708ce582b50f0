"""Where a deferring task's wall time goes: the phases of one DAG run of B1, from what Airflow recorded.

A run's moments, each from where it is written down:

* ``queued``, ``run_end``: the DAG run's ``queued_at`` / ``end_date`` (metadata DB);
* ``running``, ``deferred``, ``resumed``, ``task_end``: the task instance's state changes (the
  ``log`` table rows the execution API writes: first ``running``, ``deferred``, second ``running``,
  ``success``);
* ``trigger_start``, ``looked_up``, ``trigger_event``: the trigger's log (``... starting``, the
  streaming trigger's ``looked up from`` / ``writing attempt``, ``Trigger fired event``);
* ``first_page``, ``last_page``, ``end_marker``: the stream's envelopes in Kafka (``emitted_at``,
  set when the trigger builds each envelope, just before it is sent);
* ``scheduled``: the task instance's ``scheduled_dttm`` (the triggerer handed the event over and
  set the task back to ``scheduled``), ``requeued``: its ``queued_dttm`` (the scheduler queued it
  for the executor again);
* ``worker_up``, ``reading``, ``pages_read``: the task's log after the resume (``Pre Execute``,
  ``handing them to``, ``page(s) handled``).

A moment a variant does not have (the floor writes no envelope) is left out.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.streams.descriptor import stream_id

#: The moments of a run, in the order they happen.
MOMENTS = (
    "queued",
    "running",
    "deferred",
    "trigger_start",
    "looked_up",
    "first_page",
    "last_page",
    "end_marker",
    "trigger_event",
    "scheduled",
    "requeued",
    "resumed",
    "worker_up",
    "reading",
    "pages_read",
    "task_end",
    "run_end",
)


def _utc(value: Any) -> datetime | None:
    """A timestamp from the DB, the API or a log line -> aware UTC datetime (``None`` stays ``None``)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _log_lines(text: str) -> list[tuple[datetime, str]]:
    """``(timestamp, event)`` of each JSON line of a task or trigger log."""
    lines = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        moment = _utc(row.get("timestamp"))
        if moment is not None:
            lines.append((moment, str(row.get("event", ""))))
    return lines


def _first(lines: Iterable[tuple[datetime, str]], needle: str, nth: int = 1) -> datetime | None:
    seen = 0
    for moment, event in lines:
        if needle in event:
            seen += 1
            if seen == nth:
                return moment
    return None


def envelope_moments(bootstrap: str, topic: str, key: str, timeout: float = 30.0) -> dict[str, datetime]:
    """``first_page``, ``last_page``, ``end_marker``: ``emitted_at`` of the stream ``key``'s envelopes
    (its latest attempt), read from every partition of ``topic`` up to the end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-b1-phases", "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p, end in ends.items() if end > 0])
        left = {p for p, end in ends.items() if end > 0}
        envelopes = []
        while left:
            msg = consumer.poll(timeout)
            if msg is None:
                break
            if msg.error():
                continue
            if msg.offset() + 1 >= ends[msg.partition()]:
                left.discard(msg.partition())
            if msg.key() == key.encode():
                envelopes.append(TRIGGER_EVENT_CODEC.decode(msg.value()))
    finally:
        consumer.close()
    if not envelopes:
        return {}
    attempt = max(e.attempt for e in envelopes)
    mine = sorted((e for e in envelopes if e.attempt == attempt), key=lambda e: e.sequence_index)
    pages = [e for e in mine if not e.is_last]
    out: dict[str, datetime] = {}
    if pages:
        out["first_page"], out["last_page"] = pages[0].emitted_at, pages[-1].emitted_at
    ends_ = [e for e in mine if e.is_last]
    if ends_:
        out["end_marker"] = ends_[-1].emitted_at
    return out


def run_moments(
    stack: Any, dag_id: str, run_id: str, task_id: str, bootstrap: str, topic: str
) -> dict[str, datetime]:
    """The moments of one DAG run (see the module doc) that it has."""
    moments: dict[str, datetime | None] = {}
    run = stack.query(
        "SELECT queued_at, end_date FROM dag_run WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)
    )
    if run:
        moments["queued"], moments["run_end"] = _utc(run[0]["queued_at"]), _utc(run[0]["end_date"])
    rows = stack.state_change_log(dag_id, run_id=run_id, task_id=task_id)
    changes = [(_utc(r["dttm"]), str(r["event"])) for r in rows]
    running = [m for m, e in changes if e == "running"]
    moments["running"] = running[0] if running else None
    moments["resumed"] = running[1] if len(running) > 1 else None
    moments["deferred"] = next((m for m, e in changes if e == "deferred"), None)
    moments["task_end"] = next((m for m, e in changes if e == "success"), None)
    ti = stack.query(
        "SELECT scheduled_dttm, queued_dttm FROM task_instance "
        "WHERE dag_id = ? AND run_id = ? AND task_id = ?",
        (dag_id, run_id, task_id),
    )
    if ti:
        moments["scheduled"], moments["requeued"] = _utc(ti[0]["scheduled_dttm"]), _utc(ti[0]["queued_dttm"])
    trigger = _log_lines(stack.trigger_log(dag_id, run_id, task_id))
    moments["trigger_start"] = _first(trigger, ") starting")
    moments["looked_up"] = _first(trigger, ": writing attempt")
    moments["trigger_event"] = _first(trigger, "Trigger fired event")
    task = _log_lines(stack.task_log(dag_id, run_id, task_id))
    moments["worker_up"] = _first(task, "::group::Pre Execute", nth=2)
    moments["reading"] = _first(task, "; handing them to ")
    moments["pages_read"] = _first(task, "page(s) handled by this try")
    if moments["looked_up"] is not None:  # a streaming run: its envelopes
        moments.update(envelope_moments(bootstrap, topic, stream_id(dag_id, run_id, task_id, -1)))
    return {name: moments[name] for name in MOMENTS if moments.get(name) is not None}  # type: ignore[misc]


def phases(moments: Mapping[str, datetime]) -> dict[str, float]:
    """Seconds from each moment to the next one the run has, keyed ``"a -> b"``; and ``"wall"``."""
    present = [(name, moments[name]) for name in MOMENTS if name in moments]
    out = {
        f"{a} -> {b}": round((tb - ta).total_seconds(), 3) for (a, ta), (b, tb) in itertools.pairwise(present)
    }
    if "queued" in moments and "run_end" in moments:
        out["wall"] = round((moments["run_end"] - moments["queued"]).total_seconds(), 3)
    return out


def median_phases(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The median of each phase over ``runs`` (the phases every run has, in the first run's order)."""
    if not runs:
        return {}
    names = [n for n in runs[0] if all(n in r for r in runs)]
    return {n: round(statistics.median(r[n] for r in runs), 3) for n in names}
