"""The Airflow-aware emit path with contexts built by the Task SDK and a recording producer."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from airflow_kafka_events.assets import emit as emit_module
from airflow_kafka_events.assets.emit import (
    emit_asset_event,
    emit_from_dag_callback,
    emit_from_task_callback,
    parsing_dag_file,
    to_asset_ref,
)
from airflow_kafka_events.assets.publish import PROVENANCE_EXTRA_KEY, causation_depth
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import (
    CausationLoopError,
    ExtraNotSerializableError,
    ExtraTooLargeError,
    InvalidAssetError,
    NaiveDatetimeError,
    NoEmissionContextError,
    ParseTimeEmissionError,
    PartitionDateWithoutKeyError,
    PartitionInheritanceError,
    PartitionKeyError,
)
from unit.assets.sdk_contexts import (
    RecordingProducer,
    consumed_event,
    dag_callback_context,
    task_context,
)

pytestmark = pytest.mark.unit

NOTIFIER_PATH = "airflow_kafka_events.assets.notifier.AssetEventNotifier"


@pytest.fixture
def producer(monkeypatch):
    recording = RecordingProducer()
    recording.connections = []  # type: ignore[attr-defined]

    def producer_for(conn_id, **kwargs):
        recording.connections.append(conn_id)  # type: ignore[attr-defined]
        return recording, ASSET_EVENT_CODEC

    monkeypatch.setattr(emit_module, "_producer_for", producer_for)
    return recording


@pytest.fixture
def in_task():
    """Run the test body as if inside a running task (the SDK's current-context stack)."""
    from airflow.sdk.execution_time.context import set_current_context

    def enter(**kwargs):
        context = task_context(**kwargs)
        manager = set_current_context(context)
        manager.__enter__()
        managers.append(manager)
        return context

    managers: list = []
    yield enter
    for manager in reversed(managers):
        manager.__exit__(None, None, None)


def _asset():
    from airflow.sdk import Asset

    return Asset(name="orders", uri="s3://lake/orders")


# --------------------------------------------------------------------------- running task
def test_emit_in_a_running_task_publishes_an_envelope_attributed_to_the_task(producer, in_task):
    in_task(task_id="ingest", try_number=2, map_index=4)
    receipt = emit_asset_event(_asset(), partition_key="batch-0042", extra={"rows": 10000})

    (sent,) = producer.sent
    (envelope,) = producer.envelopes()
    assert sent["topic"] == "airflow.asset-events"
    assert sent["key"] == b"s3://lake/orders"
    assert ("event_id", envelope.event_id) in sent["headers"]
    assert ("idempotency_key", envelope.idempotency_key) in sent["headers"]
    assert producer.connections == ["kafka_default"]
    assert envelope.asset == AssetRef(name="orders", uri="s3://lake/orders")
    assert envelope.partition_key == "batch-0042"
    assert envelope.partition_date is None
    assert envelope.extra == {"rows": 10000}
    assert envelope.source == EventSource(
        SourceKind.TASK,
        dag_id="producer_dag",
        run_id="manual__2026-10-20",
        task_id="ingest",
        map_index=4,
        try_number=2,
    )
    assert envelope.causation == ()
    assert receipt.event_id == envelope.event_id
    assert (receipt.topic, receipt.partition, receipt.offset) == ("airflow.asset-events", 0, 0)
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert receipt.timestamp == epoch + timedelta(milliseconds=1_792_000_000_123)
    assert receipt.timestamp.tzinfo is not None


def test_topic_and_connection_can_be_chosen(producer, in_task):
    in_task()
    emit_asset_event("s3://lake/orders", topic="my.events", kafka_config_id="kafka_events_producer")
    assert producer.sent[0]["topic"] == "my.events"
    assert producer.connections == ["kafka_events_producer"]


def test_a_retry_re_emitting_the_same_event_gets_the_same_idempotency_key(producer, in_task):
    in_task(try_number=1)
    emit_asset_event(_asset(), partition_key="batch-0042", extra={"rows": 1})
    in_task(try_number=2)
    emit_asset_event(_asset(), partition_key="batch-0042", extra={"rows": 1})
    first, retry = producer.envelopes()
    assert (first.source.try_number, retry.source.try_number) == (1, 2)
    assert first.event_id != retry.event_id
    assert first.idempotency_key == retry.idempotency_key


def test_an_explicit_idempotency_key_is_used_as_given(producer, in_task):
    in_task()
    emit_asset_event(_asset(), idempotency_key="batch-0042-v1")
    assert producer.envelopes()[0].idempotency_key == "batch-0042-v1"


def test_outside_a_task_emit_asset_event_needs_an_explicit_source(producer):
    with pytest.raises(NoEmissionContextError, match="emit_from_dag_callback"):
        emit_asset_event(_asset())
    assert producer.sent == []
    source = EventSource(SourceKind.EXTERNAL, producer="backfill-script")
    emit_asset_event(_asset(), source=source)
    assert producer.envelopes()[0].source == source


def test_a_str_asset_is_made_into_an_airflow_asset():
    assert to_asset_ref("S3://lake/orders/?b=2&a=1") == AssetRef(
        name="S3://lake/orders/?b=2&a=1", uri="s3://lake/orders?a=1&b=2"
    )
    assert to_asset_ref(AssetRef(name="n", uri="s3://x/y")) == AssetRef(name="n", uri="s3://x/y")


def test_aliases_refs_and_bad_assets_are_refused(producer, in_task):
    from airflow.sdk import Asset, AssetAlias

    in_task()
    for bad in (AssetAlias("alias"), Asset.ref(name="orders"), "airflow://reserved", "   ", 42):
        with pytest.raises(InvalidAssetError):
            emit_asset_event(bad)
    assert producer.sent == []


# --------------------------------------------------------------------------- validation before sending
@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"partition_date": datetime(2026, 1, 1, tzinfo=timezone.utc)}, PartitionDateWithoutKeyError),
        ({"partition_key": "k", "partition_date": datetime(2026, 1, 1)}, NaiveDatetimeError),
        ({"partition_key": "   "}, PartitionKeyError),
        ({"partition_key": "k" * 251}, PartitionKeyError),
        ({"extra": {"when": datetime(2026, 1, 1, tzinfo=timezone.utc)}}, ExtraNotSerializableError),
        ({"extra": {"blob": "x" * 70_000}}, ExtraTooLargeError),
        ({"extra": {"blob": "x" * 100}, "max_extra_bytes": 50}, ExtraTooLargeError),
        ({"causation": [f"e{i}" for i in range(40)]}, CausationLoopError),
    ],
)
def test_invalid_events_are_rejected_before_anything_is_sent(producer, in_task, kwargs, error):
    in_task()
    with pytest.raises(error):
        emit_asset_event(_asset(), **kwargs)
    assert producer.sent == []
    assert producer.connections == []  # not even the connection was looked up


