"""Kafka settings that turn into librdkafka configuration dictionaries.

One :class:`KafkaSettings` describes how to reach a cluster (``bootstrap.servers``,
security, client id ...).  Role-specific dictionaries are derived from it:

* :meth:`KafkaSettings.producer_config` enforces ``enable.idempotence=true`` and
  ``acks=all`` and refuses a configuration that weakens them;
* :meth:`KafkaSettings.consumer_config` sets a group and disables auto-commit (offsets
  are committed only after work is done);
* :meth:`KafkaSettings.admin_config` keeps only what an AdminClient accepts.

Outside Airflow the settings come from flags, the environment
(``KAFKA_BOOTSTRAP_SERVERS``, ``AIRFLOW_KAFKA_EVENTS_PROPERTIES``) or a librdkafka
``.properties`` file; inside Airflow they come from an Airflow Kafka connection through
:mod:`airflow_kafka_events.provider.hook`. Nothing is read at import time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.envelopes.registry import REGISTRY_PREFIX, RegistrySettings
from airflow_kafka_events.errors import ConfigurationError

if TYPE_CHECKING:
    from airflow_kafka_events.envelopes.codec import EnvelopeCodecs

#: ``bootstrap.servers`` outside Airflow, as ``--bootstrap-servers``.
ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
#: A librdkafka ``.properties`` file outside Airflow, as ``--properties``.
ENV_PROPERTIES_FILE = "AIRFLOW_KAFKA_EVENTS_PROPERTIES"
#: The schema registry's URL outside Airflow, as ``--schema-registry-url`` (``schema.registry.url``).
ENV_SCHEMA_REGISTRY_URL = "AIRFLOW_KAFKA_EVENTS_SCHEMA_REGISTRY_URL"

#: librdkafka's batching delay, under its two names (``queue.buffering.max.ms`` is the alias).
LINGER_KEYS = frozenset({"linger.ms", "queue.buffering.max.ms"})

#: Keys that only make sense for one role; stripped from the others so that librdkafka
#: does not warn about (or reject) them.
_PRODUCER_ONLY = frozenset(
    {
        "acks",
        "request.required.acks",
        "enable.idempotence",
        "linger.ms",
        "queue.buffering.max.ms",
        "batch.size",
        "batch.num.messages",
        "compression.type",
        "compression.codec",
        "max.in.flight.requests.per.connection",
        "max.in.flight",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "retries",
        "message.send.max.retries",
        "retry.backoff.ms",
        "transactional.id",
        "partitioner",
        "queue.buffering.max.messages",
        "queue.buffering.max.kbytes",
        "enable.gapless.guarantee",
    }
)
_CONSUMER_ONLY = frozenset(
    {
        "group.id",
        "group.instance.id",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "auto.offset.reset",
        "enable.auto.offset.store",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
        "group.protocol",
        "isolation.level",
        "fetch.min.bytes",
        "fetch.wait.max.ms",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "enable.partition.eof",
        "check.crcs",
        "on_commit",
    }
)
#: Values of ``acks`` that mean "all in-sync replicas".
_ACKS_ALL = frozenset({"all", "-1", -1})


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "1", "yes"}


#: A hashable identity of a librdkafka configuration (see :func:`config_key`).
ConfigKey = tuple[tuple[str, str], ...]


def config_key(config: Mapping[str, Any]) -> ConfigKey:
    """A hashable identity of a librdkafka configuration: equal for equal settings, whatever the
    order of their keys (the key under which clients of the same settings are shared)."""
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a librdkafka/Java-style ``.properties`` file (``key=value`` or ``key: value``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read Kafka properties file {p}: {exc}") from exc
    result: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigurationError(f"{p}:{lineno}: expected 'key=value', got {raw!r}")
        result[line[:sep].strip()] = line[sep + 1 :].strip()
    return result


@dataclass(frozen=True)
class KafkaSettings:
    """librdkafka configuration shared by every role of one cluster."""

    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        config = dict(self.config)
        if not config.get("bootstrap.servers"):
            raise ConfigurationError(
                "Kafka settings need 'bootstrap.servers' (set it in the Airflow connection's extras, "
                f"pass --bootstrap-servers, or export {ENV_BOOTSTRAP})"
            )
        object.__setattr__(self, "config", config)
        RegistrySettings.from_config(config)  # a misconfigured registry fails here, not at the first record

    @property
    def bootstrap_servers(self) -> str:
        return str(self.config["bootstrap.servers"])

    @functools.cached_property
    def key(self) -> ConfigKey:
        """The identity of these settings (:func:`config_key`)."""
        return config_key(self.config)

    @functools.cached_property
    def registry(self) -> RegistrySettings | None:
        """The schema registry of these settings (``schema.registry.*`` keys), ``None`` without one."""
        return RegistrySettings.from_config(self.config)

    @functools.cached_property
    def codecs(self) -> EnvelopeCodecs:
        """The envelope codecs every producer and consumer of these settings uses (one registry client)."""
        from airflow_kafka_events.envelopes.codec import envelope_codecs  # fastavro: on first use

        return envelope_codecs(self.registry)

    def _librdkafka(self) -> dict[str, Any]:
        return {k: v for k, v in self.config.items() if not str(k).startswith(REGISTRY_PREFIX)}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_sources(
        cls,
        *,
        bootstrap_servers: str | None = None,
        properties_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> KafkaSettings:
        """Build settings without Airflow: properties file < environment < explicit flags < overrides."""
        env = os.environ if environ is None else environ
        config: dict[str, Any] = {}
        props = properties_file or env.get(ENV_PROPERTIES_FILE)
        if props:
            config.update(load_properties(props))
        if env.get(ENV_BOOTSTRAP):
            config["bootstrap.servers"] = env[ENV_BOOTSTRAP]
        if env.get(ENV_SCHEMA_REGISTRY_URL):
            config[REGISTRY_PREFIX + "url"] = env[ENV_SCHEMA_REGISTRY_URL]
        if bootstrap_servers:
            config["bootstrap.servers"] = bootstrap_servers
        config.update(overrides or {})
        return cls(config)

    def with_overrides(self, overrides: Mapping[str, Any]) -> KafkaSettings:
        """Return new settings with some librdkafka keys replaced."""
        return KafkaSettings({**self.config, **overrides})

    # ------------------------------------------------------------------ roles
    def producer_config(self, *, linger_ms: int = 1) -> dict[str, Any]:
        """Producer configuration with idempotence and ``acks=all`` enforced.

        ``linger_ms``: librdkafka's batching delay unless the connection sets one (``linger.ms``
        or ``queue.buffering.max.ms``); 0 for a producer whose every send waits for its receipt.
        Raises :class:`ConfigurationError` when the configuration explicitly weakens them
        (``enable.idempotence=false``, ``acks`` other than all/-1), or sets a transactional id
        (this package's producers are not transactional).
        """
        config = {k: v for k, v in self._librdkafka().items() if k not in _CONSUMER_ONLY}
        if "enable.idempotence" in config and not _as_bool(config["enable.idempotence"]):
            raise ConfigurationError("enable.idempotence=false is refused: producers must be idempotent")
        for key in ("acks", "request.required.acks"):
            if key in config and config[key] not in _ACKS_ALL and str(config[key]).lower() not in _ACKS_ALL:
                raise ConfigurationError(f"{key}={config[key]!r} is refused: producers must use acks=all")
        if "transactional.id" in config:
            raise ConfigurationError("transactional.id is not supported by airflow-kafka-events producers")
        config.pop("request.required.acks", None)
        config["enable.idempotence"] = True
        config["acks"] = "all"
        config.setdefault("partitioner", "murmur2_random")
        # librdkafka's default 5 ms batching delay would be pure latency for a send that waits for
        # its receipt (B4: p50 6 ms at 5 ms, under 1 ms at 0); pipelined sends still batch while
        # earlier ones are in flight. Asset event emits (assets.publish.EMIT_LINGER_MS) and the
        # streaming triggers' pages (streams.producing.outage.STREAM_LINGER_MS) use 0.
        if not LINGER_KEYS & config.keys():
            config["linger.ms"] = linger_ms
        return config

    def consumer_config(self, group_id: str | None = None, **extra: Any) -> dict[str, Any]:
        """Consumer configuration: manual commits, earliest reset, a group id.

        ``group_id`` overrides the connection's ``group.id``; one of them is required so that
        each role (stream consumer, watcher, bridge) gets its own consumer group.
        """
        config = {k: v for k, v in self._librdkafka().items() if k not in _PRODUCER_ONLY}
        if group_id:
            config["group.id"] = group_id
        if not config.get("group.id"):
            raise ConfigurationError(
                "a consumer needs a group.id (pass group_id or set it on the connection)"
            )
        if "enable.auto.commit" in config and _as_bool(config["enable.auto.commit"]):
            raise ConfigurationError(
                "enable.auto.commit=true is refused: offsets are committed only after events are handled"
            )
        config["enable.auto.commit"] = False
        config.setdefault("auto.offset.reset", "earliest")
        config.update(extra)
        return config

    def admin_config(self) -> dict[str, Any]:
        return {k: v for k, v in self._librdkafka().items() if k not in _PRODUCER_ONLY | _CONSUMER_ONLY}
