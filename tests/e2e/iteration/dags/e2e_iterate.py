"""End-to-end DAGs of ``@task.iterable``.  Files go to the ``dir`` of the run's conf.

``e2e_iterate_list``
    ``make`` returns 200 numbers.  ``record`` iterates them in ONE task instance;
    ``record_batched`` in three (``batch(size=3)``), each writing its shard's numbers;
    ``double_again`` iterates ``record``'s results stream while ``record`` writes it (no DAG
    edge); ``record_pages`` iterates the pages a ``start_from_trigger`` producer (the
    triggerer) writes to Kafka.

``e2e_iterate_retry``
    ``work`` iterates 200 numbers one at a time, checkpointing every 50 completed items.
    On its first try (no marker file yet) items after 100 are slowed down, so the checkpoint
    lags behind them; item 121 waits until the results of items 0..120 are in Kafka and the
    stored checkpoint is final, writes down its watermark, and kills its worker process
    (``os._exit``).  The retry must run items 121..199 only: the items past the checkpoint
    are found in the results stream.  (A save
    covers the items completed when it runs, and the next one comes 50 completions later:
    with at most 121 completions, a stored watermark above 121 - 50 is the last one.)
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_kafka_events.iteration.sources import from_stream, results_of
from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

ITEMS = 200
PAGES = 30
DIE_AT = 121
CHECKPOINT_EVERY = 50


def append(path: str, line: Any) -> None:
    """One small O_APPEND write: lines of concurrent writers never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@task
def make() -> list[int]:
    return list(range(ITEMS))


with DAG(
    dag_id="e2e_iterate_list",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "iteration"],
):

    @task.iterable(concurrency=8, checkpoint_every=50)
    def record(n: int, dag_run: Any = None) -> int:
        append(f"{dag_run.conf['dir']}/single.txt", n)
        return n * 2

    @task.iterable(concurrency=4)
    def record_batched(n: int, dag_run: Any = None, iteration_item: Any = None) -> int:
        append(f"{dag_run.conf['dir']}/batch-{iteration_item.shard}.txt", n)
        return n

    @task.iterable(concurrency=2, results_stream=False, stream_max_wait=0.1, stream_start_timeout=300)
    def double_again(doubled: int, dag_run: Any = None) -> None:
        append(f"{dag_run.conf['dir']}/chained.txt", doubled * 2)

    @task.iterable(results_stream=False, stream_max_wait=0.1, stream_start_timeout=300)
    def record_pages(page: dict[str, Any], dag_run: Any = None) -> None:
        append(f"{dag_run.conf['dir']}/pages.txt", page["page"])

    numbers = make()
    record.iterate(n=numbers)
    record_batched.batch(size=3).iterate(n=numbers)
    double_again.iterate(doubled=results_of("record"))
    StreamingTriggerOperator(
        task_id="fetch",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": PAGES, "delay": 0.05},
    )
    record_pages.iterate(page=from_stream("fetch"))


def _wait_before_dying(ti: Any, task_state_store: Any) -> int:
    """Until results 0..DIE_AT-1 are in Kafka and the stored checkpoint is final; its watermark."""
    from airflow_kafka_events.provider.hook import KafkaEventsHook
    from airflow_kafka_events.streams.descriptor import stream_id
    from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC
    from airflow_kafka_events.streams.progress import find_stream_progress

    settings = KafkaEventsHook().get_settings()
    run = stream_id(ti.dag_id, ti.run_id, ti.task_id, -1)
    deadline = time.monotonic() + 60
    progress: Any = None
    saved: Any = None
    while time.monotonic() < deadline:
        progress = find_stream_progress(settings, DEFAULT_TOPIC, run, timeout=10)
        saved = task_state_store.get("iteration:progress") or {}
        if (
            progress is not None
            and progress.sequence_index >= DIE_AT - 1
            and saved.get("watermark", 0) > DIE_AT - CHECKPOINT_EVERY
        ):
            return int(saved["watermark"])
        time.sleep(0.1)
    raise TimeoutError(f"results or checkpoint did not show up: results {progress}, checkpoint {saved}")


with DAG(
    dag_id="e2e_iterate_retry",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "iteration"],
):

    @task.iterable(
        concurrency=1,
        checkpoint_every=CHECKPOINT_EVERY,
        checkpoint_interval=3600,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )
    def work(n: int, ti: Any = None, dag_run: Any = None, task_state_store: Any = None) -> int:
        directory = dag_run.conf["dir"]
        marker = f"{directory}/died"
        first_try = not os.path.exists(marker)
        if first_try and n > 100:
            time.sleep(0.02)  # the last checkpoint of this try is stored before these complete
        if n == DIE_AT and first_try:
            watermark = _wait_before_dying(ti, task_state_store)
            with open(marker, "w", encoding="utf-8") as out:
                out.write(f"{ti.try_number} {watermark}\n")
            os._exit(1)  # the worker process dies mid-iteration: no cleanup, no final checkpoint
        append(f"{directory}/effects.txt", n)
        return n

    work.iterate(n=make())
