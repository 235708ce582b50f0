"""Consumers that do not hold a worker slot while they wait, through a real Airflow.

A stack of its own on the e2e topology (``e2e_topology``; in CI PostgreSQL, two triggerers and two
Celery workers of concurrency 1) with ``[core] parallelism = 2`` (the shared one has 4), so that
exactly two worker slots exist: 4 producer/consumer
pairs whose consumers are queued first (higher ``priority_weight``) take both slots. In-worker
consumers would keep the producers from ever starting (all four failed with
``StreamNotStartedError``); deferrable ones give their slots back while idle: every pair
completes, each consumer handles its 60 pages strictly in order and each page once, and the
consumer that fails its first try on page 30 resumes at its checkpoint.

With the defaults (no ``deferrable`` argument, ``default_deferrable`` off) the same case
succeeds too: ``StreamConsumerOperator``, ``@task.stream_consumer`` and ``@task.iterable``
consumers give their slots back by a reschedule (see ``slots_dags/e2e_slots_defaults.py``); never
more than two tasks run at once, and on the production topology they ran on both Celery workers.

On the same stack: an ``@task.iterable`` task over a stream whose producer pauses defers
while idle and goes on after the pause (order kept, each item once, its retry resumed at the
checkpoint); and a deferrable consumer's ``start_timeout`` stands still while its producer
waits for an upstream task (see ``slots_dags/e2e_slots_iterate.py``).
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest

from harness.airflow_stack import CELERY_WORKERS, AirflowStack

pytestmark = pytest.mark.e2e

DAGS = Path(__file__).parent / "slots_dags"
DAG_ID = "e2e_slots_consumers_first"
ITERATE_DAG = "e2e_slots_iterate"
START_CLOCK_DAG = "e2e_slots_start_clock"
DEFAULTS_DAG = "e2e_slots_defaults"
PAIRS = 4
PAGES = 60
SLOTS = 2


@pytest.fixture(scope="module")
def slots_stack(tmp_path_factory, kafka_bootstrap, trigger_events_topic, e2e_topology):
    dags = tmp_path_factory.mktemp("slots-dags")
    for dag_file in DAGS.glob("*.py"):
        shutil.copy2(dag_file, dags / dag_file.name)
    env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
        ),
    }
    # 2 slots: [core] parallelism = 2 and, on the production topology, one task process per Celery
    # worker (2 workers x concurrency 1)
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("slots-home"),
        dags_folder=dags,
        extra_env=env,
        parallelism=SLOTS,
        topology=e2e_topology,
        worker_concurrency=SLOTS // len(CELERY_WORKERS),
    )
    try:
        stack.start(timeout=400.0, dag_ids=[DAG_ID, ITERATE_DAG, START_CLOCK_DAG, DEFAULTS_DAG])
        yield stack
    finally:
        stack.stop()


def _lines(path: Path) -> list[int]:
    return [int(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_consumers_queued_first_on_two_slots_let_every_producer_run(
    slots_stack: AirflowStack, tmp_path: Path
):
    stack = slots_stack
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    started = time.monotonic()
    run_id = stack.trigger_dag(DAG_ID, conf={"dir": str(directory)})
    state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=300)
    elapsed = time.monotonic() - started
    tis = {(t["task_id"], t["try_number"]): t["state"] for t in stack.task_instances(DAG_ID, run_id)}
    assert state == "success", f"run {run_id} is {state}: {tis}\n{stack.diagnostics()}"

    # the consumers were queued first: both slots went to consumers before any producer ran,
    # and every consumer gave its slot back (deferred) at least once
    log = stack.state_change_log(DAG_ID, run_id=run_id)
    running = [row["task_id"] for row in log if row["event"] == "running"]
    assert all(task.startswith("consume_") for task in running[:2]), running
    deferred = {row["task_id"] for row in log if row["event"] == "deferred"}
    assert {f"consume_{i}" for i in range(PAIRS)} <= deferred, (deferred, running)
    print(f"\n{DAG_ID}: {PAIRS} pairs on 2 slots in {elapsed:.1f}s")
    deferrals = {}
    for i in range(PAIRS):
        task_id = f"consume_{i}"
        assert _lines(directory / f"{task_id}.txt") == list(range(PAGES)), task_id  # in order, each once
        summary = stack.xcom(DAG_ID, run_id, task_id)
        assert summary["pages"] == PAGES and summary["finished"], summary
        deferrals[task_id] = summary["deferrals"]
    print(f"defer cycles per consumer (last try): {deferrals}; state changes logged: {len(log)}")
    print(f"seconds from deferred to running again: {_slot_back_gaps(log, 'deferred')}")
    # at least the two consumers that took the slots first had to give them back
    assert sum(1 for n in deferrals.values() if n >= 1) >= 2, deferrals
    # consume_0 failed its first try on page 30 and the retry resumed at its checkpoint
    retried = stack.xcom(DAG_ID, run_id, "consume_0")
    assert retried["pages_this_try"] < PAGES, retried
    assert stack.task_instance(DAG_ID, run_id, "consume_0")["try_number"] == 2


def test_with_the_defaults_consumers_queued_first_reschedule_and_every_pair_completes(
    slots_stack: AirflowStack, tmp_path: Path
):
    stack = slots_stack
    directory = _run_dir(tmp_path)
    started = time.monotonic()
    run_id = stack.trigger_dag(DEFAULTS_DAG, conf={"dir": str(directory)})
    state = stack.wait_for_dag_run(DEFAULTS_DAG, run_id, timeout=300)
    elapsed = time.monotonic() - started
    tis = {(t["task_id"], t["try_number"]): t["state"] for t in stack.task_instances(DEFAULTS_DAG, run_id)}
    assert state == "success", f"run {run_id} is {state}: {tis}\n{stack.diagnostics()}"

    log = stack.state_change_log(DEFAULTS_DAG, run_id=run_id)
    running = [row["task_id"] for row in log if row["event"] == "running"]
    assert all(task.startswith("consume_") for task in running[:2]), running
    # only two slots existed: never more than two task processes ran at once
    assert _most_running_at_once(log) <= SLOTS, log
    if stack.topology == "production":
        # every task ran on a Celery worker; both workers' single slots were used
        hosts = {
            t["task_id"]: str(t["hostname"]).split("@")[0] for t in stack.task_instances(DEFAULTS_DAG, run_id)
        }
        assert set(hosts.values()) == {hostname for hostname, _ in CELERY_WORKERS.values()}, hosts
    # no triggerer was used by a consumer: they gave their slots back by rescheduling
    consumers = {f"consume_{i}" for i in range(PAIRS)}
    assert not {row["task_id"] for row in log if row["event"] == "deferred"} & consumers, log
    rescheduled = {row["task_id"] for row in log if row["event"] == "up_for_reschedule"}
    assert {task for task in running[:2]} <= rescheduled, (rescheduled, running)
    reschedules = {}
    for i in range(PAIRS):
        task_id = f"consume_{i}"
        assert _lines(directory / f"{task_id}.txt") == list(range(PAGES)), task_id  # in order, each once
        summary = stack.xcom(DEFAULTS_DAG, run_id, task_id)
        assert "deferrals" not in summary, summary
        reschedules[task_id] = summary["reschedules"]
        assert stack.task_instance(DEFAULTS_DAG, run_id, task_id)["try_number"] == 1
    assert stack.xcom(DEFAULTS_DAG, run_id, "consume_2")["succeeded"] == PAGES
    for task_id in ("consume_0", "consume_1", "consume_3"):
        assert stack.xcom(DEFAULTS_DAG, run_id, task_id)["finished"], task_id
    print(f"\n{DEFAULTS_DAG}: {PAIRS} pairs on 2 slots with the defaults in {elapsed:.1f}s; {reschedules}")
    print(f"seconds from up_for_reschedule to running again: {_slot_back_gaps(log, 'up_for_reschedule')}")


def _most_running_at_once(log: list[dict]) -> int:
    """The most task instances in ``running`` at one time, from the state-change log (oldest first):
    a task runs from its ``running`` row to its next row of a state it leaves its worker in."""
    most, now = 0, set()
    for row in log:
        key = (row["task_id"], row.get("map_index"))
        if row["event"] == "running":
            now.add(key)
            most = max(most, len(now))
        elif row["event"] in _LEFT_ITS_WORKER:
            now.discard(key)
    return most


_LEFT_ITS_WORKER = {"success", "failed", "up_for_retry", "up_for_reschedule", "deferred", "skipped"}


def _slot_back_gaps(log: list[dict], event: str) -> list[float]:
    """Seconds from each ``event`` row of a task (its slot given back) to its next ``running`` row."""
    gaps, gave_back = [], {}
    for row in log:
        if row["event"] == event:
            gave_back[row["task_id"]] = _parse(row["dttm"])
        elif row["event"] == "running" and row["task_id"] in gave_back:
            gaps.append(round((_parse(row["dttm"]) - gave_back.pop(row["task_id"])).total_seconds(), 1))
    return sorted(gaps)


def _text_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _run_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


def test_an_iteration_over_a_paused_stream_defers_and_goes_on_in_order_each_item_once(
    slots_stack: AirflowStack, tmp_path: Path
):
    stack = slots_stack
    directory = _run_dir(tmp_path)
    started = time.monotonic()
    run_id = stack.trigger_dag(ITERATE_DAG, conf={"dir": str(directory)})
    # the producer pauses before page 5: the iteration handles pages 0..4, then gives its slot back
    handled = directory / "handled.txt"

    def paused_and_deferred() -> bool:
        if len(_text_lines(handled)) < 5:
            return False
        return stack.task_instance(ITERATE_DAG, run_id, "handle")["state"] == "deferred"

    stack.wait_for(paused_and_deferred, timeout=180, description="handle to defer after page 4")
    assert _text_lines(handled) == [f"1 {page}" for page in range(5)]
    (directory / "gate").write_text("open")
    state = stack.wait_for_dag_run(ITERATE_DAG, run_id, timeout=240)
    elapsed = time.monotonic() - started
    assert state == "success", f"run {run_id} is {state}\n{stack.diagnostics()}"

    lines = [tuple(map(int, line.split())) for line in handled.read_text().splitlines()]
    # try 1: pages 0..7 in order (page 8 failed it, after the deferral); try 2: 8..11 only
    assert lines == [(1, page) for page in range(8)] + [(2, page) for page in range(8, 12)], lines
    log = stack.state_change_log(ITERATE_DAG, run_id=run_id, task_id="handle")
    deferred_tries = {row["try_number"] for row in log if row["event"] == "deferred"}
    assert 1 in deferred_tries, log
    summary = stack.xcom(ITERATE_DAG, run_id, "handle")
    assert summary["succeeded"] == 12 and summary["skipped"] == 8 and summary["resumed"], summary
    assert summary["results"]["complete"] and summary["results"]["results"] == 12, summary
    print(f"\n{ITERATE_DAG}: {elapsed:.1f}s; deferred in tries {sorted(deferred_tries)}")


def test_the_start_timeout_stands_still_while_the_producer_cannot_start(
    slots_stack: AirflowStack, tmp_path: Path
):
    stack = slots_stack
    directory = _run_dir(tmp_path)
    run_id = stack.trigger_dag(START_CLOCK_DAG, conf={"dir": str(directory)})
    state = stack.wait_for_dag_run(START_CLOCK_DAG, run_id, timeout=240)
    assert state == "success", f"run {run_id} is {state}\n{stack.diagnostics()}"
    consume = stack.task_instance(START_CLOCK_DAG, run_id, "consume")
    assert consume["try_number"] == 1, consume
    # the consumer waited for the stream longer than its start_timeout (15 s) and did not fail:
    # the producer was held back by its upstream (35 s) and the clock stood still meanwhile
    log = stack.state_change_log(START_CLOCK_DAG, run_id=run_id, events=["running"])
    first_running = {}
    for row in log:
        first_running.setdefault(row["task_id"], _parse(row["dttm"]))
    waited = (first_running["produce"] - first_running["consume"]).total_seconds()
    assert waited > 15, (waited, log)
    assert _lines(directory / "consume.txt") == list(range(10))
    print(f"\n{START_CLOCK_DAG}: the consumer waited {waited:.1f}s for its producer to start")


def _parse(value: str | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
