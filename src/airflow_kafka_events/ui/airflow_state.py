"""What the view reads from Airflow's metadata DB: checkpoints, watcher positions, asset events.

Every query is bounded (a ``LIMIT``, or keys the page already holds):

* :func:`task_instance_run` -- when a stream's task instance last ran: its latest try's start to
  its end (a try that has not started yet: the newest history row's, the try before it), the time
  the stream's latest attempt can have been written in;
* :func:`consumer_checkpoints` -- stream consumers' read checkpoints, stored in the *task state
  store* of each consumer task instance under ``stream:<trigger_run_id>``
  (:func:`~airflow_kafka_events.streams.consuming.consumption.checkpoint_key`);
* :func:`watchers` -- the asset watchers running this package's trigger: their asset, the triggerer
  that holds them (host, heartbeat) and their stored position, kept in the watched asset's *asset
  state store* under ``airflow_kafka_events.watcher[<connection id>]``
  (:func:`~airflow_kafka_events.watcher.stream` ``STATE_KEY``);
  :func:`watched_sources` -- the same watchers as sources of dead letters (their topics and
  dead-letter topic: where a replay of their dead letters may go);
* :func:`airflow_events_for` -- the Airflow asset events made from envelopes (found by
  ``event_id`` / ``idempotency_key`` in their provenance, as the partition bridge or a watcher
  stored it) and the DAG runs they created; :func:`last_bridge_post` -- the newest of them posted
  by a bridge.

Values shown are filtered: a trigger's arguments are reduced to names of topics, connection and
group (never the rest of its encrypted kwargs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from airflow_kafka_events.airflow_versions import earlier_tries
from airflow_kafka_events.assets.publish import PROVENANCE_EXTRA_KEY
from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.positions import positions_from_json
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.consumption import CHECKPOINT_KEY_PREFIX
from airflow_kafka_events.ui.inspection.replay_targets import WatchedSource

__all__ = [
    "AirflowEvent",
    "ConsumerCheckpoint",
    "TaskInstanceRun",
    "WatcherState",
    "airflow_events_for",
    "consumer_checkpoints",
    "last_bridge_post",
    "task_instance_run",
    "watched_sources",
    "watchers",
]

#: Rows a page reads at most from one table.
ROW_LIMIT = 500
#: Airflow asset events searched for the envelopes of one page (newest first).
EVENT_SCAN_LIMIT = 2000
#: The trigger class of this package's asset watchers.
WATCHER_CLASSPATH = "airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger"
WATCHER_STATE_KEY = "airflow_kafka_events.watcher"


# ====================================================================== task instance runs
#: Task instance states in which its try goes on (it may still write): its run has no end yet.
_UNFINISHED = frozenset({"scheduled", "queued", "running", "deferred", "restarting"})


@dataclass(frozen=True)
class TaskInstanceRun:
    """When a task instance's latest try ran: ``started`` .. ``ended`` (``None``: not yet / never).

    Only the latest try counts (a stream view shows the latest attempt): a task instance cleared
    and run again days later has the window of that run, not one from its first try on.  When the
    current try has not started yet (queued after a clear or a retry), the try before it (the newest
    row of the task instance history) is the latest that ran: ``from_history``.  ``started is None``:
    no try of it ever started (skipped, upstream_failed, still scheduled ...), it wrote nothing.
    """

    started: datetime | None
    ended: datetime | None
    tries: int  # the tries Airflow holds (history rows and the current one)
    state: str | None  # the task instance's current state
    from_history: bool = False

    def never_ran(self) -> str | None:
        """Why no stream can have been written (``None``: a try started)."""
        if self.started is not None:
            return None
        if self.state is None or self.state in _UNFINISHED:
            return f"has not started yet (state {self.state or 'none'}): it has written no stream yet"
        return f"never started (state {self.state}): it wrote no stream"


def _state(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def task_instance_run(
    session: Session, dag_id: str, run_id: str, task_id: str, map_index: int
) -> TaskInstanceRun | None:
    """The latest run of one task instance (indexed queries), or ``None`` when Airflow has no such one."""
    from airflow.models.taskinstance import TaskInstance as TI

    earlier = earlier_tries()
    History = earlier.model

    def key(model: Any) -> list[Any]:
        return [
            model.dag_id == dag_id,
            model.run_id == run_id,
            model.task_id == task_id,
            model.map_index == map_index,
        ]

    current = session.execute(select(TI.state, TI.start_date, TI.end_date).where(*key(TI))).one_or_none()
    if current is None:
        return None
    count = int(
        session.scalar(
            select(func.count())
            .select_from(History)
            .where(*key(History), *earlier.criteria)
            .execution_options(**earlier.options)
        )
        or 0
    )
    state = _state(current.state)
    if current.start_date is not None:
        ended = None if state in _UNFINISHED else current.end_date
        return TaskInstanceRun(started=current.start_date, ended=ended, tries=count + 1, state=state)
    newest = session.execute(
        select(History.start_date, History.end_date)
        .where(*key(History), *earlier.criteria, History.start_date.is_not(None))
        .order_by(History.try_number.desc())
        .limit(1)
        .execution_options(**earlier.options)
    ).one_or_none()
    if newest is None:
        return TaskInstanceRun(started=None, ended=None, tries=count + 1, state=state)
    return TaskInstanceRun(
        started=newest.start_date, ended=newest.end_date, tries=count + 1, state=state, from_history=True
    )


# ====================================================================== consumer checkpoints
@dataclass(frozen=True)
class ConsumerCheckpoint:
    """A consumer task instance's read checkpoint of one stream."""

    trigger_run_id: str
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    generation: int | None
    checkpoint: Checkpoint | None
    updated_at: datetime | None
    problem: str | None = None  # a stored value that cannot be read

    @property
    def pages(self) -> int | None:
        """Pages of the followed attempt the consumer handled (the end marker not counted)."""
        cp = self.checkpoint
        if cp is None:
            return None
        return max(0, cp.next_sequence_index - 1) if cp.finished else cp.next_sequence_index

    def lag(self, pages_written: int, attempt: int) -> int | None:
        """Pages written and not yet handled (``None`` when it follows another attempt)."""
        if self.checkpoint is None or self.pages is None or self.checkpoint.attempt != attempt:
            return None
        return max(0, pages_written - self.pages)


