"""The ``kafka-events`` scheme of common.messaging's ``MessageQueueTrigger``.

Airflow's event-driven scheduling names a queue by scheme::

    from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
    from airflow.sdk import Asset, AssetWatcher

    investigate = Asset(
        "ops://investigate",
        watchers=[
            AssetWatcher(
                name="investigate_from_kafka",
                trigger=MessageQueueTrigger(
                    scheme="kafka-events",
                    uri="ops://investigate",
                    topics=["airflow.asset-events"],
                    dlq_topic="airflow.kafka-events.dlq",
                ),
            )
        ],
    )

``MessageQueueTrigger`` hands every keyword argument but ``scheme`` / ``queue`` /
``trigger_queue`` to :func:`~airflow_kafka_events.watcher.trigger.kafka_watcher_trigger`:
the arguments of :func:`~airflow_kafka_events.watcher.trigger.kafka_watched_asset` that
make its trigger (``uri``, ``name``, ``topics`` and the
:class:`~airflow_kafka_events.watcher.trigger.KafkaAssetEventTrigger` options), checked
the same way.  The watcher Airflow stores and runs is that ``KafkaAssetEventTrigger``.

The ``kafka`` scheme stays the apache-kafka provider's (its ``AwaitMessageTrigger``): a scheme
two providers match makes ``MessageQueueTrigger`` refuse it.

This module needs ``apache-airflow-providers-common-messaging`` (the ``messaging`` extra);
without it Airflow's provider discovery skips the queue class as an optional feature and the
rest of the package works without it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from airflow.exceptions import AirflowOptionalProviderFeatureException

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger, kafka_watcher_trigger

try:
    from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider
except ImportError as exc:
    raise AirflowOptionalProviderFeatureException(
        "the kafka-events scheme of MessageQueueTrigger needs apache-airflow-providers-common-messaging: "
        "pip install 'airflow-kafka-events[messaging]'"
    ) from exc

__all__ = [
    "SCHEME",
    "KafkaEventsMessageQueueProvider",
    "watcher_trigger_from",
]

#: The scheme of ``MessageQueueTrigger(scheme=...)`` this package answers.
SCHEME = "kafka-events"


def watcher_trigger_from(**kwargs: Any) -> KafkaAssetEventTrigger:
    """``kafka_watcher_trigger(**kwargs)``; a missing or doubled argument is a :class:`ValidationError`."""
    try:
        inspect.signature(kafka_watcher_trigger).bind(**kwargs)
    except TypeError as exc:
        raise ValidationError(
            f"MessageQueueTrigger(scheme={SCHEME!r}) needs uri= (the watched asset's URI) and topics=, "
            f"as kafka_watched_asset does: {exc}"
        ) from exc
    return kafka_watcher_trigger(**kwargs)


class KafkaEventsMessageQueueProvider(BaseMessageQueueProvider):
    """Dispatches ``MessageQueueTrigger(scheme="kafka-events", ...)`` to this package's asset watcher.

    Only the scheme is matched (exactly); queue URIs (``MessageQueueTrigger(queue=...)``, deprecated
    by common.messaging) match nothing here.
    """

    scheme = SCHEME

    def trigger_class(self) -> Callable[..., KafkaAssetEventTrigger]:  # type: ignore[override]
        # MessageQueueTrigger only calls what this returns with its keyword arguments; a
        # function (not the class) checks them as kafka_watched_asset does.
        return watcher_trigger_from
