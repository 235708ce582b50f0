"""Naming and describing trigger event streams; the resume rules of a streaming trigger.

* :func:`stream_id` / :func:`parse_stream_id`: the deterministic ``trigger_run_id`` of a
  task instance's stream (the Kafka key of every envelope of that stream);
* :class:`StreamDescriptor`: where a finished stream attempt is in Kafka, as JSON values (it
  travels in a ``TriggerEvent`` payload and in XCom);
* :func:`plan_resume`: what a (re)started streaming trigger does given the latest envelope
  of its stream found in Kafka;
* :func:`task_stream_id`, :func:`generation_of`, :func:`not_before_of`: a running task's
  stream id, generation and progress lookup bound, from its context;
* :func:`task_label`: how an operator names itself in errors and logs.

Epoch rules (``attempt``): a stream's envelopes carry ``(attempt, sequence_index)``; readers
follow the highest attempt.  An attempt ends with exactly one ``is_last`` envelope, a
*terminal marker* with no payload, whose ``sequence_index`` is the number of data pages of
the attempt and which carries the error when the attempt failed.  Every envelope of an
attempt written for a known task generation (the DAG run's ``clear_number``) carries it in
its ``metadata["generation"]``: a task cleared since the attempt was written starts a new one.

This module imports no Airflow module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_kafka_events.envelopes.model import StreamFailure
from airflow_kafka_events.errors import ValidationError

if TYPE_CHECKING:
    from airflow_kafka_events.streams.progress import StreamProgress

__all__ = [
    "DEFAULT_NOT_BEFORE_MARGIN",
    "ResumePlan",
    "StreamDescriptor",
    "StreamKey",
    "generation_of",
    "not_before_of",
    "parse_stream_id",
    "plan_resume",
    "stream_id",
    "task_label",
    "task_stream_id",
]

#: How much earlier than the DAG run's ``run_after`` a stream's progress lookup starts.
DEFAULT_NOT_BEFORE_MARGIN = timedelta(minutes=10)

_SEP = "/"


class StreamKey(NamedTuple):
    """The parts of a :func:`stream_id`."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1


def _check_part(name: str, value: Any, *, slash_ok: bool) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"stream id part {name} must be a str, got {type(value).__qualname__}")
    if not value:
        raise ValidationError(f"stream id part {name} must not be empty")
    if not slash_ok and _SEP in value:
        raise ValidationError(f"stream id part {name} must not contain {_SEP!r}, got {value!r}")


def _check_map_index(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"stream id part map_index must be an int, got {type(value).__qualname__}")
    if value < -1:
        raise ValidationError(f"stream id part map_index must be -1 or more, got {value}")


