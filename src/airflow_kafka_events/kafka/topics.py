"""Topic creation helper: partitions, replication, retention and size limit from configuration.

Two limits decide how large a record can be, and they are not the same setting:

* the **client's** ``message.max.bytes`` (librdkafka, default 1,000,000): the largest record a
  producer sends; a larger one fails in the client with ``MSG_SIZE_TOO_LARGE`` before it is sent;
* the **topic's** ``max.message.bytes`` (broker, default 1,048,588): the largest record batch the
  broker stores; a larger one is answered ``MSG_SIZE_TOO_LARGE`` (``MESSAGE_TOO_LARGE``).

:func:`ensure_topics` with ``message_max_bytes`` gives the topics it creates the client's limit
(unless a spec sets its own), so a record the producer may send is one the topic accepts.
Consumers need no setting: librdkafka's ``fetch.max.bytes`` / ``max.partition.fetch.bytes``
return a batch larger than them when it is the first of the fetch, so keep them at their
defaults (or at least the topic's limit) and ``receive.message.max.bytes`` above
``fetch.max.bytes``.

Replication: a spec without ``replication_factor`` gets RF = min(3, brokers in the cluster) — the
brokers the cluster metadata lists when :func:`ensure_topics` runs — and, when RF >= 2 and the
spec's ``config`` does not set it, ``min.insync.replicas`` = RF - 1.  With ``acks=all`` (this
package's producers) a write is then acknowledged once RF - 1 replicas hold it: one broker may
be down without refusing writes or losing acknowledged ones; RF 1 (a single broker) loses what
that broker's disk loses.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from airflow_kafka_events.errors import ConfigurationError, TopicError

log = logging.getLogger(__name__)

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact"})
#: librdkafka's default ``message.max.bytes``.
CLIENT_DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
TOPIC_MAX_MESSAGE_BYTES = "max.message.bytes"


def client_message_max_bytes(config: Mapping[str, object]) -> int:
    """The ``message.max.bytes`` of a librdkafka configuration (its default when unset)."""
    value = config.get("message.max.bytes")
    try:
        return int(str(value)) if value is not None else CLIENT_DEFAULT_MESSAGE_MAX_BYTES
    except ValueError:
        raise ConfigurationError(f"message.max.bytes must be an int, got {value!r}") from None


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create; validated on construction."""

    name: str
    partitions: int = 3
    #: ``None``: :func:`ensure_topics` picks min(3, brokers in the cluster)
    replication_factor: int | None = None
    retention_ms: int | None = None
    cleanup_policy: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    #: the topic's ``max.message.bytes`` (``None``: the broker's default, or what
    #: :func:`ensure_topics` aligns it to)
    max_message_bytes: int | None = None

    def __post_init__(self) -> None:
        if not _TOPIC_NAME.match(self.name) or self.name in {".", ".."}:
            raise ConfigurationError(f"invalid topic name {self.name!r}")
        if self.partitions < 1:
            raise ConfigurationError(f"topic {self.name}: partitions must be >= 1")
        if self.replication_factor is not None and self.replication_factor < 1:
            raise ConfigurationError(f"topic {self.name}: replication_factor must be >= 1")
        if self.retention_ms is not None and self.retention_ms < -1:
            raise ConfigurationError(f"topic {self.name}: retention_ms must be -1 (forever) or >= 0")
        if self.cleanup_policy is not None and self.cleanup_policy not in _CLEANUP_POLICIES:
            raise ConfigurationError(f"topic {self.name}: unknown cleanup_policy {self.cleanup_policy!r}")
        limit = self.max_message_bytes
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1024):
            raise ConfigurationError(
                f"topic {self.name}: max_message_bytes must be an int >= 1024 (bytes), got {limit!r}"
            )

    @property
    def message_limit(self) -> int | None:
        """The ``max.message.bytes`` this spec sets (field or ``config``), ``None`` when unset."""
        if self.max_message_bytes is not None:
            return self.max_message_bytes
        value = self.config.get(TOPIC_MAX_MESSAGE_BYTES)
        return int(value) if value is not None else None

    def topic_config(self) -> dict[str, str]:
        cfg = {k: str(v) for k, v in self.config.items()}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        if self.cleanup_policy is not None:
            cfg["cleanup.policy"] = self.cleanup_policy
        if self.max_message_bytes is not None:
            cfg[TOPIC_MAX_MESSAGE_BYTES] = str(self.max_message_bytes)
        return cfg

    def to_new_topic(self) -> NewTopic:
        """The topic to create (``replication_factor`` ``None``: the broker's default, -1)."""
        rf = self.replication_factor
        return NewTopic(
            self.name,
            num_partitions=self.partitions,
            replication_factor=-1 if rf is None else rf,
            config=self.topic_config(),
        )


#: The largest replication factor :func:`ensure_topics` picks by itself.
MAX_DEFAULT_REPLICATION = 3
TOPIC_MIN_INSYNC_REPLICAS = "min.insync.replicas"