def test_the_extra_bound_can_come_from_airflow_config(producer, in_task, monkeypatch):
    in_task()
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__ASSET_EVENT_MAX_EXTRA_BYTES", "20")
    with pytest.raises(ExtraTooLargeError, match="20-byte"):
        emit_asset_event(_asset(), extra={"k": "x" * 30})
    emit_asset_event(_asset(), extra={"k": "x" * 30}, max_extra_bytes=100)
    assert len(producer.sent) == 1


# --------------------------------------------------------------------------- redaction
def test_extra_is_redacted_with_airflows_masker_before_publication(producer, in_task):
    from airflow.sdk.log import mask_secret

    mask_secret("s3cr3t-conn-password-77")
    in_task()
    emit_asset_event(
        _asset(),
        extra={
            "note": "connected with s3cr3t-conn-password-77 as admin",
            "password": "hunter22",
            "api_key": "k-123",
            "nested": {"access_token": "t", "rows": 3, "pin_password": 1234},
            "path": "s3://lake/orders/batch-0042",
        },
    )
    (envelope,) = producer.envelopes()
    assert envelope.extra == {
        "note": "connected with *** as admin",
        "password": "***",
        "api_key": "***",
        "nested": {"access_token": "***", "rows": 3, "pin_password": "***"},
        "path": "s3://lake/orders/batch-0042",
    }
    assert b"hunter22" not in producer.sent[0]["value"]
    assert b"s3cr3t-conn-password-77" not in producer.sent[0]["value"]


