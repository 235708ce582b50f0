"""Python's collector threshold while a consumer task reads a stream."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.operator import IterableOperator
from airflow_kafka_events.iteration.sources import StreamItemSource, from_stream
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.collector import (
    DEFAULT_GC_THRESHOLD,
    collections_paused,
    resolve_gc_threshold,
    young_collections_every,
)
from airflow_kafka_events.streams.consuming.consumption import drive_stream
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from unit.operators.fakes import FakeReader, context, stream

pytestmark = pytest.mark.unit

RUN = stream_id("dag", "manual__1", "produce")


@pytest.fixture(autouse=True)
def _python_default_threshold() -> Iterator[None]:
    before = gc.get_threshold()
    enabled = gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    gc.set_threshold(*before)
    if not enabled:
        gc.disable()


def test_the_threshold_is_raised_inside_and_put_back_after():
    with young_collections_every(50_000):
        assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_it_is_put_back_when_the_block_raises():
    with pytest.raises(RuntimeError), young_collections_every(50_000):
        raise RuntimeError("handler failed")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("allocations", [0, 500, 700])
def test_it_is_never_lowered_and_zero_leaves_it(allocations):
    with young_collections_every(allocations):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_collector_turned_off_stays_off():
    gc.disable()
    with young_collections_every(50_000):
        assert not gc.isenabled() and gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(0, 10, 10)  # a first threshold of 0 turns collections off too
    gc.enable()
    with young_collections_every(50_000):
        assert gc.get_threshold() == (0, 10, 10)


def test_a_threshold_set_inside_the_block_is_left_as_set():
    with young_collections_every(50_000):
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)


def test_the_setting_defaults_to_50000_and_refuses_bad_values():
    assert resolve_gc_threshold() == DEFAULT_GC_THRESHOLD == 50_000
    assert resolve_gc_threshold("0") == 0 and resolve_gc_threshold(" 20000 ") == 20_000
    for bad in ("-1", "many", "1.5", True):
        with pytest.raises(ConfigurationError, match="stream_read_gc_threshold"):
            resolve_gc_threshold(bad)


def test_the_setting_is_read_from_the_airflow_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_READ_GC_THRESHOLD", "12345")
    assert resolve_gc_threshold() == 12_345
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_READ_GC_THRESHOLD", "lots")
    with pytest.raises(ConfigurationError, match="stream_read_gc_threshold must be a whole number"):
        resolve_gc_threshold()


def test_drive_stream_reads_and_hands_over_with_the_threshold_raised():
    seen: list[tuple[int, int]] = []

    def handle(events: list[Any]) -> None:
        seen.append((events[0].sequence_index, gc.get_threshold()[0]))

    summary, _ = drive_stream(
        FakeReader(stream(RUN, 4), max_events=2),
        trigger_run_id=RUN,
        topic="t",
        handle_batch=handle,
        gc_threshold=30_000,
    )
    assert summary.finished and seen == [(0, 30_000), (2, 30_000)]
    assert gc.get_threshold() == (700, 10, 10)


class _Consumer(StreamConsumerOperator):
    def __init__(self, *, envelopes: list, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.envelopes = envelopes

    def get_settings(self):
        return None

    def starting_point(self, settings, trigger_run_id, not_before=None):
        return Checkpoint()

    def open_reader(self, settings, trigger_run_id, checkpoint, group_id):
        return FakeReader(self.envelopes, checkpoint=checkpoint, max_events=self.read.max_events)


THRESHOLDS: list[int] = []


def record_threshold(events: Any, context: Any) -> None:
    THRESHOLDS.append(gc.get_threshold()[0])


def test_the_consumer_operator_hands_batches_over_with_the_configured_threshold(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_READ_GC_THRESHOLD", "40000")
    THRESHOLDS.clear()
    op = _Consumer(
        envelopes=stream(RUN, 3),
        task_id="consume",
        stream=StreamRef("produce"),
        handler=f"{__name__}.record_threshold",
        max_events=2,
    )
    summary = op.execute(context(task_id="consume", store=DictStore()))
    assert summary["pages"] == 3 and THRESHOLDS == [40_000, 40_000]
    assert gc.get_threshold() == (700, 10, 10)


class _StreamIteration(IterableOperator):
    """``@task.iterable`` over a stream, the stream's pages from :class:`FakeReader`."""

    def _open_source(self, context: Any, resumption: Any) -> StreamItemSource:
        return StreamItemSource(
            FakeReader(stream(RUN, 3), max_events=2),
            name="page",
            spec=from_stream("produce"),
            trigger_run_id=RUN,
        )


def test_an_iteration_over_a_stream_runs_its_items_with_the_configured_threshold(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_READ_GC_THRESHOLD", "40000")
    seen: list[int] = []

    def work(page: Any) -> None:
        seen.append(gc.get_threshold()[0])

    op = _StreamIteration(
        task_id="iterate",
        python_callable=work,
        iterate_kwargs={"page": from_stream("produce")},
        results_stream=False,
    )
    summary = op.execute(context(task_id="iterate", store=DictStore()))
    assert summary["succeeded"] == 3 and seen == [40_000] * 3
    assert gc.get_threshold() == (700, 10, 10)


def test_an_iteration_over_a_list_leaves_the_threshold(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_READ_GC_THRESHOLD", "40000")
    seen: list[int] = []

    def work(n: int) -> None:
        seen.append(gc.get_threshold()[0])

    op = IterableOperator(
        task_id="iterate", python_callable=work, iterate_kwargs={"n": [1, 2]}, results_stream=False
    )
    assert op.execute(context(task_id="iterate", store=DictStore()))["succeeded"] == 2
    assert seen == [700, 700]


# ====================================================================== a pause around a decode
def test_a_pause_turns_the_collector_off_inside_and_on_after():
    with collections_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_threshold() == (700, 10, 10)


def test_a_pause_turns_it_on_again_when_the_block_raises():
    with pytest.raises(RuntimeError), collections_paused():
        raise RuntimeError("decode failed")
    assert gc.isenabled()


def test_a_pause_leaves_a_collector_that_was_off_off():
    gc.disable()
    with collections_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_pauses_end_with_the_collector_on():
    with collections_paused():
        with collections_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_no_collection_starts_inside_a_pause_and_the_one_due_starts_after():
    generations: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.collect()
    gc.callbacks.append(note)
    try:
        with collections_paused():
            held = [[i] for i in range(5_000)]  # 7 times the first threshold, all alive
            assert generations == []
        more = [[i] for i in range(10)]  # the first allocations after the pause
    finally:
        gc.callbacks.remove(note)
    assert generations[:1] == [0]
    assert len(held) + len(more) == 5_010