def stream_id(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The ``trigger_run_id`` of a task instance's stream: ``"{dag_id}/{task_id}/{map_index}/{run_id}"``.

    Deterministic (a retried or resumed task instance names the same stream) and
    unambiguous: ``dag_id`` and ``task_id`` cannot contain ``/`` (Airflow's key rules;
    checked here) and ``run_id``, which may, comes last.
    """
    _check_part("dag_id", dag_id, slash_ok=False)
    _check_part("task_id", task_id, slash_ok=False)
    _check_part("run_id", run_id, slash_ok=True)
    _check_map_index(map_index)
    return _SEP.join((dag_id, task_id, str(map_index), run_id))


def parse_stream_id(value: str) -> StreamKey:
    """Inverse of :func:`stream_id`; ``ValidationError`` if ``value`` is not one."""
    if not isinstance(value, str):
        raise ValidationError(f"a stream id is a str, got {type(value).__qualname__}")
    parts = value.split(_SEP, 3)
    if len(parts) != 4:
        raise ValidationError(f"not a stream id (dag_id/task_id/map_index/run_id): {value!r}")
    dag_id, task_id, index_text, run_id = parts
    try:
        map_index = int(index_text)
    except ValueError:
        map_index = None
    if map_index is None or str(map_index) != index_text:
        raise ValidationError(
            f"not a stream id: map_index {index_text!r} is not a canonical int in {value!r}"
        )
    key = StreamKey(dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    # re-check every part (empty parts, map_index < -1)
    if stream_id(*key) != value:  # pragma: no cover - split/join are inverse once parts are valid
        raise ValidationError(f"not a canonical stream id: {value!r}")
    return key


# --------------------------------------------------------------------------- task context
def task_stream_id(
    context: Mapping[str, Any], task_id: str | None = None, map_index: int | None = None
) -> str:
    """``stream_id`` of ``task_id`` (default: the running task) in the context's DAG run."""
    ti = context["ti"]
    if map_index is None:
        map_index = getattr(ti, "map_index", None)
    return stream_id(ti.dag_id, ti.run_id, task_id or ti.task_id, -1 if map_index is None else map_index)


def generation_of(context: Mapping[str, Any]) -> int:
    """The task's generation: ``dag_run.clear_number`` (0 when unknown)."""
    for holder in (context.get("dag_run"), context.get("ti")):
        value = getattr(holder, "clear_number", None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def not_before_of(
    context: Mapping[str, Any], margin: timedelta = DEFAULT_NOT_BEFORE_MARGIN
) -> datetime | None:
    """The instant no envelope of the DAG run's streams can be older than, or ``None``.

    ``dag_run.run_after`` minus ``margin``: the scheduler starts no task of a run before its
    ``run_after``, and a clear does not change it (unlike ``start_date`` and ``queued_at``),
    so the bound also covers the attempts of earlier generations.  ``None`` when the
    context has no timezone-aware ``run_after``.
    """
    run_after = getattr(context.get("dag_run"), "run_after", None)
    if not isinstance(run_after, datetime) or run_after.tzinfo is None or run_after.utcoffset() is None:
        return None
    return run_after - margin


# --------------------------------------------------------------------------- descriptor
def _req_int(data: Mapping[str, Any], name: str, *, low: int, optional: bool = False) -> int | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"StreamDescriptor.{name} must be an int, got {value!r}")
    if value < low:
        raise ValidationError(f"StreamDescriptor.{name} must be >= {low}, got {value}")
    return value


@dataclass(frozen=True)
class StreamDescriptor:
    """Where one finished attempt of a stream is in Kafka.

    ``count`` is the number of *data* pages (``sequence_index`` 0..count-1); the attempt's
    envelopes are ``count + 1`` with the terminal marker (``sequence_index == count``).
    ``first_offset`` is the offset of its ``sequence_index`` 0 envelope (``None`` if it is no
    longer known, e.g. removed by retention) and ``last_offset`` that of its terminal marker;
    all of them are in ``partition``, interleaved with other streams' envelopes, so a reader
    filters on key ``trigger_run_id`` and ``attempt``.  ``error`` is ``{"type", "message"}``
    when the attempt failed.
    """

    topic: str
    trigger_run_id: str
    attempt: int
    count: int
    first_offset: int | None
    last_offset: int
    partition: int
    error: dict[str, str] | None = None

    def __post_init__(self) -> None:
        for name in ("topic", "trigger_run_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValidationError(f"StreamDescriptor.{name} must be a non-empty str, got {value!r}")
        for name in ("attempt", "count", "first_offset", "last_offset", "partition"):
            _req_int(self.__dict__, name, low=0, optional=name == "first_offset")
        if self.error is not None:
            if isinstance(self.error, StreamFailure):
                object.__setattr__(self, "error", self.error.to_avro())
            elif not isinstance(self.error, Mapping):
                raise ValidationError(
                    f"StreamDescriptor.error must be a dict or None, got {type(self.error).__qualname__}"
                )
            StreamFailure(type=self.error.get("type"), message=self.error.get("message"))  # type: ignore[arg-type]
            object.__setattr__(self, "error", {"type": self.error["type"], "message": self.error["message"]})

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON values only (str, int, None, dict of str)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamDescriptor:
        """Inverse of :meth:`to_dict`; ``ValidationError`` on a missing or mistyped field."""
        if not isinstance(data, Mapping):
            raise ValidationError(f"a StreamDescriptor dict is a mapping, got {type(data).__qualname__}")
        missing = [
            name
            for name in ("topic", "trigger_run_id", "attempt", "count", "last_offset", "partition")
            if name not in data
        ]
        if missing:
            raise ValidationError(f"StreamDescriptor dict misses {', '.join(missing)}")
        values: dict[str, Any] = {f.name: data.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**values)


# --------------------------------------------------------------------------- resume rules
class ResumePlan(NamedTuple):
    """What a streaming trigger does next.

    Write pages of ``attempt`` starting at ``next_seq``, asking the page source for the pages
    after ``cursor`` (``None``: from the beginning) -- unless ``already_complete``, in which
    case nothing is written and the finished attempt is reported again.
    """

    attempt: int
    next_seq: int
    cursor: str | None
    already_complete: bool


def plan_resume(progress: StreamProgress | None, generation: int | None) -> ResumePlan:
    """The resume decision for the latest envelope of a stream (``None``: nothing written yet).

    ``generation`` is the generation of the task instance the trigger runs for (the DAG
    run's ``clear_number``), or ``None`` when it is not known (a ``start_from_trigger``
    task); ``progress.generation`` is the generation recorded on the latest envelope.

    * nothing written: attempt 0 from sequence 0;
    * ``generation`` is known and differs from the latest envelope's (the task was cleared
      since that attempt was written, or the attempt was written without a generation): a
      new attempt (``last.attempt + 1``) from 0;
    * the last envelope is data (the writer was interrupted, e.g. by a triggerer restart):
      same attempt, continue at ``sequence_index + 1`` from its ``resume_cursor``; pages
      already in Kafka are not fetched again.  A page without a cursor cannot be resumed
      after, so then a new attempt starts from 0;
    * a page of the attempt is missing with no page before it to resume after
      (``progress.first_missing``): a new attempt from 0;
    * the last envelope ends a failed attempt: a new attempt from 0 (a retry is a new epoch);
    * the last envelope ends a successful attempt: ``already_complete``.

    So a trigger run again with the same generation (a triggerer restart, a retry) resumes,
    and one with a new generation (a clear) starts over.
    """
    if progress is None:
        return ResumePlan(attempt=0, next_seq=0, cursor=None, already_complete=False)
    fresh = ResumePlan(attempt=progress.attempt + 1, next_seq=0, cursor=None, already_complete=False)
    if generation is not None and progress.generation != generation:
        return fresh
    if progress.first_missing is not None:
        return fresh
    if not progress.is_last:
        if progress.resume_cursor is None:
            return fresh
        return ResumePlan(
            attempt=progress.attempt,
            next_seq=progress.sequence_index + 1,
            cursor=progress.resume_cursor,
            already_complete=False,
        )
    if progress.error is not None:
        return fresh
    return ResumePlan(
        attempt=progress.attempt,
        next_seq=progress.sequence_index + 1,
        cursor=None,
        already_complete=True,
    )


# ------------------------------------------------------------------ task label
def task_label(operator: Any) -> str:
    """``ClassName(task_id='...')``: the operator as errors and logs name it."""
    return f"{type(operator).__name__}(task_id={getattr(operator, 'task_id', '?')!r})"