def default_replication(brokers: int) -> int:
    """RF = min(3, ``brokers``) (at least 1)."""
    return max(1, min(MAX_DEFAULT_REPLICATION, brokers))


def with_replication(spec: TopicSpec, brokers: int) -> TopicSpec:
    """``spec`` with its replication settled for a cluster of ``brokers``.

    Without a ``replication_factor`` it gets :func:`default_replication`; with RF >= 2 and no
    ``min.insync.replicas`` in its ``config`` it gets RF - 1.
    """
    rf = spec.replication_factor if spec.replication_factor is not None else default_replication(brokers)
    config = dict(spec.config)
    if rf >= 2 and TOPIC_MIN_INSYNC_REPLICAS not in config:
        config[TOPIC_MIN_INSYNC_REPLICAS] = str(rf - 1)
    return replace(spec, replication_factor=rf, config=config)


def cluster_size(admin: AdminClient, *, timeout: float = 30.0) -> int:
    """How many brokers the cluster metadata lists (live brokers)."""
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as exc:
        raise TopicError.from_exception("cannot read the cluster metadata", exc) from exc


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


#: While a new partition's leader is still taking over (KRaft applies it from the metadata log a
#: moment after the metadata already names it), the broker answers these.
_LEADER_SETTLING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)


def _wait_serving(admin: AdminClient, names: Iterable[str], timeout: float) -> None:
    """Wait until every partition of the new topics answers a ListOffsets from its leader.

    The metadata names a leader before that broker serves the partition; a client's first
    request in between gets ``NOT_LEADER_FOR_PARTITION``.  Other refusals (e.g. no DESCRIBE
    permission) end the wait quietly: the topic exists, only this check cannot be made.
    """
    names = list(names)
    list_offsets = getattr(admin, "list_offsets", None)  # confluent-kafka >= 2.3
    if not names or list_offsets is None:
        return
    topics = admin.list_topics(timeout=timeout).topics
    waiting = {TopicPartition(name, p) for name in names if name in topics for p in topics[name].partitions}
    deadline = time.monotonic() + timeout
    while waiting:
        results = list_offsets({tp: OffsetSpec.latest() for tp in waiting}, request_timeout=5)
        for tp, future in results.items():
            try:
                future.result(timeout=10)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.code() not in _LEADER_SETTLING:
                    log.info("cannot check that %s[%s] is served: %s", tp.topic, tp.partition, exc)
                    return
                continue
            waiting.discard(TopicPartition(tp.topic, tp.partition))
        if waiting and time.monotonic() >= deadline:
            raise TopicError(
                f"partitions {sorted((tp.topic, tp.partition) for tp in waiting)} have no serving leader "
                f"after {timeout}s"
            )
        if waiting:
            time.sleep(0.1)


def align_spec(spec: TopicSpec, message_max_bytes: int) -> TopicSpec:
    """``spec`` with ``max.message.bytes`` = the client's ``message.max.bytes`` unless it sets one.

    A spec whose own limit is below the client's keeps it, with a warning: the producer may then
    send records the broker refuses (a dead-letter writer falls back to a reference for those).
    """
    limit = spec.message_limit
    if limit is None:
        return replace(spec, max_message_bytes=max(1024, message_max_bytes))
    if limit < message_max_bytes:
        log.warning(
            "topic %s: max.message.bytes=%d is below the client's message.max.bytes=%d; records "
            "between the two are refused by the broker",
            spec.name,
            limit,
            message_max_bytes,
        )
    return spec


def topic_max_message_bytes(admin: AdminClient, topic: str, *, timeout: float = 15.0) -> int | None:
    """The ``max.message.bytes`` an existing topic has (``None`` when it cannot be read)."""
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
        entries = next(iter(futures.values())).result(timeout=timeout)
        entry = entries.get(TOPIC_MAX_MESSAGE_BYTES)
        return int(entry.value) if entry is not None and entry.value is not None else None
    except Exception as exc:  # no access to configs, unknown topic: the caller copes without it
        log.info("cannot read max.message.bytes of topic %r: %s", topic, exc)
        return None


def ensure_topics(
    admin: AdminClient,
    specs: Iterable[TopicSpec],
    *,
    timeout: float = 30.0,
    message_max_bytes: int | None = None,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    An existing topic is left as it is (``TOPIC_ALREADY_EXISTS`` is not an error). Any other
    failure raises :class:`TopicError` with librdkafka's error code.  With
    ``message_max_bytes`` (the producers' librdkafka ``message.max.bytes``, see
    :func:`client_message_max_bytes`) new topics get it as ``max.message.bytes`` unless their
    spec sets one (:func:`align_spec`).  Replication defaults: see :func:`with_replication`.
    """
    specs = list(specs)
    if not specs:
        return []
    brokers = cluster_size(admin, timeout=timeout)
    specs = [with_replication(spec, brokers) for spec in specs]
    if message_max_bytes is not None:
        specs = [align_spec(spec, message_max_bytes) for spec in specs]
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
    _wait_serving(admin, created, timeout)
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
