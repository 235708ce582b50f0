"""Topic creation helper: partitions, replication and retention from configuration."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kafka_events.errors import ConfigurationError, TopicError

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact"})


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create; validated on construction."""

    name: str
    partitions: int = 3
    replication_factor: int = 1
    retention_ms: int | None = None
    cleanup_policy: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _TOPIC_NAME.match(self.name) or self.name in {".", ".."}:
            raise ConfigurationError(f"invalid topic name {self.name!r}")
        if self.partitions < 1:
            raise ConfigurationError(f"topic {self.name}: partitions must be >= 1")
        if self.replication_factor < 1:
            raise ConfigurationError(f"topic {self.name}: replication_factor must be >= 1")
        if self.retention_ms is not None and self.retention_ms < -1:
            raise ConfigurationError(f"topic {self.name}: retention_ms must be -1 (forever) or >= 0")
        if self.cleanup_policy is not None and self.cleanup_policy not in _CLEANUP_POLICIES:
            raise ConfigurationError(f"topic {self.name}: unknown cleanup_policy {self.cleanup_policy!r}")

    def topic_config(self) -> dict[str, str]:
        cfg = {k: str(v) for k, v in self.config.items()}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        if self.cleanup_policy is not None:
            cfg["cleanup.policy"] = self.cleanup_policy
        return cfg

    def to_new_topic(self) -> NewTopic:
        return NewTopic(
            self.name,
            num_partitions=self.partitions,
            replication_factor=self.replication_factor,
            config=self.topic_config(),
        )


def _ready(meta: object) -> bool:
    """A topic is usable once it has partitions and each has a leader."""
    partitions = getattr(meta, "partitions", None)
    return (
        getattr(meta, "error", None) is None
        and bool(partitions)
        and all(p.leader >= 0 for p in partitions.values())  # type: ignore[union-attr]
    )


def _wait_visible(admin: AdminClient, names: set[str], present: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=max(0.5, deadline - time.monotonic())).topics
        if present:
            done = all(name in topics and _ready(topics[name]) for name in names)
        else:
            done = not (names & set(topics))
        if done:
            return
        if time.monotonic() >= deadline:
            state = "become ready" if present else "disappear"
            raise TopicError(f"topics {sorted(names)} did not {state} within {timeout}s")
        time.sleep(0.1)


def ensure_topics(admin: AdminClient, specs: Iterable[TopicSpec], *, timeout: float = 30.0) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    An existing topic is left as it is (``TOPIC_ALREADY_EXISTS`` is not an error). Any other
    failure raises :class:`TopicError` with librdkafka's error code.
    """
    specs = list(specs)
    if not specs:
        return []
    futures = admin.create_topics([s.to_new_topic() for s in specs], operation_timeout=timeout)
    created: list[str] = []
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout)
            created.append(name)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise TopicError.from_exception(f"cannot create topic {name!r}", exc) from exc
    _wait_visible(admin, {s.name for s in specs}, True, timeout)
    return created


def delete_topics(admin: AdminClient, names: Iterable[str], *, timeout: float = 30.0) -> None:
    """Delete topics; unknown topics are ignored."""
    names = list(names)
    if not names:
        return
    for name, fut in admin.delete_topics(names, operation_timeout=timeout).items():
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise TopicError.from_exception(f"cannot delete topic {name!r}", exc) from exc
    _wait_visible(admin, set(names), False, timeout)