# --------------------------------------------------------------------------- partitions
def test_omitted_partition_stays_none_even_in_a_partitioned_run(producer, in_task):
    in_task(partition_key="2026-01-31", partition_date=datetime(2026, 1, 31, tzinfo=timezone.utc))
    emit_asset_event(_asset())
    (envelope,) = producer.envelopes()
    assert (envelope.partition_key, envelope.partition_date) == (None, None)


def test_inherit_partition_takes_the_runs_key_and_date(producer, in_task):
    run_date = datetime(2026, 1, 31, tzinfo=timezone.utc)
    in_task(partition_key="2026-01-31", partition_date=run_date)
    emit_asset_event(_asset(), inherit_partition=True)
    other_date = run_date + timedelta(hours=6)
    emit_asset_event(_asset(), inherit_partition=True, partition_date=other_date)
    inherited, with_date = producer.envelopes()
    assert (inherited.partition_key, inherited.partition_date) == ("2026-01-31", run_date)
    assert (with_date.partition_key, with_date.partition_date) == ("2026-01-31", other_date)


def test_inherit_partition_refuses_ambiguity_and_runs_without_a_partition(producer, in_task):
    in_task(partition_key="2026-01-31")
    with pytest.raises(PartitionInheritanceError, match="do not pass partition_key"):
        emit_asset_event(_asset(), inherit_partition=True, partition_key="other")
    in_task(partition_key=None)
    with pytest.raises(PartitionInheritanceError, match="no partition key"):
        emit_asset_event(_asset(), inherit_partition=True)
    with pytest.raises(PartitionInheritanceError):
        emit_from_dag_callback(dag_callback_context(with_last_ti=False), _asset(), inherit_partition=True)
    assert producer.sent == []


# --------------------------------------------------------------------------- causation
def test_causation_extends_the_chain_of_the_events_that_triggered_the_run(producer, in_task):
    upstream = consumed_event(
        "orders",
        "s3://lake/orders",
        {PROVENANCE_EXTRA_KEY: {"event_id": "E2", "causation": ["E0", "E1"], "idempotency_key": "k"}},
    )
    from_outlet = consumed_event("customers", "s3://lake/customers", {"rows": 1})
    in_task(consumed=[upstream, from_outlet])
    emit_asset_event(_asset(), causation=["manual-1", "E1"])
    (envelope,) = producer.envelopes()
    assert envelope.causation == ("E0", "E1", "E2", "manual-1")
    assert causation_depth(envelope) == 4


def test_a_run_looping_through_asset_events_is_stopped(producer, in_task):
    chain = [f"E{i}" for i in range(10)]
    looped = consumed_event(
        "orders", "s3://lake/orders", {PROVENANCE_EXTRA_KEY: {"event_id": "E10", "causation": chain}}
    )
    in_task(consumed=[looped])
    with pytest.raises(CausationLoopError):
        emit_asset_event(_asset(), max_causation_depth=10)
    emit_asset_event(_asset(), max_causation_depth=11)
    assert producer.envelopes()[0].causation == (*chain, "E10")