def _decode_checkpoint(value: str) -> tuple[int | None, Checkpoint | None, str | None]:
    try:
        stored = json.loads(value)
        if not isinstance(stored, Mapping) or "checkpoint" not in stored:
            return None, None, "not a stream checkpoint"
        return stored.get("generation"), Checkpoint.from_json(stored["checkpoint"]), None
    except (ValueError, ValidationError) as exc:
        return None, None, str(exc)


def consumer_checkpoints(
    session: Session,
    trigger_run_ids: Iterable[str] = (),
    *,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    map_index: int | None = None,
) -> list[ConsumerCheckpoint]:
    """Checkpoints of the streams ``trigger_run_ids``, and/or those stored by one task (instance)."""
    from airflow.models.task_state_store import TaskStateStoreModel as Row

    ids = sorted(set(trigger_run_ids))
    query = select(Row)
    if ids:
        query = query.where(Row.key.in_([f"{CHECKPOINT_KEY_PREFIX}{i}" for i in ids[:ROW_LIMIT]]))
    else:
        query = query.where(Row.key.startswith(CHECKPOINT_KEY_PREFIX))
    for column, value in ((Row.dag_id, dag_id), (Row.run_id, run_id), (Row.task_id, task_id)):
        if value is not None:
            query = query.where(column == value)
    if map_index is not None:
        query = query.where(Row.map_index == map_index)
    if not ids and dag_id is None:
        return []  # neither streams nor a task: nothing bounded to look for
    rows = session.scalars(query.order_by(Row.updated_at.desc()).limit(ROW_LIMIT)).all()
    out = []
    for row in rows:
        generation, checkpoint, problem = _decode_checkpoint(row.value)
        out.append(
            ConsumerCheckpoint(
                trigger_run_id=row.key[len(CHECKPOINT_KEY_PREFIX) :],
                dag_id=row.dag_id,
                run_id=row.run_id,
                task_id=row.task_id,
                map_index=row.map_index,
                generation=generation,
                checkpoint=checkpoint,
                updated_at=row.updated_at,
                problem=problem,
            )
        )
    return out


