"""What the Kafka Events view reads: its connection, topics and bounds, from ``[kafka_events]``.

Read per request from Airflow's configuration (``AIRFLOW__KAFKA_EVENTS__*`` or airflow.cfg), never
at import.  The topic names are those ``airflow-kafka-events topics ensure`` creates
(:data:`~airflow_kafka_events.kafka.topic_plan.TOPIC_OPTIONS`).

===========================  ====================================  =================================
option                       default                               meaning
===========================  ====================================  =================================
``ui_kafka_config_id``       ``kafka_default``                     the Airflow Kafka connection read
``trigger_events_topic``     ``airflow.trigger-events``            streams
``asset_events_topic``       ``airflow.asset-events``              asset events
``dlq_topic``                ``airflow.kafka-events.dlq``          dead letters
``stream_index_topic``       ``airflow.kafka-events.stream-index`` the stream index (Streams, Health)
``ui_window_minutes``        ``1440``                              how far back a scanning page reads
``ui_max_records``           ``1000``                              records per partition, at most
``ui_stuck_after_seconds``   ``600``                               a running stream silent this long
``ui_bridge_group_ids``      ``airflow-kafka-events.bridge``       bridges' consumer groups (commas)
``ui_freeze_heap``           ``true``                              gc.freeze the api-server's heap
                                                                   at the view's first request
===========================  ====================================  =================================

``replay_extra_target_topics`` (default: none) lists the topics (commas) a replay may publish to
besides a dead letter's source topic the configuration knows
(:mod:`~airflow_kafka_events.ui.inspection.replay_targets`): an administrator's setting (the
deployment's configuration), not a user's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.topic_plan import SECTION, STREAM_INDEX_TOPIC, TOPIC_OPTIONS
from airflow_kafka_events.ui.inspection.replay_targets import EXTRA_TARGETS_OPTION, topic_list

__all__ = [
    "DEFAULT_BRIDGE_GROUP",
    "MAX_RECORDS_CAP",
    "MAX_WINDOW_MINUTES",
    "ViewSettings",
    "WindowRequest",
]

#: The partition bridge's default consumer group (``bridge.config.DEFAULT_GROUP``; a unit test keeps
#: them equal without the view importing the bridge service).
DEFAULT_BRIDGE_GROUP = "airflow-kafka-events.bridge"
#: Upper bounds a query string cannot exceed (a page stays cheap whatever the URL says).
MAX_RECORDS_CAP = 20_000
MAX_WINDOW_MINUTES = 60 * 24 * 31


def _int(value: Any, name: str, *, low: int, high: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"[{SECTION}] {name} must be an integer, got {value!r}") from None
    if not low <= number <= high:
        raise ConfigurationError(f"[{SECTION}] {name} must be between {low} and {high}, got {number}")
    return number


def _bool(value: str, name: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise ConfigurationError(f"[{SECTION}] {name} must be true or false, got {value!r}")
    return lowered in ("true", "1", "yes")


@dataclass(frozen=True)
class WindowRequest:
    """How far back and how many records per partition a page reads."""

    minutes: int
    max_records: int

    @property
    def since(self) -> datetime:
        return datetime.now(timezone.utc) - timedelta(minutes=self.minutes)

    def narrowed(self, minutes: int | None, max_records: int | None) -> WindowRequest:
        """This window with a page's query-string overrides (which the page's query checks: within
        :data:`MAX_WINDOW_MINUTES` and :data:`MAX_RECORDS_CAP`)."""
        return WindowRequest(
            minutes=self.minutes if minutes is None else minutes,
            max_records=self.max_records if max_records is None else max_records,
        )


@dataclass(frozen=True)
class ViewSettings:
    kafka_config_id: str
    trigger_events_topic: str
    asset_events_topic: str
    dlq_topic: str
    window: WindowRequest
    stuck_after_seconds: int
    bridge_group_ids: tuple[str, ...]
    freeze_heap: bool = True
    replay_extra_target_topics: frozenset[str] = frozenset()
    stream_index_topic: str = STREAM_INDEX_TOPIC

    @classmethod
    def from_options(cls, options: Mapping[str, str | None]) -> ViewSettings:
        """From ``[kafka_events]`` option values (``None``: unset)."""

        def opt(name: str, default: str) -> str:
            value = options.get(name)
            return default if value is None or not str(value).strip() else str(value).strip()

        topics = {option: default for _, option, default in TOPIC_OPTIONS if default}
        groups = tuple(
            g.strip() for g in opt("ui_bridge_group_ids", DEFAULT_BRIDGE_GROUP).split(",") if g.strip()
        )
        return cls(
            kafka_config_id=opt("ui_kafka_config_id", "kafka_default"),
            trigger_events_topic=opt("trigger_events_topic", topics["trigger_events_topic"]),
            asset_events_topic=opt("asset_events_topic", topics["asset_events_topic"]),
            dlq_topic=opt("dlq_topic", topics["dlq_topic"]),
            window=WindowRequest(
                minutes=_int(
                    opt("ui_window_minutes", "1440"), "ui_window_minutes", low=1, high=MAX_WINDOW_MINUTES
                ),
                max_records=_int(
                    opt("ui_max_records", "1000"), "ui_max_records", low=1, high=MAX_RECORDS_CAP
                ),
            ),
            stuck_after_seconds=_int(
                opt("ui_stuck_after_seconds", "600"), "ui_stuck_after_seconds", low=1, high=10**7
            ),
            bridge_group_ids=groups,
            freeze_heap=_bool(opt("ui_freeze_heap", "true"), "ui_freeze_heap"),
            replay_extra_target_topics=topic_list(options.get(EXTRA_TARGETS_OPTION)),
            stream_index_topic=opt("stream_index_topic", STREAM_INDEX_TOPIC),
        )

    @classmethod
    def from_airflow(cls) -> ViewSettings:
        """From Airflow's configuration (called per request)."""
        from airflow.configuration import conf

        names = (
            "ui_kafka_config_id",
            "trigger_events_topic",
            "asset_events_topic",
            "dlq_topic",
            "ui_window_minutes",
            "ui_max_records",
            "ui_stuck_after_seconds",
            "ui_bridge_group_ids",
            "ui_freeze_heap",
            EXTRA_TARGETS_OPTION,
            "stream_index_topic",
        )
        return cls.from_options({name: conf.get(SECTION, name, fallback=None) for name in names})
