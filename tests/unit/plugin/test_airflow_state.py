"""When a stream's task instance last ran, read from Airflow's metadata tables.

The tables are Airflow's own (its models, created on an in-memory SQLite database) and the rows
Airflow's own code writes: a retry's and a clear's history row come from
``TaskInstance.prepare_db_for_next_try`` / ``clear_task_instances``, as the scheduler and the
API server write them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

pytestmark = pytest.mark.unit

DAG, RUN, TASK = "state_dag", "manual__2026-12-01T10:00:00+00:00", "produce"
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


@pytest.fixture
def session() -> Iterator[object]:
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.dagrun import DagRun
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    import_all_models()
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as db:
        db.add(
            DagRun(dag_id=DAG, run_id=RUN, run_type="manual", state="success", logical_date=T0, run_after=T0)
        )
        db.commit()
        yield db
    engine.dispose()


def _ti(session, task_id: str = TASK, map_index: int = -1, **values: object):
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import insert, select

    row = {"id": uuid.uuid4(), "dag_id": DAG, "run_id": RUN, "task_id": task_id, TI.map_index: map_index}
    session.execute(insert(TI).values({"pool": "default_pool", "try_number": 1, **row, **values}))
    session.commit()
    return session.scalars(select(TI).where(TI.id == row["id"])).one()


def _run(session, task_id: str = TASK, map_index: int = -1):
    from airflow_kafka_events.ui.airflow_state import task_instance_run

    return task_instance_run(session, DAG, RUN, task_id, map_index)


def _retry(session, ti, start: datetime, end: datetime | None, state: str):
    """The next try of ``ti`` as Airflow writes it, started at ``start``: the live task instance.

    Airflow 3.3 copies the try into a history row and the caller counts the next try on the same
    row; Airflow 3.4 archives the row and returns its successor (its try already counted).
    """
    successor = ti.prepare_db_for_next_try(session)
    if successor is None:
        ti.try_number += 1
        successor = ti
    successor.start_date, successor.end_date, successor.state = start, end, state
    session.commit()
    return successor


def test_a_retried_mapped_task_instance_runs_from_its_latest_try_s_start(session):
    ti = _ti(session, map_index=2, state="failed", start_date=T0, end_date=T0 + timedelta(minutes=1))
    _ti(
        session,
        map_index=1,
        state="success",
        start_date=T0 - timedelta(hours=1),
        end_date=T0 + timedelta(hours=1),
    )
    _retry(session, ti, T0 + timedelta(minutes=5), T0 + timedelta(minutes=6), "success")

    run = _run(session, map_index=2)
    assert (run.started, run.ended, run.tries, run.state) == (
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=6),
        2,
        "success",
    )
    assert run.never_ran() is None and not run.from_history
    other = _run(session, map_index=1)  # another map index: its own times, no history of map index 2
    assert (other.started, other.tries) == (T0 - timedelta(hours=1), 1)
    assert _run(session, map_index=3) is None and _run(session, task_id="absent") is None


def test_a_task_instance_cleared_and_run_again_days_later_gets_that_run_s_window(session):
    from airflow.models.taskinstance import clear_task_instances

    ti = _ti(session, state="success", start_date=T0, end_date=T0 + timedelta(minutes=2))
    # what the UI's / API's clear does: the try kept as history, the live row in state none
    ti = (clear_task_instances([ti], session) or [ti])[0]  # Airflow 3.4 returns the successor rows
    session.commit()
    pending = _run(session)  # not started again yet: the try that ran is the latest
    assert (pending.started, pending.ended, pending.tries, pending.state) == (
        T0,
        T0 + timedelta(minutes=2),
        2,
        None,
    )

    later = T0 + timedelta(days=3)
    ti.start_date, ti.end_date, ti.state = later, None, "running"
    session.commit()
    rerun = _run(session)  # days later: from the re-run's start, not from the first try's
    assert (rerun.started, rerun.ended, rerun.tries, rerun.state) == (later, None, 2, "running")


def test_a_try_not_started_falls_back_to_the_newest_history_row(session):
    ti = _ti(session, state="failed", start_date=T0, end_date=T0 + timedelta(minutes=1))
    ti = _retry(session, ti, T0 + timedelta(minutes=10), T0 + timedelta(minutes=11), "failed")
    _retry(session, ti, None, None, "queued")  # the third try is queued, not started

    run = _run(session)
    assert run.from_history and run.tries == 3 and run.state == "queued"
    assert (run.started, run.ended) == (T0 + timedelta(minutes=10), T0 + timedelta(minutes=11))


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("skipped", "never started (state skipped): it wrote no stream"),
        ("upstream_failed", "never started (state upstream_failed): it wrote no stream"),
        ("scheduled", "has not started yet (state scheduled): it has written no stream yet"),
        (None, "has not started yet (state none): it has written no stream yet"),
    ],
)
def test_a_task_instance_that_never_started_says_so_and_has_no_window(session, state, said):
    _ti(session, state=state)
    run = _run(session)
    assert (run.started, run.ended, run.tries) == (None, None, 1)
    assert run.never_ran() == said


def test_the_stream_page_s_window_is_the_latest_try_s_and_none_for_a_task_that_never_ran(session):
    from airflow_kafka_events.streams.descriptor import stream_id
    from airflow_kafka_events.ui.views.streams import SPAN_AFTER, SPAN_BEFORE, _written_span

    ti = _ti(session, map_index=4, state="failed", start_date=T0, end_date=T0 + timedelta(minutes=1))
    _retry(session, ti, T0 + timedelta(days=2), T0 + timedelta(days=2, minutes=3), "success")
    span, info, why = _written_span(session, stream_id(DAG, RUN, TASK, 4))
    assert why is None and info is not None and (info["tries"], info["state"]) == (2, "success")
    assert (span.since, span.until) == (
        T0 + timedelta(days=2) - SPAN_BEFORE,
        T0 + timedelta(days=2, minutes=3) + SPAN_AFTER,
    )

    _ti(session, task_id="skipped_one", state="skipped")
    span, info, why = _written_span(session, stream_id(DAG, RUN, "skipped_one"))
    assert span is None and info is not None and info["started"] is None
    assert why == (
        f"task instance {DAG} / {RUN} / skipped_one (map index -1) never started (state skipped): it wrote "
        f"no stream; its stream {stream_id(DAG, RUN, 'skipped_one')!r} has no envelope"
    )
    assert _written_span(session, stream_id(DAG, RUN, "unknown")) == (None, None, None)


def test_watchers_are_sources_of_their_own_dead_letter_topic_in_the_replay_targets(session):
    """The rows Airflow writes for asset watchers (a trigger with its kwargs, the watcher row): only
    this package's watchers count, and each names its topics as sources of its ``dlq_topic``."""
    from airflow.models.asset import AssetModel, AssetWatcherModel
    from airflow.models.trigger import Trigger

    from airflow_kafka_events.ui.airflow_state import WATCHER_CLASSPATH, watched_sources
    from airflow_kafka_events.ui.inspection.errors import ReplayTargetRefusedError
    from airflow_kafka_events.ui.inspection.replay_targets import ReplayTargets

    asset = AssetModel(name="orders", uri="kafka-events://orders", group="asset", extra={})
    session.add(asset)
    session.flush()
    ours = Trigger(
        classpath=WATCHER_CLASSPATH, kwargs={"topics": ["orders", "orders.eu"], "dlq_topic": "o.dlq"}
    )
    no_dlq = Trigger(classpath=WATCHER_CLASSPATH, kwargs={"topics": ["logs"], "dlq_topic": None})
    other = Trigger(classpath="some.other.Trigger", kwargs={"topics": ["payments"], "dlq_topic": "o.dlq"})
    session.add_all([ours, no_dlq, other])
    session.flush()
    for name, trigger in (("orders_watch", ours), ("logs_watch", no_dlq), ("other_watch", other)):
        session.add(AssetWatcherModel(name=name, asset_id=asset.id, trigger_id=trigger.id))
    session.commit()

    sources = sorted(watched_sources(session), key=lambda w: w.name)
    assert [(w.name, tuple(w.topics), w.dlq_topic) for w in sources] == [
        ("logs_watch", ("logs",), None),
        ("orders_watch", ("orders", "orders.eu"), "o.dlq"),
    ]
    targets = ReplayTargets.of(
        "o.dlq", configured_dlq_topic="airflow.kafka-events.dlq", asset_events_topic="a", watchers=sources
    )
    assert targets.target_for("orders.eu") == "orders.eu"
    for unknown in ("payments", "logs", "a"):
        with pytest.raises(ReplayTargetRefusedError):
            targets.target_for(unknown)
