"""Streaming triggers through a real Airflow (scheduler, worker, triggerer, dag-processor) and Kafka.

(a) a producer defers ONCE while its trigger writes 100 pages; a consumer with no dependency
    on it handles pages before the producer finished (proven by a gate file, not by timing);
(b) a classic ``execute_complete(context, event)`` operator works unchanged through the shim;
    a ``start_from_trigger`` fetch-only task and a ``@task.stream_consumer`` reading it;
(c) a handler failing mid-stream: the retry resumes at the checkpoint, each page takes effect once;
(d) a DAG file with a lambda in trigger kwargs fails to parse, naming the argument.

On the production topology (a Celery worker per queue) (a)'s producer and consumer run on different
workers, and the triggerer's and that worker's metrics reach the test run's StatsD server.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC
from harness.airflow_stack import CELERY_WORKERS, AirflowStack
from harness.statsd_server import StatsdServer

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _events(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> list[str]:
    return [row["event"] for row in stack.state_change_log(dag_id, run_id=run_id, task_id=task_id)]


def _run(stack: AirflowStack, dag_id: str, directory: Path, timeout: float = 240) -> tuple[str, float]:
    started = time.monotonic()
    run_id = stack.trigger_dag(dag_id, conf={"dir": str(directory)})
    state = stack.wait_for_dag_run(dag_id, run_id, timeout=timeout)
    elapsed = time.monotonic() - started
    assert state == "success", (
        f"{dag_id} run {run_id} is {state}; task instances: "
        f"{[(t['task_id'], t['state']) for t in stack.task_instances(dag_id, run_id)]}\n"
        f"files: { {p.name: p.read_text()[:300] for p in directory.iterdir()} }\n{stack.diagnostics()}"
    )
    print(f"\n{dag_id} run took {elapsed:.1f}s")
    return run_id, elapsed


# --------------------------------------------------------------------------- (a)
@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_consumer_handles_pages_while_the_producer_that_deferred_once_is_still_writing(
    stack: AirflowStack, run_dir: Path, statsd: StatsdServer
):
    dag_id = "e2e_stream_live"
    directory = run_dir
    run_id, _ = _run(stack, dag_id, directory)

    # the producer deferred exactly once for its 100 pages and resumed once
    events = _events(stack, dag_id, run_id, "produce")
    assert events.count("deferred") == 1, events
    assert events[-1] == "success", events
    tries = stack.task_instance_tries(dag_id, run_id, "produce")
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "success")], tries
    assert _lines(directory / "producer.txt") == [str(p) for p in range(100)]
    summary = stack.xcom(dag_id, run_id, "produce")
    assert summary["pages"] == 100 and summary["finished"] is True, summary
    assert summary["trigger_run_id"] == stream_id(dag_id, run_id, "produce"), summary

    # page 50 was not written before the gate existed, and the consumer created the gate
    # after handling page >= 10 and < 50: it handled pages before the producer finished
    gate_page = int((directory / "gate").read_text())
    assert 10 <= gate_page < 50, gate_page
    assert _lines(directory / "consumer.txt") == [str(p) for p in range(100)]  # in order, once each
    consumed = stack.xcom(dag_id, run_id, "consume")
    assert consumed["pages"] == 100 and consumed["attempt"] == 0 and consumed["finished"], consumed
    assert consumed["trigger_run_id"] == summary["trigger_run_id"]
    consumer_events = _events(stack, dag_id, run_id, "consume")
    assert "deferred" not in consumer_events and consumer_events[-1] == "success", consumer_events
    if stack.topology == "production":
        _assert_on_two_workers_with_metrics(stack, dag_id, run_id, statsd)


def _assert_on_two_workers_with_metrics(
    stack: AirflowStack, dag_id: str, run_id: str, statsd: StatsdServer
) -> None:
    """Producer on worker ``w1``, consumer on ``w2`` (their queues), by the hostnames Airflow recorded;
    the trigger's pages written came from a triggerer, the pages handled from the ``w2`` worker."""
    hosts = {task: stack.task_instance(dag_id, run_id, task)["hostname"] for task in ("produce", "consume")}
    assert hosts["produce"] != hosts["consume"], hosts
    assert hosts["produce"].startswith(f"{CELERY_WORKERS['worker-1'][0]}@"), hosts
    assert hosts["consume"].startswith(f"{CELERY_WORKERS['worker-2'][0]}@"), hosts

    topic = rf"topic={DEFAULT_TOPIC.replace('.', '[.]')}"
    # pages are counted as their receipts come in, in batches: the counts add up to the stream's 100
    # pages at least (the stack's earlier streams of the default topic count too)
    written = rf"airflow\.kafka_events\.stream\.pages_written,{topic}:\d+\|c"
    handled = rf"airflow\.kafka_events\.stream\.pages_handled,{topic}:\d+\|c"
    statsd.wait_for_total(written, 100, timeout=30, at_least=True)
    statsd.wait_for(handled, timeout=30)
    writers = statsd.reporters(written, stack.component_of)
    handlers = statsd.reporters(handled, stack.component_of)
    triggerers = {"triggerer", "triggerer-2"}  # None: a sender that is gone (e.g. a killed triggerer)
    assert writers & triggerers and writers <= {*triggerers, None}, writers
    assert "worker-2" in handlers, handlers