# --------------------------------------------------------------------------- callbacks
def test_dag_callback_events_are_never_attributed_to_the_contexts_task_instance(producer):
    context = dag_callback_context(task_id="last_task", try_number=3, map_index=2)
    assert context["ti"].task_id == "last_task"  # what 3.3 hands to a DAG callback
    emit_from_dag_callback(context, _asset(), extra={"outcome": context["reason"]})
    (envelope,) = producer.envelopes()
    assert envelope.source == EventSource(
        SourceKind.DAG_CALLBACK, dag_id="producer_dag", run_id="manual__2026-10-20"
    )
    assert envelope.source.task_id is None
    assert envelope.source.map_index is None
    assert envelope.source.try_number is None


def test_dag_callback_without_a_task_instance(producer):
    emit_from_dag_callback(dag_callback_context(with_last_ti=False), _asset())
    assert producer.envelopes()[0].source == EventSource(
        SourceKind.DAG_CALLBACK, dag_id="producer_dag", run_id="manual__2026-10-20"
    )


def test_task_callback_events_carry_the_task_instance(producer):
    emit_from_task_callback(task_context(task_id="flaky", try_number=2), _asset())
    assert producer.envelopes()[0].source == EventSource(
        SourceKind.TASK_CALLBACK,
        dag_id="producer_dag",
        run_id="manual__2026-10-20",
        task_id="flaky",
        map_index=-1,
        try_number=2,
    )


def test_callbacks_need_a_context(producer):
    with pytest.raises(NoEmissionContextError):
        emit_from_dag_callback(None, _asset())  # type: ignore[arg-type]
    with pytest.raises(NoEmissionContextError):
        emit_from_task_callback({"dag": None}, _asset())
    with pytest.raises(NoEmissionContextError):
        emit_from_dag_callback({"run_id": "r"}, _asset())


# --------------------------------------------------------------------------- notifier
def test_notifier_in_a_dag_callback_slot_is_a_dag_callback_without_the_last_ti(producer):
    from airflow.sdk.bases.notifier import BaseNotifier

    from airflow_kafka_events.assets.notifier import AssetEventNotifier

    notifier = AssetEventNotifier(_asset(), extra={"reason": "{{ reason }}"})
    assert isinstance(notifier, BaseNotifier)
    notifier(dag_callback_context(task_id="last_task"))
    (envelope,) = producer.envelopes()
    assert envelope.source == EventSource(
        SourceKind.DAG_CALLBACK, dag_id="producer_dag", run_id="manual__2026-10-20", producer=NOTIFIER_PATH
    )
    assert envelope.extra == {"reason": "task_failure"}
    assert notifier.last_receipt is not None and notifier.last_receipt.event_id == envelope.event_id


def test_notifier_in_a_task_slot_is_a_notifier_with_the_task_instance(producer):
    from airflow_kafka_events.assets.notifier import AssetEventNotifier

    notifier = AssetEventNotifier(_asset(), partition_key="{{ ti.task_id }}-{{ ti.try_number }}")
    notifier(task_context(task_id="load", try_number=2))
    (envelope,) = producer.envelopes()
    assert envelope.partition_key == "load-2"
    assert envelope.source == EventSource(
        SourceKind.NOTIFIER,
        dag_id="producer_dag",
        run_id="manual__2026-10-20",
        task_id="load",
        map_index=-1,
        try_number=2,
        producer=NOTIFIER_PATH,
    )


def test_notifier_renders_each_call_and_leaves_the_shared_context_alone(producer):
    from airflow_kafka_events.assets.notifier import AssetEventNotifier

    notifier = AssetEventNotifier(_asset(), partition_key="{{ ti.task_id }}", extra={"t": "{{ ti.task_id }}"})
    first = task_context(task_id="a", partition_key="run-partition")
    second = task_context(task_id="b")
    notifier(first)
    notifier(second)
    assert [(e.partition_key, e.extra) for e in producer.envelopes()] == [
        ("a", {"t": "a"}),
        ("b", {"t": "b"}),
    ]
    assert notifier.partition_key == "{{ ti.task_id }}"
    assert first["partition_key"] == "run-partition"
    assert "extra" not in first


