"""The default idempotency key recipe and the SeenKeys helper."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_events.assets.emit import source_from_dag_context, source_from_task_context
from airflow_kafka_events.assets.idempotency import (
    IDEMPOTENCY_RECIPE,
    SeenKeys,
    canonical_json,
    default_idempotency_key,
    source_identity,
)
from airflow_kafka_events.envelopes.model import EventSource, SourceKind
from unit.assets.sdk_contexts import dag_callback_context, task_context

pytestmark = pytest.mark.unit

DATE = datetime(2026, 1, 31, tzinfo=timezone.utc)


def _key(source=None, **changes):
    fields = {
        "asset_uri": "s3://lake/orders",
        "partition_key": "batch-0042",
        "partition_date": DATE,
        "extra": {"rows": 10000, "batch_id": "0042"},
        "source": source,
    }
    fields.update(changes)
    return default_idempotency_key(**fields)


def test_the_documented_recipe():
    source = EventSource(SourceKind.TASK, dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=2)
    material = [
        "airflow-kafka-events/asset-event/v1",
        "s3://lake/orders",
        "batch-0042",
        "2026-01-31T00:00:00.000000+00:00",
        {"batch_id": "0042", "rows": 10000},
        {"dag_id": "d", "kind": "task", "map_index": -1, "run_id": "r", "task_id": "t"},
    ]
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert _key(source) == hashlib.sha256(text.encode()).hexdigest()
    assert IDEMPOTENCY_RECIPE == material[0]
    assert len(_key(source)) == 64


def test_a_retried_task_gets_the_same_key():
    first = source_from_task_context(task_context(try_number=1))
    retry = source_from_task_context(task_context(try_number=3))
    assert (first.try_number, retry.try_number) == (1, 3)
    assert _key(first) == _key(retry)


@pytest.mark.parametrize(
    "context_change",
    [
        {"dag_id": "other_dag"},
        {"run_id": "manual__other"},
        {"task_id": "other_task"},
        {"map_index": 3},
    ],
)
def test_the_key_depends_on_the_source_identity(context_change):
    base = source_from_task_context(task_context())
    changed = source_from_task_context(task_context(**context_change))
    assert _key(base) != _key(changed)


def test_the_key_depends_on_the_source_kind():
    context = task_context()
    task = source_from_task_context(context)
    callback = source_from_task_context(context, kind=SourceKind.TASK_CALLBACK)
    assert _key(task) != _key(callback)


@pytest.mark.parametrize(
    "change",
    [
        {"asset_uri": "s3://lake/customers"},
        {"partition_key": "batch-0043"},
        {"partition_key": None, "partition_date": None},
        {"partition_date": DATE + timedelta(microseconds=1)},
        {"extra": {"rows": 10001, "batch_id": "0042"}},
        {"extra": {}},
        {"extra": {"rows": 10000.0, "batch_id": "0042"}},
    ],
)
def test_the_key_depends_on_the_content(change):
    source = source_from_task_context(task_context())
    assert _key(source) != _key(source, **change)


def test_the_key_ignores_dict_order_and_the_timezone_of_an_instant():
    source = source_from_task_context(task_context())
    reordered = {"batch_id": "0042", "rows": 10000}
    cet = DATE.astimezone(timezone(timedelta(hours=1)))
    assert _key(source) == _key(source, extra=reordered, partition_date=cet)


def test_the_key_ignores_the_producer_name_and_external_keys_are_content_only():
    a = EventSource(SourceKind.EXTERNAL, producer="billing-service")
    b = EventSource(SourceKind.EXTERNAL, producer="etl-cron")
    assert _key(a) == _key(b) == _key(None)
    assert source_identity(None) == {
        "kind": "external",
        "dag_id": None,
        "run_id": None,
        "task_id": None,
        "map_index": None,
    }


def test_dag_callback_keys_do_not_depend_on_the_last_task_instance():
    with_ti = source_from_dag_context(dag_callback_context(task_id="first", try_number=1))
    other_ti = source_from_dag_context(dag_callback_context(task_id="last", try_number=4))
    minimal = source_from_dag_context(dag_callback_context(with_last_ti=False))
    assert _key(with_ti) == _key(other_ti) == _key(minimal)


def test_canonical_json_is_compact_sorted_and_keeps_unicode():
    assert canonical_json({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'
    with pytest.raises(ValueError):
        canonical_json(float("nan"))


# --------------------------------------------------------------------------- SeenKeys
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_seen_keys_reports_repeats():
    seen = SeenKeys(max_size=10, ttl=None)
    assert seen.add("a") is True
    assert seen.add("a") is False
    assert "a" in seen and "b" not in seen
    assert seen.add("b") is True
    assert len(seen) == 2


def test_seen_keys_forget_after_the_ttl_counted_from_the_first_sighting():
    clock = Clock()
    seen = SeenKeys(max_size=10, ttl=60, clock=clock)
    assert seen.add("a")
    clock.now += 59
    assert not seen.add("a")  # a repeat does not extend the window
    clock.now += 1
    assert "a" not in seen
    assert len(seen) == 0
    assert seen.add("a")  # new again


def test_seen_keys_evicts_the_least_recently_seen():
    seen = SeenKeys(max_size=3, ttl=None)
    for key in "abc":
        seen.add(key)
    assert not seen.add("a")  # refreshes a: b is now the least recently seen
    assert seen.add("d")
    assert "b" not in seen
    assert {k for k in "acd" if k in seen} == {"a", "c", "d"}
    assert len(seen) == 3


def test_seen_keys_discard_and_clear():
    seen = SeenKeys()
    seen.add("a")
    seen.add("b")
    seen.discard("a")
    seen.discard("missing")
    assert seen.add("a") is True
    seen.clear()
    assert len(seen) == 0


@pytest.mark.parametrize(("max_size", "ttl"), [(0, 1.0), (-1, 1.0), (True, 1.0), (10, 0), (10, -5)])
def test_seen_keys_rejects_bad_bounds(max_size, ttl):
    with pytest.raises(ValueError):
        SeenKeys(max_size=max_size, ttl=ttl)


def test_seen_keys_is_thread_safe_each_key_is_new_exactly_once():
    seen = SeenKeys(max_size=10_000, ttl=None)
    results: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        mine = [seen.add(f"k{i}") for i in range(500)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 500
    assert len(seen) == 500
