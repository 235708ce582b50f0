"""The differences between Airflow 3.3 and 3.4, on the Airflow installed (``make test`` runs 3.3,
``make test-compat`` runs 3.4): a watcher's trigger queue is passed to Airflow 3.4 and refused on 3.3.

The earlier tries of a task instance (3.3's history table, 3.4's archived rows) are covered by
tests/unit/plugin/test_airflow_state.py on both.
"""

from __future__ import annotations

import pytest
from airflow.serialization.encoders import encode_trigger
from airflow.triggers.base import BaseEventTrigger

from airflow_kafka_events.airflow_versions import watcher_queues_supported
from airflow_kafka_events.errors import ConfigurationError, UnsupportedByAirflowError, ValidationError
from airflow_kafka_events.provider.serialization import roundtrip_trigger_kwargs
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger, kafka_watched_asset

pytestmark = pytest.mark.unit

QUEUES = watcher_queues_supported()
on_airflow_34 = pytest.mark.skipif(not QUEUES, reason="Airflow 3.4's watcher queues (make test-compat)")
on_airflow_33 = pytest.mark.skipif(QUEUES, reason="Airflow 3.3 has no watcher queues (make test)")

WATCHER = {"topics": ["events"], "asset_uri": "ops://investigate"}


@on_airflow_34
def test_a_watcher_s_queue_reaches_the_trigger_airflow_registers():
    trigger = KafkaAssetEventTrigger(**WATCHER, queue="kafka-watchers")
    assert trigger.queue == "kafka-watchers"
    # what the DAG processor stores as the trigger row's queue
    assert encode_trigger(trigger)["queue"] == "kafka-watchers"
    classpath, kwargs = trigger.serialize()
    assert kwargs["queue"] == "kafka-watchers"
    # the triggerer rebuilds the trigger from its stored kwargs: the queue stays
    rebuilt = KafkaAssetEventTrigger(**roundtrip_trigger_kwargs(kwargs))
    assert rebuilt.queue == "kafka-watchers" and rebuilt.serialize() == (classpath, kwargs)
    # another queue is another trigger (Airflow registers it anew, on that queue)
    other = KafkaAssetEventTrigger(**WATCHER, queue="other").serialize()
    assert BaseEventTrigger.hash(*other) != BaseEventTrigger.hash(classpath, kwargs)


@on_airflow_34
def test_kafka_watched_asset_passes_queue_to_its_watcher():
    asset = kafka_watched_asset("ops://investigate", topics=["events"], queue="kafka-watchers")
    (watcher,) = asset.watchers
    assert watcher.trigger.queue == "kafka-watchers"
    assert encode_trigger(watcher.trigger)["queue"] == "kafka-watchers"


def test_a_watcher_without_queue_keeps_the_trigger_hash_it_always_had():
    trigger = KafkaAssetEventTrigger(**WATCHER)
    _, kwargs = trigger.serialize()
    assert "queue" not in kwargs and trigger.queue is None
    assert "queue" not in encode_trigger(trigger)  # any triggerer started without --queues runs it


@on_airflow_33
@pytest.mark.parametrize("build", [KafkaAssetEventTrigger, None])
def test_airflow_33_refuses_a_watcher_queue_naming_the_cause_and_the_fix(build):
    with pytest.raises(UnsupportedByAirflowError) as raised:
        if build is None:
            kafka_watched_asset("ops://investigate", topics=["events"], queue="kafka-watchers")
        else:
            build(**WATCHER, queue="kafka-watchers")
    message = str(raised.value)
    assert "Airflow 3.3" in message and "Remove queue=" in message and "Airflow 3.4" in message
    assert isinstance(raised.value, ConfigurationError)


@pytest.mark.parametrize("queue", ["", "  ", " q", 3, ["q"]])
def test_a_bad_queue_is_a_validation_error_on_any_airflow(queue):
    with pytest.raises(ValidationError, match="queue must be a non-blank str"):
        KafkaAssetEventTrigger(**WATCHER, queue=queue)
