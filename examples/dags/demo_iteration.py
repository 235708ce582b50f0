"""Demo: task iteration (AIP-104 semantics) — many items in ONE task instance, or in n.

``numbers`` returns 5,000 items.  ``square`` iterates all of them inside one task instance
(``.iterate()``: no task instance per item, no ``max_map_length`` cap), 32 at a time, checkpointing
progress in the task state store and writing each result to its Kafka results stream;
``square_batched`` spreads the same items over 3 task instances (``.batch(size=3)``, item ordinal
% 3); ``check`` reads ``square``'s results stream lazily — while it is being written, no DAG edge.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from airflow_kafka_events.iteration import results_of

ITEMS = 5_000


@task
def numbers() -> list[int]:
    return list(range(ITEMS))


@task.iterable(concurrency=32, checkpoint_every=1_000)
async def square(n: int) -> int:
    return n * n


@task.iterable(concurrency=32, results_stream=False)
async def square_batched(n: int) -> int:
    return n * n


@task.iterable(results_stream=False, stream_max_wait=0.1)
def check(value: int) -> None:
    """Runs per result of ``square`` as the results arrive."""
    if value < 0:
        raise ValueError(f"a square cannot be negative: {value}")


@dag(
    dag_id="demo_iteration",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["demo", "iteration"],
)
def demo_iteration() -> None:
    items = numbers()
    square.iterate(n=items)
    square_batched.batch(size=3).iterate(n=items)
    check.iterate(value=results_of("square"))


demo_iteration()
