"""``MessageQueueTrigger(scheme="kafka-events", ...)``: the arguments mapping and its validation.

common.messaging's own ``MessageQueueTrigger`` and Airflow's provider discovery (the installed
package's entry point) pick the queue class; nothing is faked.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from airflow.providers.apache.kafka.triggers.await_message import AwaitMessageTrigger
from airflow.providers.common.messaging.triggers.msg_queue import MESSAGE_QUEUE_PROVIDERS, MessageQueueTrigger
from airflow.serialization.encoders import encode_trigger

from airflow_kafka_events.errors import AirflowKafkaEventsError, InvalidAssetError, ValidationError
from airflow_kafka_events.watcher.message_queue import SCHEME, KafkaEventsMessageQueueProvider
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger, kafka_watched_asset

pytestmark = pytest.mark.unit

TOPICS = ["airflow.asset-events"]


def _ours(**kwargs: Any) -> MessageQueueTrigger:
    return MessageQueueTrigger(scheme=SCHEME, **kwargs)


def test_the_scheme_is_ours_alone_and_kafka_stays_the_kafka_providers():
    matching = [type(p) for p in MESSAGE_QUEUE_PROVIDERS if p.scheme_matches(SCHEME)]
    assert matching == [KafkaEventsMessageQueueProvider]
    assert SCHEME == "kafka-events"
    plain_kafka = MessageQueueTrigger(scheme="kafka", topics=TOPICS, apply_function="mod.func")
    assert type(plain_kafka.trigger) is AwaitMessageTrigger
    # the deprecated queue-URI dispatch never lands here
    assert not KafkaEventsMessageQueueProvider().queue_matches("kafka-events://broker/topic")


@pytest.mark.parametrize(
    ("uri", "kwargs"),
    [
        ("ops://investigate", {}),
        ("s3://bucket/key", {"name": "orders"}),
        (
            "ops://investigate",
            {
                "kafka_config_id": "kafka_watcher",
                "dlq_topic": "airflow.kafka-events.dlq",
                "allow": [{"source_kinds": ["dag_callback"]}],
                "max_causation_depth": 2,
                "include_partitioned": False,
            },
        ),
    ],
)
def test_it_builds_the_trigger_kafka_watched_asset_builds(uri, kwargs):
    expected = kafka_watched_asset(uri, topics=TOPICS, **kwargs).watchers[0].trigger
    trigger = _ours(uri=uri, topics=TOPICS, **kwargs)
    assert type(trigger.trigger) is KafkaAssetEventTrigger
    assert trigger.serialize() == expected.serialize()
    # what Airflow stores for the watcher: the same row, so the same watcher
    assert encode_trigger(trigger) == encode_trigger(expected)


def test_the_asset_is_normalized_as_airflow_does():
    trigger = _ours(uri="ops://investigate", topics=TOPICS).trigger
    assert (trigger.asset_uri, trigger.asset_name) == ("ops://investigate/", "ops://investigate")


def test_trigger_queue_stays_with_message_queue_trigger():
    trigger = _ours(uri="ops://investigate", topics=TOPICS, trigger_queue="watchers")
    assert trigger.queue == "watchers"
    _classpath, kwargs = trigger.serialize()
    assert "trigger_queue" not in kwargs and "queue" not in kwargs


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"topics": TOPICS}, ValidationError, "needs uri="),
        ({"uri": "ops://x"}, ValidationError, "missing a required argument: 'topics'"),
        ({"uri": "ops://x", "topics": "airflow.asset-events"}, ValidationError, "topics must be"),
        ({"uri": "ops://x", "topics": TOPICS, "topic": "t"}, ValidationError, "argument(s) topic;"),
        ({"uri": "ops://x", "topics": TOPICS, "asset_uri": "ops://x"}, ValidationError, "uri= (and name=)"),
        ({"uri": "airflow://x", "topics": TOPICS}, InvalidAssetError, "'airflow' is reserved"),
        ({"uri": "", "topics": TOPICS}, InvalidAssetError, "cannot be empty"),
        ({"uri": "ops://x", "name": "self", "topics": TOPICS}, InvalidAssetError, "prohibited name"),
        ({"uri": "ops://x", "topics": TOPICS, "max_causation_depth": -1}, ValidationError, "max_causation"),
        ({"uri": "ops://x", "topics": TOPICS, "allow": "not json"}, ValidationError, "allow must be"),
    ],
)
def test_bad_arguments_are_typed_errors_naming_the_cause(kwargs, error, says):
    with pytest.raises(error) as raised:
        _ours(**kwargs).serialize()
    assert isinstance(raised.value, AirflowKafkaEventsError)
    assert says in str(raised.value)
    if "uri" in kwargs and "topics" in kwargs:  # the same check behind kafka_watched_asset
        uri = kwargs["uri"]
        rest = {k: v for k, v in kwargs.items() if k != "uri"}
        with pytest.raises(error) as direct:
            kafka_watched_asset(uri, **rest)
        assert str(direct.value) == str(raised.value)


def test_without_common_messaging_the_package_works_and_discovery_skips_the_queue_class():
    code = textwrap.dedent(
        """
        import sys
        from airflow.exceptions import AirflowOptionalProviderFeatureException
        from airflow.providers_manager import _correctness_check
        from airflow_kafka_events.provider import get_provider_info

        # Airflow's configuration is read first: on 3.4 reading it asks every *installed* provider
        # distribution for its info, and common-messaging's stays installed in this simulation
        import airflow.sdk.definitions.asset  # noqa: F401

        for name in [m for m in sys.modules if m.startswith("airflow.providers.common.messaging")]:
            del sys.modules[name]
        sys.modules["airflow.providers.common.messaging"] = None  # not installed
        from airflow_kafka_events.watcher.trigger import kafka_watched_asset

        kafka_watched_asset("ops://x", topics=["t"])
        try:
            import airflow_kafka_events.watcher.message_queue
        except AirflowOptionalProviderFeatureException as exc:
            assert "airflow-kafka-events[messaging]" in str(exc), exc
        else:
            raise AssertionError("the queue module imported without common-messaging")
        # the check Airflow's discovery runs on each listed queue class: skipped, not an error
        (queue_class,) = get_provider_info()["queues"]
        assert _correctness_check("airflow-kafka-events", queue_class, None) is None
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