# --------------------------------------------------------------------------- (b)
def test_single_event_operator_works_through_the_shim_and_fetch_only_streams_are_consumed(
    stack: AirflowStack, run_dir: Path
):
    dag_id = "e2e_stream_legacy"
    directory = run_dir
    run_id, _ = _run(stack, dag_id, directory)

    legacy = [json.loads(line) for line in _lines(directory / "legacy.txt")]
    assert legacy == [{"page": p, "pages": 12, "source": "legacy"} for p in range(12)]  # once each, in order
    assert stack.xcom(dag_id, run_id, "legacy") == 11  # what the last execute_complete returned
    events = _events(stack, dag_id, run_id, "legacy")
    assert events.count("deferred") == 1 and events[-1] == "success", events

    # start_from_trigger: the triggerer wrote the pages and ended the task with the descriptor
    descriptor = stack.xcom(dag_id, run_id, "fetch_only")
    assert descriptor["trigger_run_id"] == stream_id(dag_id, run_id, "fetch_only"), descriptor
    assert descriptor["count"] == 7 and descriptor["error"] is None and descriptor["topic"] == DEFAULT_TOPIC
    assert _lines(directory / "decorated.txt") == [str(p) for p in range(7)]
    decorated = stack.xcom(dag_id, run_id, "consume_fetched")
    assert decorated["pages"] == 7 and decorated["finished"] is True, decorated


# --------------------------------------------------------------------------- (c)
def test_a_handler_failing_mid_stream_is_retried_from_the_checkpoint_each_page_once(
    stack: AirflowStack, run_dir: Path
):
    dag_id = "e2e_stream_retry"
    directory = run_dir
    run_id, _ = _run(stack, dag_id, directory)

    assert (directory / "failed-once").read_text().startswith("try 1 failed on pages"), (
        directory / "failed-once"
    ).read_text()
    assert _lines(directory / "effects.txt") == [str(p) for p in range(30)]  # in order, once each
    tries = stack.task_instance_tries(dag_id, run_id, "produce")
    assert [t["try_number"] for t in tries] == [1, 2], tries
    assert tries[-1]["state"] == "success", tries
    events = _events(stack, dag_id, run_id, "produce")
    assert "up_for_retry" in events and events[-1] == "success", events
    summary = stack.xcom(dag_id, run_id, "produce")
    assert summary["pages"] == 30 and 0 < summary["pages_this_try"] < 30, summary  # resumed, not restarted
    assert summary["attempt"] == 0, summary  # the retry did not fetch the stream again


# --------------------------------------------------------------------------- (d)
def test_a_lambda_in_trigger_kwargs_is_an_import_error_naming_the_argument(stack: AirflowStack):
    name = "e2e_stream_bad_lambda.py"
    target = stack.dags_folder / name
    shutil.copy2(HERE / "bad_dags" / name, target)
    try:

        def reported() -> dict | None:
            for error in stack.import_errors():
                if error["filename"].endswith(name):
                    return error
            return None

        error = stack.wait_for(
            reported, timeout=120, description=f"an import error for {name}", components=("dag-processor",)
        )
        trace = error["stack_trace"]
        assert "TriggerSerializationError" in trace, trace
        assert "extra['page_filter']" in trace and "a lambda" in trace, trace
        assert stack.api("GET", "dags/e2e_stream_bad_lambda").status_code == 404
    finally:
        target.unlink(missing_ok=True)