def test_task_callback_helper_refuses_a_dag_callback_context(producer):
    with pytest.raises(NoEmissionContextError, match="emit_from_dag_callback"):
        emit_from_task_callback(dag_callback_context(), _asset())
    assert producer.sent == []


def test_notifier_without_a_task_instance_keeps_dag_run_provenance(producer):
    from airflow_kafka_events.assets.notifier import AssetEventNotifier

    deadline_context = {
        "dag_run": {"dag_id": "producer_dag", "run_id": "scheduled__x", "partition_key": "p-1"},
        "deadline": {"id": "d1", "deadline_time": "2026-01-01T00:00:00+00:00"},
    }
    notifier = AssetEventNotifier(_asset(), inherit_partition=True)
    asyncio.run(_await(notifier, deadline_context))
    (envelope,) = producer.envelopes()
    assert envelope.source == EventSource(
        SourceKind.NOTIFIER, dag_id="producer_dag", run_id="scheduled__x", producer=NOTIFIER_PATH
    )
    assert envelope.partition_key == "p-1"


async def _await(notifier, context):
    await notifier.async_notify(context)


# --------------------------------------------------------------------------- parse time
def _dag_file(tmp_path, body: str):
    path = tmp_path / "emitting_dag.py"
    path.write_text(textwrap.dedent(body))
    return path


def _parse(path):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(path), safe_mode=False)


def test_emitting_at_the_top_level_of_a_dag_file_is_an_import_error(producer, tmp_path):
    path = _dag_file(
        tmp_path,
        """
        from airflow.sdk import DAG, Asset
        from airflow_kafka_events import emit_asset_event

        with DAG("parse_time_emitter", schedule=None):
            pass

        emit_asset_event(Asset("s3://lake/orders"), partition_key="p")
        """,
    )
    bag = _parse(path)
    (error,) = bag.import_errors.values()
    assert "ParseTimeEmissionError" in error
    assert "parse_time_emitter" not in bag.dags
    assert producer.sent == []
    assert parsing_dag_file() is False  # the parse is over


def test_emitting_inside_a_dag_definition_block_is_refused_too(producer, tmp_path):
    path = _dag_file(
        tmp_path,
        """
        from airflow.sdk import DAG
        from airflow_kafka_events.assets import AssetEventNotifier, emit_from_dag_callback

        with DAG("parse_time_emitter", schedule=None):
            emit_from_dag_callback({"dag": None, "run_id": "r", "reason": "x"}, "s3://lake/orders")
        """,
    )
    (error,) = _parse(path).import_errors.values()
    assert "ParseTimeEmissionError" in error
    with pytest.raises(ParseTimeEmissionError):
        from airflow.sdk import DAG

        with DAG("defined_here", schedule=None):
            emit_asset_event(_asset(), source=EventSource(SourceKind.EXTERNAL))
    assert producer.sent == []


def test_a_dag_file_that_emits_only_at_runtime_parses(producer, tmp_path):
    path = _dag_file(
        tmp_path,
        """
        from airflow.sdk import DAG, Asset, task
        from airflow_kafka_events import emit_asset_event
        from airflow_kafka_events.assets import AssetEventNotifier

        orders = Asset("s3://lake/orders")

        with DAG("runtime_emitter", schedule=None, on_failure_callback=AssetEventNotifier(orders)):

            @task
            def ingest():
                emit_asset_event(orders, partition_key="batch-1")

            ingest()
        """,
    )
    bag = _parse(path)
    assert bag.import_errors == {}
    assert "runtime_emitter" in bag.dags
    assert producer.sent == []


def test_the_parsing_context_environment_variables_do_not_block_a_running_task(
    producer, in_task, monkeypatch
):
    # the task runner sets them to parse the DAG file and leaves them set while the task runs
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "producer_dag")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "ingest")
    in_task()
    emit_asset_event(_asset())
    assert len(producer.sent) == 1


