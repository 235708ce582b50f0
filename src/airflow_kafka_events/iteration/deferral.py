"""An iterating task that waits for its stream outside its worker slot.

An ``@task.iterable`` task over a stream (``from_stream(...)`` / ``StreamRef``) reads and
handles items in the worker while pages come.  With ``deferrable=True`` (default: Airflow's
``[operators] default_deferrable``), when no page came for
``stream_idle_interval`` seconds and nothing is in flight (no item running, waiting for a
retry or abandoned in a thread, every result delivered, no item failed for good), the
runner stops with its checkpoint saved and its results stream left open, and the task
defers to a :class:`~airflow_kafka_events.streams.consuming.wait_trigger.StreamWaitTrigger` that
waits for the next ``stream_max_events`` pages past the last page handled (or the stream's
end, a new attempt, ``stream_resume_wait`` seconds after the first new page, or the start
/ gap timeouts, which end as the same typed errors as in the worker).  On resume the task
goes on from that position, in the same try: a new runner loads the checkpoint, the source
reads on from the stream position after the last page handled with the next item ordinal,
so items keep their order and none runs twice; a retry still re-reads the attempt and skips
what the checkpoint has as done.

Without deferral (and ``reschedule=True``, the default) the task gives its slot back the
same way but by a reschedule (see :mod:`airflow_kafka_events.streams.consuming.slot_release`): the same try
runs again ``stream_reschedule_interval`` seconds later and goes on from the same position.

:class:`Resumption` is what travels through the deferral (JSON in the task instance's
``next_kwargs``) or the reschedule (in the task state store).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_kafka_events.iteration.sources import StreamItemSource

__all__ = [
    "Resumption",
]


@dataclass
class Resumption:
    """Where a deferred iteration goes on: the stream position, the next ordinal, the counts."""

    start_deadline: float
    attempt: int = 0
    position: dict[str, Any] | None = None
    ordinal: int = 0
    deferrals: int = 0
    carried: dict[str, Any] = field(default_factory=dict)
    #: epoch seconds of the last page read (the gap clock of a rescheduled iteration)
    last_progress: float | None = None

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any], event: Mapping[str, Any] | None) -> Resumption:
        resumption = cls(**dict(kwargs))
        moved = (event or {}).get("start_deadline")
        if isinstance(moved, (int, float)) and not isinstance(moved, bool):
            resumption.start_deadline = float(moved)  # the trigger stopped the clock for a while
        return resumption

    def after(self, source: StreamItemSource, carried: dict[str, Any]) -> Resumption:
        """The resumption of the next deferral, once ``source`` went idle."""
        return Resumption(
            start_deadline=self.start_deadline,
            attempt=source.attempt,
            position=None if source.position is None else source.position.to_json(),
            ordinal=source.next_ordinal,
            deferrals=self.deferrals + 1,
            carried=carried,
            last_progress=source.last_progress,
        )

    def to_kwargs(self) -> dict[str, Any]:
        return asdict(self)
