"""The topics a configuration names, and making the cluster hold them (`topics ensure`).

Which topics: the trigger events topic (streams), the asset events topic, the dead-letter topic, the
iteration results topic, the watchers' clean-stop marks (compacted) and the stream index (compacted,
and its keys deleted ``stream_index_retention_ms`` after their last record), named by ``[kafka_events]
trigger_events_topic`` / ``asset_events_topic`` / ``dlq_topic`` / ``results_topic`` /
``watcher_stops_topic`` / ``stream_index_topic`` (environment ``AIRFLOW__KAFKA_EVENTS__*`` or
airflow.cfg, read without importing Airflow) or their defaults.  Their settings (partitions,
replication, retention, size limit) come from flags, else ``[kafka_events] topic_partitions`` /
``topic_replication_factor`` / ``topic_retention_ms`` / ``topic_max_message_bytes``, else the
defaults of :class:`TopicSpec`.

Existing topics are compared with what is wanted.  Configs (retention, size limit, min ISR) change
only when asked; partitions are never added (every topic here is keyed: more partitions move keys to
other partitions and break the per-key progress lookup); a different replication factor is reported
(changing it needs a partition reassignment, a cluster operator's decision).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_events.airflow_config import airflow_option
from airflow_kafka_events.errors import ConfigurationError, TopicError

log = logging.getLogger(__name__)

SECTION = "kafka_events"
#: Default topic of the asset watchers' clean-stop marks and dead-letter claims (compacted).
WATCHER_STOPS_TOPIC = "airflow.kafka-events.watcher-stops"
#: Default topic of the stream index (:mod:`airflow_kafka_events.streams.index`).
STREAM_INDEX_TOPIC = "airflow.kafka-events.stream-index"
#: ``[kafka_events]`` option: how long (ms) a stream stays in the index after its last record.
STREAM_INDEX_RETENTION_OPTION = "stream_index_retention_ms"
#: Default of :data:`STREAM_INDEX_RETENTION_OPTION`: 7 days.
DEFAULT_STREAM_INDEX_RETENTION_MS = 7 * 24 * 3600 * 1000
#: Roles whose topic is compacted (the latest record of each key is what counts).
COMPACTED_ROLES = frozenset({"watcher-stops", "stream-index"})
#: Compacted roles whose keys are also deleted after a retention (``cleanup.policy=compact,delete``).
EXPIRING_ROLES = frozenset({"stream-index"})
#: (role, option naming the topic, default name); the results topic defaults to the trigger events one.
TOPIC_OPTIONS: tuple[tuple[str, str, str | None], ...] = (
    ("trigger-events", "trigger_events_topic", "airflow.trigger-events"),
    ("asset-events", "asset_events_topic", "airflow.asset-events"),
    ("dead-letters", "dlq_topic", "airflow.kafka-events.dlq"),
    ("results", "results_topic", None),
    ("watcher-stops", "watcher_stops_topic", WATCHER_STOPS_TOPIC),
    ("stream-index", "stream_index_topic", STREAM_INDEX_TOPIC),
)
#: The configs compared on existing topics (others are the broker's business).
COMPARED_CONFIGS = ("retention.ms", "max.message.bytes", "min.insync.replicas", "cleanup.policy")


@dataclass(frozen=True)
class TopicSettings:
    """Wanted settings of every topic (``None``: the broker's or :func:`ensure_topics`' default)."""

    partitions: int = 3
    replication_factor: int | None = None
    retention_ms: int | None = None
    max_message_bytes: int | None = None
    #: ``retention.ms`` of the stream index topic (its keys expire this long after their last record)
    index_retention_ms: int = DEFAULT_STREAM_INDEX_RETENTION_MS

    @classmethod
    def from_sources(
        cls,
        *,
        partitions: int | None = None,
        replication_factor: int | None = None,
        retention_ms: int | None = None,
        max_message_bytes: int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> TopicSettings:
        """Flags first, then ``[kafka_events] topic_*`` (environment or airflow.cfg)."""

        def pick(flag: int | None, option: str) -> int | None:
            if flag is not None:
                return flag
            text = airflow_option(SECTION, option, environ=environ)
            if text is None or not text.strip():
                return None
            try:
                return int(text)
            except ValueError:
                raise ConfigurationError(f"[{SECTION}] {option} must be an int, got {text!r}") from None

        return cls(
            partitions=pick(partitions, "topic_partitions") or 3,
            replication_factor=pick(replication_factor, "topic_replication_factor"),
            retention_ms=pick(retention_ms, "topic_retention_ms"),
            max_message_bytes=pick(max_message_bytes, "topic_max_message_bytes"),
            index_retention_ms=pick(None, STREAM_INDEX_RETENTION_OPTION) or DEFAULT_STREAM_INDEX_RETENTION_MS,
        )


@dataclass(frozen=True)
class WantedTopic:
    name: str
    roles: tuple[str, ...]


def configured_topic(option: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    """The topic ``[kafka_events] <option>`` names, or ``default`` when it names none."""
    value = airflow_option(SECTION, option, None, environ=environ)
    return value.strip() if value and value.strip() else default


def configured_topics(environ: Mapping[str, str] | None = None) -> list[WantedTopic]:
    """The topics the configuration names, each once (with every role it serves)."""
    names: dict[str, list[str]] = {}
    trigger_topic = None
    for role, option, default in TOPIC_OPTIONS:
        name = airflow_option(SECTION, option, environ=environ) or default or trigger_topic
        assert name is not None
        if role == "trigger-events":
            trigger_topic = name
        names.setdefault(name.strip(), []).append(role)
    return [WantedTopic(name, tuple(roles)) for name, roles in names.items()]


@dataclass
class TopicReport:
    """What ``topics ensure`` found and did for one topic."""

    name: str
    roles: tuple[str, ...]
    action: str  # created | ok | differs | updated
    partitions: int | None = None
    replication_factor: int | None = None
    differences: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.name,
            "roles": list(self.roles),
            "action": self.action,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "differences": self.differences,
            "applied": self.applied,
        }

    def line(self) -> str:
        head = f"{self.action:<8} {self.name} ({', '.join(self.roles)}) partitions={self.partitions} "
        head += f"replication={self.replication_factor}"
        return "\n".join(
            [head, *(f"  differs: {d}" for d in self.differences), *(f"  set: {a}" for a in self.applied)]
        )


def _cleanup_policy(roles: Sequence[str]) -> str | None:
    if EXPIRING_ROLES.intersection(roles):
        return "compact,delete"
    return "compact" if COMPACTED_ROLES.intersection(roles) else None


def _specs(wanted: Sequence[WantedTopic], settings: TopicSettings) -> list[Any]:
    from airflow_kafka_events.kafka.topics import TopicSpec

    return [
        TopicSpec(
            topic.name,
            partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            retention_ms=settings.index_retention_ms
            if EXPIRING_ROLES.intersection(topic.roles)
            else settings.retention_ms,
            max_message_bytes=settings.max_message_bytes,
            cleanup_policy=_cleanup_policy(topic.roles),
        )
        for topic in wanted
    ]


def _configs(admin: Any, name: str, timeout: float) -> dict[str, str | None]:
    from confluent_kafka.admin import ConfigResource

    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)])
    entries = next(iter(futures.values())).result(timeout=timeout)
    return {key: entries[key].value if key in entries else None for key in COMPARED_CONFIGS}


def _alter(admin: Any, name: str, changes: Mapping[str, str], timeout: float) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=timeout)


def _compare(admin: Any, spec: Any, report: TopicReport, apply: bool, timeout: float) -> None:
    if report.partitions != spec.partitions:
        report.differences.append(
            f"partitions: has {report.partitions}, wanted {spec.partitions} (never changed here: the topic "
            "is keyed, more partitions would move keys and break the per-key progress lookup)"
        )
    if report.replication_factor != spec.replication_factor:
        report.differences.append(
            f"replication factor: has {report.replication_factor}, wanted {spec.replication_factor} "
            "(not changed here: it needs a partition reassignment)"
        )
    has = _configs(admin, spec.name, timeout)
    changes = {k: v for k, v in spec.topic_config().items() if k in has and has[k] != v}
    for key, value in changes.items():
        report.differences.append(f"{key}: has {has[key]}, wanted {value}")
    if changes and apply:
        _alter(admin, spec.name, changes, timeout)
        report.applied = [f"{key}={value}" for key, value in changes.items()]


def ensure_configured_topics(
    admin: Any,
    wanted: Sequence[WantedTopic],
    settings: TopicSettings,
    *,
    apply_configs: bool = False,
    message_max_bytes: int | None = None,
    timeout: float = 30.0,
) -> list[TopicReport]:
    """Create the missing topics; compare the others (and set their configs with ``apply_configs``)."""
    from confluent_kafka import KafkaException

    from airflow_kafka_events.kafka.topics import align_spec, cluster_size, ensure_topics, with_replication

    brokers = cluster_size(admin, timeout=timeout)
    specs = [with_replication(spec, brokers) for spec in _specs(wanted, settings)]
    # new topics take the client's record limit (unless one is asked for); existing ones are
    # compared only on what is asked for
    to_create = specs if message_max_bytes is None else [align_spec(s, message_max_bytes) for s in specs]
    created = set(ensure_topics(admin, to_create, timeout=timeout))
    metadata = admin.list_topics(timeout=timeout).topics
    reports = []
    for topic, spec in zip(wanted, specs, strict=True):
        meta = metadata.get(topic.name)
        partitions = sorted(meta.partitions.values(), key=lambda p: p.id) if meta is not None else []
        report = TopicReport(
            topic.name,
            topic.roles,
            "created" if topic.name in created else "ok",
            partitions=len(partitions),
            replication_factor=len(partitions[0].replicas) if partitions else None,
        )
        if topic.name not in created:
            try:
                _compare(admin, spec, report, apply_configs, timeout)
            except KafkaException as exc:
                raise TopicError.from_exception(f"cannot compare topic {topic.name!r}", exc) from exc
            if report.differences:
                report.action = "updated" if report.applied else "differs"
        reports.append(report)
    return reports