# ====================================================================== watchers
@dataclass
class WatcherState:
    """One asset watcher of this package as Airflow holds it."""

    asset_id: int
    asset_name: str
    asset_uri: str
    trigger_id: int
    kafka_config_id: str
    group_id: str | None
    topics: list[str]
    triggerer_id: int | None
    triggerer_host: str | None
    triggerer_heartbeat: datetime | None
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    positions_updated_at: datetime | None = None
    problem: str | None = None


def _watcher_kwargs(trigger: Any) -> tuple[Mapping[str, Any], str | None]:
    try:
        kwargs = trigger.kwargs
    except Exception as exc:  # an undecryptable row (another fernet key): say so, show the rest
        return {}, f"cannot read the trigger's arguments: {type(exc).__name__}"
    return (kwargs if isinstance(kwargs, Mapping) else {}), None


def _stored_positions(session: Session, states: list[WatcherState]) -> None:
    """Each watcher's stored positions, read in one query for all of them."""
    from airflow.models.asset_state_store import AssetStateStoreModel

    if not states:
        return
    keys = {f"{WATCHER_STATE_KEY}[{state.kafka_config_id}]" for state in states}
    rows = session.scalars(
        select(AssetStateStoreModel).where(
            AssetStateStoreModel.asset_id.in_({state.asset_id for state in states}),
            AssetStateStoreModel.key.in_(keys),
        )
    ).all()
    stored = {(row.asset_id, row.key): row for row in rows}
    for state in states:
        row = stored.get((state.asset_id, f"{WATCHER_STATE_KEY}[{state.kafka_config_id}]"))
        if row is None:
            continue
        state.positions_updated_at = row.updated_at
        try:
            value = json.loads(row.value)
            positions = value.get("positions") if isinstance(value, Mapping) else None
            state.positions = positions_from_json(positions)
        except (ValueError, ValidationError) as exc:
            state.problem = f"stored position cannot be read: {exc}"


def watchers(session: Session) -> list[WatcherState]:
    """This package's asset watchers, their triggerer and stored positions."""
    from airflow.models.asset import AssetModel, AssetWatcherModel
    from airflow.models.trigger import Trigger

    rows = session.execute(
        select(AssetWatcherModel, AssetModel, Trigger)
        .join(AssetModel, AssetModel.id == AssetWatcherModel.asset_id)
        .join(Trigger, Trigger.id == AssetWatcherModel.trigger_id)
        .where(Trigger.classpath == WATCHER_CLASSPATH)
        .options(selectinload(Trigger.triggerer_job))
        .limit(ROW_LIMIT)
    ).all()
    out: list[WatcherState] = []
    for _watcher, asset, trigger in rows:
        kwargs, problem = _watcher_kwargs(trigger)
        job = trigger.triggerer_job
        out.append(
            WatcherState(
                asset_id=asset.id,
                asset_name=asset.name,
                asset_uri=asset.uri,
                trigger_id=trigger.id,
                kafka_config_id=str(kwargs.get("kafka_config_id") or "kafka_default"),
                group_id=kwargs.get("group_id"),
                topics=[str(t) for t in kwargs.get("topics") or ()],
                triggerer_id=trigger.triggerer_id,
                triggerer_host=getattr(job, "hostname", None),
                triggerer_heartbeat=getattr(job, "latest_heartbeat", None),
                problem=problem,
            )
        )
    _stored_positions(session, out)
    return out