# --------------------------------------------------------------------------- lazy import
def test_the_package_exposes_emit_asset_event_lazily():
    code = (
        "import sys, airflow_kafka_events, airflow_kafka_events.assets\n"
        "assert not [m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')]\n"
        "from airflow_kafka_events.assets.emit import emit_asset_event\n"
        "assert airflow_kafka_events.emit_asset_event is emit_asset_event\n"
        "assert airflow_kafka_events.assets.emit_asset_event is emit_asset_event\n"
        "assert 'emit_asset_event' in dir(airflow_kafka_events)\n"
        "from airflow_kafka_events import emit_asset_event as again\n"
        "assert again is emit_asset_event\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    import airflow_kafka_events

    with pytest.raises(AttributeError):
        airflow_kafka_events.no_such_name  # noqa: B018


# --------------------------------------------------------------------------- one registry client
class _CountingRegistry:
    """A registry client that counts its making and its registrations."""

    made = 0

    def __init__(self) -> None:
        type(self).made += 1
        self.registered: list[str] = []

    def register_schema(self, subject, schema):
        self.registered.append(subject)
        return 7


def test_emits_through_one_connection_share_one_registry_client(monkeypatch, in_task):
    import uuid

    from airflow_kafka_events.envelopes.framing import CONFLUENT_MAGIC, parse_confluent
    from airflow_kafka_events.envelopes.registry import RegistrySettings
    from airflow_kafka_events.provider.hook import KafkaEventsHook
    from unit.assets.sdk_contexts import RecordingProducer

    url = f"http://registry-{uuid.uuid4().hex[:8]}.invalid:8081"  # this test's own cache entry
    extras = {"bootstrap.servers": "unit.invalid:9092", "schema.registry.url": url}
    recording = RecordingProducer()
    clients: list[_CountingRegistry] = []

    def new_client(settings):
        clients.append(_CountingRegistry())
        return clients[-1]

    monkeypatch.setattr(KafkaEventsHook, "_build_config", lambda hook: dict(extras))
    monkeypatch.setattr(emit_module, "emit_producer", lambda settings, **kwargs: recording)
    monkeypatch.setattr(RegistrySettings, "new_client", new_client)
    in_task()

    emit_asset_event(_asset(), extra={"n": 1}, kafka_config_id="kafka_registry_unit")
    emit_asset_event(_asset(), extra={"n": 2}, kafka_config_id="kafka_registry_unit")

    assert len(clients) == 1  # one client for the connection, not one per emit
    assert clients[0].registered == ["airflow.asset-events-value"]  # and the schema id asked for once
    assert [parse_confluent(s["value"])[0] for s in recording.sent] == [7, 7]
    assert all(s["value"][0] == CONFLUENT_MAGIC for s in recording.sent)

    extras["schema.registry.auto.register.schemas"] = "false"  # other settings, another client
    monkeypatch.setattr(_CountingRegistry, "lookup_schema", lambda self, subject, schema: None, raising=False)
    assert (
        KafkaEventsHook("kafka_registry_unit").get_settings().codecs.asset.registry_client is not clients[0]
    )
    assert len(clients) == 2


def test_a_forked_child_makes_its_own_registry_client(monkeypatch):
    import os
    import uuid

    from airflow_kafka_events.envelopes.codec import REGISTRY_CODECS
    from airflow_kafka_events.envelopes.registry import RegistrySettings

    monkeypatch.setattr(RegistrySettings, "new_client", lambda settings: _CountingRegistry())
    registry = RegistrySettings(url=f"http://registry-{uuid.uuid4().hex[:8]}.invalid:8081")
    parent = REGISTRY_CODECS.get(registry)
    assert REGISTRY_CODECS.get(registry) is parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a client of its own, then report and leave at once
        try:
            child = REGISTRY_CODECS.get(registry)
            os.write(
                write,
                b"own" if child.asset.registry_client is not parent.asset.registry_client else b"shared",
            )
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"
    os.close(read)


# --------------------------------------------------------------------------- a connection's settings
def _kafka_conn(monkeypatch, conn_id: str, bootstrap: str) -> None:
    import json

    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
    )


