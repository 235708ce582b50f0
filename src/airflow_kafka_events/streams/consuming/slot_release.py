"""How a stream consumer waits when no page is ready: keep its worker slot, reschedule, or defer.

Every task that reads another task's stream (``StreamConsumerOperator``,
``@task.stream_consumer``, ``@task.iterable`` over a stream) waits in one of three modes
(:func:`wait_mode`):

* ``"defer"`` (``deferrable=True``): give the slot back to a ``StreamWaitTrigger`` in the
  triggerer, resumed when a batch is ready;
* ``"reschedule"`` (the default: ``deferrable`` off, ``reschedule=True``): give the slot back
  by rescheduling the task as a sensor in ``reschedule`` mode does (state
  ``up_for_reschedule``, run again ``reschedule_interval`` seconds later, same try); no
  triggerer is needed;
* ``"in-worker"`` (``reschedule=False``, or no task state store to carry the position): wait
  in the worker, holding the slot, up to the start and gap timeouts.

In the first two modes (:func:`gives_slot_back`) a consumer whose stream has not started
gives its slot back at once (its producer may need that slot to start), and one whose stream
went idle for ``idle_interval`` seconds gives it back with everything handled so far
checkpointed; a consumer reading a flowing stream keeps its slot and reads on.

A reschedule ends the task's process, so what a deferral passes in ``next_kwargs`` travels in
the task state store instead: a :class:`RescheduleNote` under :func:`note_key`, valid for the
same try and generation only (a retry or a clear starts afresh, as in the other modes).  The
note carries the start deadline, so ``start_timeout`` counts from the try's first start, not
from each rerun, and the clock stands still while the producer is known to wait for a slot
(:func:`paused_start_deadline`, as the trigger does).

This module imports Airflow only inside its functions that talk to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NoReturn

from airflow_kafka_events.errors import ConfigurationError, StreamNotStartedError
from airflow_kafka_events.streams.checkpoint import CheckpointStore, state_store_of
from airflow_kafka_events.streams.consuming.deadlines import positive_seconds
from airflow_kafka_events.streams.descriptor import generation_of

if TYPE_CHECKING:
    from airflow_kafka_events.streams.consuming.operator import StreamRef

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_RESCHEDULE_IDLE_INTERVAL",
    "DEFAULT_RESCHEDULE_INTERVAL",
    "DEFER",
    "IN_WORKER",
    "RESCHEDULE",
    "Rerun",
    "RescheduleNote",
    "WaitOptions",
    "default_deferrable",
    "default_idle_interval",
    "gives_slot_back",
    "load_note",
    "note_key",
    "paused_start_deadline",
    "producer_state",
    "reschedule_consumer",
    "reschedule_in",
    "try_number_of",
    "wait_mode",
]

IN_WORKER = "in-worker"
RESCHEDULE = "reschedule"
DEFER = "defer"

#: Seconds without a ready page before a rescheduling consumer gives its slot back.  Longer than
#: a deferring one's (1 s): a rerun costs a task start (seconds), a resume from the trigger less.
DEFAULT_RESCHEDULE_IDLE_INTERVAL = 10.0
#: Seconds from giving the slot back to the rerun (a reschedule-mode sensor's poke interval).
DEFAULT_RESCHEDULE_INTERVAL = 5.0

#: Task state store key prefix of a :class:`RescheduleNote`.
NOTE_KEY_PREFIX = "reschedule:"

#: Producer task states in which it cannot have started: the start clock stands still.
_WAITING_PRODUCER_STATES = frozenset({None, "none", "scheduled"})


def wait_mode(*, deferrable: bool, reschedule: bool, has_store: bool) -> str:
    """How a consumer waits: ``"defer"``, ``"reschedule"`` or ``"in-worker"`` (see the module doc)."""
    if deferrable:
        return DEFER
    if reschedule and has_store:
        return RESCHEDULE
    return IN_WORKER


def default_idle_interval(mode: str, max_wait: float) -> float:
    """The ``idle_interval`` when none is given: at least a batch's ``max_wait``."""
    floor = DEFAULT_RESCHEDULE_IDLE_INTERVAL if mode == RESCHEDULE else 1.0
    return max(float(max_wait), floor)


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (``False`` when it cannot be read)."""
    try:
        from airflow.configuration import conf

        return conf.getboolean("operators", "default_deferrable", fallback=False)
    except Exception:  # no Airflow configuration (e.g. a bare unit test)
        return False


@dataclass(frozen=True)
class WaitOptions:
    """How a consumer waits when no page is ready (see the module doc), validated on construction.

    ``deferrable`` / ``reschedule`` choose the mode (:meth:`mode`); ``reschedule_interval``:
    seconds from a reschedule to the rerun; ``idle_interval``: seconds without a ready page
    before giving the slot back; ``resume_wait``: seconds the deferred wait gives a batch to
    fill after its first page; ``state_poll_interval``: seconds between two looks at the
    producer's state while deferred; ``lookup_timeout``: seconds to look up the stream's latest
    attempt on a fresh start.  :meth:`following` fills the defaults that follow the reader's
    ``max_wait`` and Airflow's configuration.
    """

    deferrable: bool = False
    reschedule: bool = True
    reschedule_interval: float = DEFAULT_RESCHEDULE_INTERVAL
    idle_interval: float = DEFAULT_RESCHEDULE_IDLE_INTERVAL
    resume_wait: float = 5.0
    state_poll_interval: float = 5.0
    lookup_timeout: float = 30.0

    def __post_init__(self) -> None:
        flags = ("deferrable", "reschedule")
        for flag in flags:
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        for name in (f.name for f in fields(self) if f.name not in flags):  # the seconds
            object.__setattr__(self, name, positive_seconds(name, getattr(self, name)))

    @classmethod
    def following(
        cls,
        max_wait: float,
        *,
        deferrable: bool | None = None,
        reschedule: bool = True,
        idle_interval: float | None = None,
        resume_wait: float | None = None,
        **seconds: float,
    ) -> WaitOptions:
        """The options with what ``None`` leaves open filled in.

        ``deferrable``: ``[operators] default_deferrable``; ``idle_interval``: at least
        ``max_wait`` (:func:`default_idle_interval`); ``resume_wait``: ``max(5, max_wait)``.
        ``seconds``: the other fields.
        """
        deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        mode = wait_mode(deferrable=deferrable, reschedule=bool(reschedule), has_store=True)
        return cls(
            deferrable=deferrable,
            reschedule=bool(reschedule),
            idle_interval=default_idle_interval(mode, max_wait) if idle_interval is None else idle_interval,
            resume_wait=max(5.0, float(max_wait)) if resume_wait is None else resume_wait,
            **seconds,
        )

    def mode(self, *, has_store: bool) -> str:
        """How a run waits (:func:`wait_mode`): with a task state store, or without one."""
        return wait_mode(deferrable=self.deferrable, reschedule=self.reschedule, has_store=has_store)


def gives_slot_back(mode: str, *, unwritten: bool = False, idle: bool = False) -> bool:
    """Whether a consumer gives its slot back now: its stream has not started, or went idle.

    An in-worker consumer never does; a reading one (neither) keeps its slot and reads on.
    """
    return mode != IN_WORKER and (unwritten or idle)


def paused_start_deadline(
    start_deadline: float, *, producer_state: str | None, known: bool, last_look: float | None, now: float
) -> float:
    """The start deadline, moved by the time since ``last_look`` if the producer could not start."""
    if known and producer_state in _WAITING_PRODUCER_STATES and last_look is not None:
        return start_deadline + max(0.0, now - last_look)
    return start_deadline


def note_key(trigger_run_id: str) -> str:
    """Task state store key of the reschedule note of a consumer of stream ``trigger_run_id``."""
    return f"{NOTE_KEY_PREFIX}{trigger_run_id}"


def try_number_of(context: Mapping[str, Any]) -> int:
    """The task's try number (1 when unknown)."""
    value = getattr(context.get("ti"), "try_number", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


@dataclass
class RescheduleNote:
    """What a rescheduled consumer's next run of the same try goes on from.

    ``start_deadline``: epoch seconds by which the stream must have started; ``resume``: the
    keyword arguments of the operator's resume method (what a deferral passes in
    ``next_kwargs``; ``None`` while the stream has not started: the rerun looks it up again);
    ``last_look``: when the producer's state was last looked at; ``last_progress``: when the
    last page was handled (the gap timeout counts from it); ``reschedules``: slot give-backs
    so far in this try.
    """

    generation: int
    try_number: int
    start_deadline: float
    resume: dict[str, Any] | None = None
    last_look: float | None = None
    last_progress: float | None = None
    reschedules: int = 0

    @classmethod
    def load(
        cls, store: CheckpointStore, key: str, *, generation: int, try_number: int
    ) -> RescheduleNote | None:
        """The note of this try and generation under ``key``; ``None`` when none (or another's)."""
        stored = store.get(key, None)
        if not isinstance(stored, Mapping):
            return None
        try:
            note = cls(**dict(stored))
        except TypeError:
            return None
        if note.generation != generation or note.try_number != try_number:
            return None
        return note

    def save(self, store: CheckpointStore, key: str) -> None:
        store.set(key, asdict(self))


def reschedule_in(seconds: float) -> NoReturn:
    """Give the worker slot back: the task goes ``up_for_reschedule`` and runs again in ``seconds``."""
    from airflow.sdk.exceptions import AirflowRescheduleException

    raise AirflowRescheduleException(datetime.now(timezone.utc) + timedelta(seconds=seconds))


def producer_state(context: Mapping[str, Any], task_id: str, map_index: int) -> tuple[bool, str | None]:
    """``(known, state)`` of task ``task_id`` (``map_index``) in the DAG run of ``context``."""
    from airflow_kafka_events.streams.consuming.wait_trigger import producer_state_key

    ti = context["ti"]
    try:
        states = ti.get_task_states(
            dag_id=ti.dag_id, task_ids=[task_id], run_ids=[ti.run_id], map_index=map_index
        )
    except Exception as exc:  # no Airflow API here: the start clock runs
        log.info("the state of task %r is unavailable (%s)", task_id, exc)
        return False, None
    return True, (states or {}).get(ti.run_id, {}).get(producer_state_key(task_id, map_index))


@dataclass(frozen=True)
class Rerun:
    """A consumer's give-back by reschedule: its stream (and so its producer), its clocks."""

    stream: StreamRef
    trigger_run_id: str
    start_timeout: float
    interval: float


def reschedule_consumer(
    context: Mapping[str, Any],
    store: CheckpointStore,
    rerun: Rerun,
    *,
    resume: dict[str, Any] | None,
    start_deadline: float,
    reschedules: int,
    last_progress: float | None,
) -> NoReturn:
    """Save the :class:`RescheduleNote` of the rerun and give the slot back by a reschedule.

    ``resume`` ``None``: the stream has not started; the start clock stands still while the
    producer is known to wait for a slot, and a passed start deadline raises
    ``StreamNotStartedError`` instead.
    """
    now = time.time()
    generation, try_number = generation_of(context), try_number_of(context)
    key = note_key(rerun.trigger_run_id)
    if resume is None:
        before = RescheduleNote.load(store, key, generation=generation, try_number=try_number)
        known, state = producer_state(context, rerun.stream.producer_task_id, rerun.stream.map_index)
        start_deadline = paused_start_deadline(
            start_deadline,
            producer_state=state,
            known=known,
            last_look=None if before is None else before.last_look,
            now=now,
        )
        if now >= start_deadline:
            raise StreamNotStartedError(
                f"stream {rerun.trigger_run_id!r} did not start within {rerun.start_timeout:g}s: "
                "no element arrived",
                topic=rerun.stream.topic,
                trigger_run_id=rerun.trigger_run_id,
            )
    RescheduleNote(
        generation=generation,
        try_number=try_number,
        start_deadline=start_deadline,
        resume=resume,
        last_look=now,
        last_progress=last_progress,
        reschedules=reschedules,
    ).save(store, key)
    log.info(
        "stream %s: %s; giving the worker slot back for %gs (reschedule %d)",
        rerun.trigger_run_id,
        "not started" if resume is None else "idle",
        rerun.interval,
        reschedules,
    )
    reschedule_in(rerun.interval)


def load_note(context: Mapping[str, Any], trigger_run_id: str) -> RescheduleNote | None:
    """The :class:`RescheduleNote` of this try for stream ``trigger_run_id``, if any."""
    store = state_store_of(context)
    if store is None:
        return None
    return RescheduleNote.load(
        store,
        note_key(trigger_run_id),
        generation=generation_of(context),
        try_number=try_number_of(context),
    )