def watched_sources(session: Session) -> list[WatchedSource]:
    """This package's asset watchers as sources of dead letters: name, topics, dead-letter topic."""
    from airflow.models.asset import AssetWatcherModel
    from airflow.models.trigger import Trigger

    rows = session.execute(
        select(AssetWatcherModel.name, Trigger)
        .join(Trigger, Trigger.id == AssetWatcherModel.trigger_id)
        .where(Trigger.classpath == WATCHER_CLASSPATH)
        .limit(ROW_LIMIT)
    ).all()
    out: list[WatchedSource] = []
    for name, trigger in rows:
        kwargs, _ = _watcher_kwargs(trigger)  # unreadable arguments: no topics, so no source
        dlq_topic = kwargs.get("dlq_topic")
        topics = tuple(str(t) for t in kwargs.get("topics") or ())
        out.append(WatchedSource(str(name), topics, str(dlq_topic) if dlq_topic else None))
    return out


# ====================================================================== asset events in Airflow
@dataclass(frozen=True)
class AirflowEvent:
    """An Airflow asset event made from an envelope, and the DAG runs it created."""

    id: int
    asset_id: int
    asset_name: str
    timestamp: datetime
    partition_key: str | None
    via: str  # "bridge" | "watcher"
    event_id: str | None
    idempotency_key: str | None
    dag_runs: tuple[tuple[str, str], ...]  # (dag_id, run_id)


def provenance_of(extra: Any) -> tuple[str, Mapping[str, Any]] | None:
    """``(via, provenance)`` of an asset event's extra, or ``None`` (not made from an envelope)."""
    if not isinstance(extra, Mapping):
        return None
    info = extra.get(PROVENANCE_EXTRA_KEY)
    if isinstance(info, Mapping):
        return "bridge", info
    payload = extra.get("payload")
    if extra.get("from_trigger") and isinstance(payload, Mapping):
        info = payload.get(PROVENANCE_EXTRA_KEY)
        if isinstance(info, Mapping):
            return "watcher", info
    return None


def _recent_events(session: Session, since: datetime | None, limit: int) -> Sequence[Any]:
    from airflow.models.asset import AssetEvent

    query = select(AssetEvent).options(
        selectinload(AssetEvent.created_dagruns), selectinload(AssetEvent.asset)
    )
    if since is not None:
        query = query.where(AssetEvent.timestamp >= since)
    return session.scalars(query.order_by(AssetEvent.id.desc()).limit(limit)).all()


def _airflow_event(event: Any, via: str, info: Mapping[str, Any]) -> AirflowEvent:
    return AirflowEvent(
        id=event.id,
        asset_id=event.asset_id,
        asset_name=getattr(event.asset, "name", "?"),
        timestamp=event.timestamp,
        partition_key=event.partition_key,
        via=via,
        event_id=info.get("event_id"),
        idempotency_key=info.get("idempotency_key"),
        dag_runs=tuple((run.dag_id, run.run_id) for run in event.created_dagruns),
    )


def airflow_events_for(
    session: Session, event_ids: Iterable[str], *, since: datetime | None, limit: int = EVENT_SCAN_LIMIT
) -> dict[str, list[AirflowEvent]]:
    """``{envelope event_id: [Airflow asset events made from it]}`` among the newest ``limit``."""
    wanted = set(event_ids)
    found: dict[str, list[AirflowEvent]] = {}
    if not wanted:
        return found
    for event in _recent_events(session, since, limit):
        prov = provenance_of(event.extra)
        if prov is None or prov[1].get("event_id") not in wanted:
            continue
        found.setdefault(prov[1]["event_id"], []).append(_airflow_event(event, *prov))
    return found


def last_bridge_post(session: Session, *, limit: int = EVENT_SCAN_LIMIT) -> AirflowEvent | None:
    """The newest Airflow asset event a bridge posted (among the newest ``limit``)."""
    for event in _recent_events(session, None, limit):
        prov = provenance_of(event.extra)
        if prov is not None and prov[0] == "bridge":
            return _airflow_event(event, *prov)
    return None