def test_consecutive_emits_read_the_connection_once_while_it_is_fresh(monkeypatch):
    from airflow_kafka_events.assets.emit import ConnectionSettings

    cache = ConnectionSettings(ttl=3600)
    _kafka_conn(monkeypatch, "kafka_cache_unit", "first.invalid:9092")
    first = cache.get("kafka_cache_unit")
    _kafka_conn(monkeypatch, "kafka_cache_unit", "second.invalid:9092")
    assert cache.get("kafka_cache_unit") is first  # fresh: the connection is not read again
    assert first.bootstrap_servers == "first.invalid:9092"
    _kafka_conn(monkeypatch, "kafka_other_unit", "other.invalid:9092")
    assert cache.get("kafka_other_unit").bootstrap_servers == "other.invalid:9092"  # one entry per id
    cache.forget("kafka_cache_unit")
    assert cache.get("kafka_cache_unit").bootstrap_servers == "second.invalid:9092"


def test_a_stale_connection_is_read_again(monkeypatch):
    from airflow_kafka_events.assets.emit import ConnectionSettings

    cache = ConnectionSettings(ttl=0.0)
    _kafka_conn(monkeypatch, "kafka_stale_unit", "first.invalid:9092")
    assert cache.get("kafka_stale_unit").bootstrap_servers == "first.invalid:9092"
    _kafka_conn(monkeypatch, "kafka_stale_unit", "second.invalid:9092")
    assert cache.get("kafka_stale_unit").bootstrap_servers == "second.invalid:9092"


def test_a_connection_that_fails_to_read_is_not_remembered(monkeypatch):
    from airflow_kafka_events.assets.emit import ConnectionSettings

    cache = ConnectionSettings(ttl=3600)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_BROKEN_UNIT", '{"conn_type": "kafka", "extra": {"group.id": "no-bootstrap"}}'
    )
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):  # the apache-kafka provider's check
        cache.get("kafka_broken_unit")
    _kafka_conn(monkeypatch, "kafka_broken_unit", "fixed.invalid:9092")
    assert cache.get("kafka_broken_unit").bootstrap_servers == "fixed.invalid:9092"


def test_a_failed_send_makes_the_next_emit_read_the_connection_again(monkeypatch):
    import uuid

    from airflow_kafka_events.errors import NotSentError

    conn_id = f"kafka_failed_send_{uuid.uuid4().hex[:8]}"  # this test's own entry of the process's cache
    _kafka_conn(monkeypatch, conn_id, "before.invalid:9092")
    used: list[str] = []

    def emit_producer(settings, **kwargs):
        used.append(settings.bootstrap_servers)
        return RecordingProducer()

    def failing_publish(envelope, **kwargs):
        raise NotSentError("not sent — nothing will be published: test")

    monkeypatch.setattr(emit_module, "emit_producer", emit_producer)
    source = EventSource(SourceKind.TASK, dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)
    emit_asset_event(_asset(), source=source, kafka_config_id=conn_id)
    _kafka_conn(monkeypatch, conn_id, "after.invalid:9092")
    emit_asset_event(_asset(), source=source, kafka_config_id=conn_id)
    assert used == ["before.invalid:9092", "before.invalid:9092"]  # read once, then reused
    with monkeypatch.context() as failing:
        failing.setattr(emit_module, "publish", failing_publish)
        with pytest.raises(NotSentError):
            emit_asset_event(_asset(), source=source, kafka_config_id=conn_id)
    emit_asset_event(_asset(), source=source, kafka_config_id=conn_id)
    assert used[-1] == "after.invalid:9092"
