"""The Confluent schema registry side of the envelopes: schema ids for writing, writer schemas by id.

:class:`RegistrySchemas` wraps a registry client (a ``confluent_kafka.schema_registry.SchemaRegistryClient``
or any object with ``register_schema(subject, schema)``, ``lookup_schema(subject, schema)`` and
``get_schema(schema_id)``): it registers (or looks up) the current schema under the subject its
strategy names and fetches a writer schema by id, once per subject and per id.  A registry that
cannot be reached raises :class:`~airflow_kafka_events.errors.EnvelopeSerializationError` (retryable);
an id the registry does not know raises :class:`~airflow_kafka_events.errors.UnknownSchemaError`.

:class:`EnvelopeSerializer` and :class:`EnvelopeDeserializer` are an envelope codec in
confluent-kafka's serializer shape.  This module imports no Airflow module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeEncodeError,
    EnvelopeSerializationError,
    SchemaRegistryUnavailableError,
    UnknownSchemaError,
)

if TYPE_CHECKING:
    from airflow_kafka_events.envelopes.codec import EnvelopeCodec

__all__ = [
    "REGISTRY_PREFIX",
    "EnvelopeDeserializer",
    "EnvelopeSerializer",
    "RegistrySchemas",
    "RegistrySettings",
    "SubjectNameStrategy",
    "record_subject_name_strategy",
    "topic_subject_name_strategy",
]

SubjectNameStrategy = Callable[[SerializationContext, "str | None"], "str | None"]


def topic_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str:
    """TopicNameStrategy: ``<topic>-value`` (or ``<topic>-key`` for a key serializer)."""
    return f"{ctx.topic}-{ctx.field}"


def record_subject_name_strategy(ctx: SerializationContext, record_name: str | None) -> str | None:
    """RecordNameStrategy: the record's full name, whatever the topic (several types on one topic)."""
    return record_name


#: Prefix of the schema registry's keys among a connection's extras or a properties file's keys
#: (never handed to librdkafka).
REGISTRY_PREFIX = "schema.registry."
_STRATEGIES: Mapping[str, SubjectNameStrategy] = {
    "TopicNameStrategy": topic_subject_name_strategy,
    "RecordNameStrategy": record_subject_name_strategy,
}
_TLS_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")
_KNOWN_KEYS = frozenset(
    {
        "url",
        "basic.auth.user.info",
        "bearer.auth.token",
        "subject.name.strategy",
        "auto.register.schemas",
        "timeout.ms",
        *_TLS_KEYS,
    }
)


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"true", "1", "yes"}:
        return True
    if text in {"false", "0", "no"}:
        return False
    raise ConfigurationError(f"{REGISTRY_PREFIX}{key} must be true or false, got {value!r}")


@dataclass(frozen=True)
class RegistrySettings:
    """How to reach a Confluent-compatible schema registry and how to use it.

    Read from ``schema.registry.*`` keys (:meth:`from_config`) of an Airflow Kafka connection's extras
    or a properties file: ``url`` (required), ``basic.auth.user.info`` (``user:password``) or
    ``bearer.auth.token``, ``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location``,
    ``subject.name.strategy`` (``TopicNameStrategy``, the default, or ``RecordNameStrategy``),
    ``auto.register.schemas`` (default true), ``timeout.ms``.  Credentials never appear in ``repr``.
    """

    url: str
    basic_auth_user_info: str | None = field(default=None, repr=False)
    bearer_auth_token: str | None = field(default=None, repr=False)
    tls: Mapping[str, str] = field(default_factory=dict)
    subject_name_strategy: str = "TopicNameStrategy"
    auto_register: bool = True
    timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if not self.url.strip():
            raise ConfigurationError(f"{REGISTRY_PREFIX}url is empty")
        if not self.url.startswith(("http://", "https://")):
            raise ConfigurationError(f"{REGISTRY_PREFIX}url must be an http:// or https:// URL")
        if self.subject_name_strategy not in _STRATEGIES:
            raise ConfigurationError(
                f"{REGISTRY_PREFIX}subject.name.strategy {self.subject_name_strategy!r} is not one of "
                f"{', '.join(sorted(_STRATEGIES))}"
            )
        if self.basic_auth_user_info and self.bearer_auth_token:
            raise ConfigurationError(
                f"set {REGISTRY_PREFIX}basic.auth.user.info or {REGISTRY_PREFIX}bearer.auth.token, not both"
            )
        if self.basic_auth_user_info is not None and ":" not in self.basic_auth_user_info:
            raise ConfigurationError(f"{REGISTRY_PREFIX}basic.auth.user.info must be user:password")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RegistrySettings | None:
        """The settings in ``config``'s ``schema.registry.*`` keys; ``None`` without a URL."""
        keys = {k[len(REGISTRY_PREFIX) :]: v for k, v in config.items() if str(k).startswith(REGISTRY_PREFIX)}
        if not keys:
            return None
        unknown = sorted(set(keys) - _KNOWN_KEYS)
        if unknown:
            named = ", ".join(REGISTRY_PREFIX + k for k in unknown)
            known = ", ".join(REGISTRY_PREFIX + k for k in sorted(_KNOWN_KEYS))
            raise ConfigurationError(f"unknown schema registry setting(s) {named}; known: {known}")
        url = str(keys.get("url") or "").strip()
        if not url:
            raise ConfigurationError(
                f"schema registry settings without {REGISTRY_PREFIX}url: set it, or remove the other "
                f"{REGISTRY_PREFIX}* keys"
            )
        timeout = keys.get("timeout.ms")
        try:
            timeout_ms = None if timeout in (None, "") else int(str(timeout))
        except ValueError as exc:
            raise ConfigurationError(
                f"{REGISTRY_PREFIX}timeout.ms must be an integer, got {timeout!r}"
            ) from exc
        return cls(
            url=url,
            basic_auth_user_info=str(keys["basic.auth.user.info"])
            if keys.get("basic.auth.user.info")
            else None,
            bearer_auth_token=str(keys["bearer.auth.token"]) if keys.get("bearer.auth.token") else None,
            tls={k: str(keys[k]) for k in _TLS_KEYS if keys.get(k)},
            subject_name_strategy=str(keys.get("subject.name.strategy") or "TopicNameStrategy"),
            auto_register=_flag("auto.register.schemas", keys.get("auto.register.schemas", True)),
            timeout_ms=timeout_ms,
        )

    @property
    def strategy(self) -> SubjectNameStrategy:
        return _STRATEGIES[self.subject_name_strategy]

    def client_config(self) -> dict[str, Any]:
        """The ``SchemaRegistryClient`` configuration (holds the credentials: never print it)."""
        config: dict[str, Any] = {"url": self.url, **self.tls}
        if self.basic_auth_user_info:
            config["basic.auth.user.info"] = self.basic_auth_user_info
        if self.bearer_auth_token:
            # a static token: the client's bearer mode needs these two identity fields, unused by most
            # registries; the token goes in the Authorization header
            config.update(
                {
                    "bearer.auth.credentials.source": "STATIC_TOKEN",
                    "bearer.auth.token": self.bearer_auth_token,
                    "bearer.auth.logical.cluster": "-",
                    "bearer.auth.identity.pool.id": "-",
                }
            )
        if self.timeout_ms is not None:
            config["timeout"] = max(1, self.timeout_ms // 1000)
        return config

    def identity(self) -> tuple[Any, ...]:
        """What tells the clients of two settings apart (holds the credentials: never print it)."""
        return (
            self.url,
            self.basic_auth_user_info,
            self.bearer_auth_token,
            tuple(sorted(self.tls.items())),
            self.subject_name_strategy,
            self.auto_register,
            self.timeout_ms,
        )

    def new_client(self) -> Any:
        """A ``confluent_kafka.schema_registry.SchemaRegistryClient`` for these settings."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        try:
            return SchemaRegistryClient(self.client_config())
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"invalid schema registry settings for {self.url}: {exc}") from exc

    def describe(self) -> dict[str, Any]:
        """What can be shown: the URL, the kind of credentials (never their value), the rest."""
        auth = "basic" if self.basic_auth_user_info else "bearer" if self.bearer_auth_token else "none"
        return {
            "url": self.url,
            "auth": auth,
            "tls": dict(self.tls),
            "subject.name.strategy": self.subject_name_strategy,
            "auto.register.schemas": self.auto_register,
        }


def _is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, LookupError) or getattr(exc, "http_status_code", None) == 404


def _unavailable(exc: BaseException) -> bool:
    """The registry did not give an answer about the schema: no HTTP status (connection refused,
    timeout, DNS), a server error, or too many requests."""
    status = getattr(exc, "http_status_code", None)
    if isinstance(status, int) and status > 0:
        return status >= 500 or status == 429
    return isinstance(exc, (OSError, TimeoutError)) or type(exc).__module__.startswith(("httpx", "httpcore"))


class RegistrySchemas:
    """Schema ids and writer schemas of one registry client, cached per subject and per id."""

    def __init__(
        self,
        client: Any,
        *,
        subject_name_strategy: SubjectNameStrategy | None = None,
        auto_register: bool = True,
    ) -> None:
        self.client = client
        self.strategy: SubjectNameStrategy = subject_name_strategy or topic_subject_name_strategy
        self.auto_register = auto_register
        self._subject_ids: dict[str, int] = {}
        self._writers: dict[int, dict[str, Any]] = {}

    def subject(self, ctx: SerializationContext | None, record_name: str, what: type) -> str:
        """The subject the strategy names for ``ctx``'s topic and ``record_name``."""
        if ctx is None or not ctx.topic:
            raise EnvelopeEncodeError(
                f"encoding {what.__name__} with a schema registry needs the topic (it names the subject)"
            )
        subject = self.strategy(ctx, record_name)
        if not subject:
            raise EnvelopeEncodeError(f"the subject name strategy gave no subject for topic {ctx.topic!r}")
        return subject

    def schema_id(
        self, schema_name: str, record_name: str, ctx: SerializationContext | None, what: type
    ) -> int:
        """The id of ``schema_name``'s current version under its subject (registered or looked up)."""
        subject = self.subject(ctx, record_name, what)
        schema_id = self._subject_ids.get(subject)
        if schema_id is not None:
            return schema_id
        schema = registry_schema(schema_name)
        try:
            if self.auto_register:
                schema_id = int(self.client.register_schema(subject, schema))
            else:
                schema_id = int(self.client.lookup_schema(subject, schema).schema_id)
        except Exception as exc:
            action = "register" if self.auto_register else "look up"
            error = SchemaRegistryUnavailableError if _unavailable(exc) else EnvelopeSerializationError
            raise error(
                f"could not {action} the {schema_name} schema under subject {subject!r}: {exc}"
            ) from exc
        self._subject_ids[subject] = schema_id
        self._writers.setdefault(schema_id, schemas.load_schema(schema_name))
        return schema_id

    def cached_writer(self, schema_id: int) -> dict[str, Any] | None:
        """The writer schema of ``schema_id`` if it was fetched already (no registry call).  An id
        the registry did not know is asked again each time (a registry's replica may learn it)."""
        return self._writers.get(schema_id)

    def writer(self, schema_id: int, known: Mapping[bytes, dict[str, Any]]) -> dict[str, Any]:
        """The writer schema of ``schema_id``; a registered copy of a ``known`` version (by
        fingerprint) is that already parsed schema."""
        writer = self._writers.get(schema_id)
        if writer is None:
            writer = self._writers[schema_id] = self._fetch(schema_id, known)
        return writer

    def _fetch(self, schema_id: int, known: Mapping[bytes, dict[str, Any]]) -> dict[str, Any]:
        try:
            registered = self.client.get_schema(schema_id)
        except Exception as exc:
            if _is_not_found(exc):
                raise UnknownSchemaError(f"schema registry has no schema with id {schema_id}") from exc
            error = SchemaRegistryUnavailableError if _unavailable(exc) else EnvelopeSerializationError
            raise error(f"could not fetch schema id {schema_id} from the schema registry: {exc}") from exc
        if registered is None:
            raise UnknownSchemaError(f"schema registry has no schema with id {schema_id}")
        schema_type = getattr(registered, "schema_type", None) or "AVRO"
        if schema_type != "AVRO":
            raise UnknownSchemaError(f"schema registry id {schema_id} is a {schema_type} schema, not Avro")
        import fastavro
        import fastavro.schema

        try:
            parsed: Any = fastavro.parse_schema(json.loads(registered.schema_str))
            canonical = fastavro.schema.to_parsing_canonical_form(parsed)
            fingerprint = bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))
        except Exception as exc:
            raise UnknownSchemaError(
                f"schema registry id {schema_id} holds no usable Avro schema: {exc}"
            ) from exc
        writer: dict[str, Any] = known.get(fingerprint, parsed)
        return writer


def registry_schema(schema_name: str, version: int | None = None) -> Any:
    """``schema_name``'s schema (current or ``version``) as a registry ``Schema`` (compact JSON, Avro)."""
    try:
        from confluent_kafka.schema_registry import Schema
    except ImportError as exc:  # pragma: no cover - depends on installed extras
        raise ConfigurationError(
            "a schema registry needs confluent-kafka's schema registry support: "
            "pip install 'airflow-kafka-events[schema-registry]'"
        ) from exc
    raw = schemas.raw_schema(schema_name, version)
    return Schema(json.dumps(raw, separators=(",", ":")), schema_type="AVRO")


class EnvelopeSerializer:
    """confluent-kafka style value serializer: ``serializer(envelope, ctx) -> bytes``."""

    def __init__(self, codec: EnvelopeCodec[Any]) -> None:
        self.codec = codec

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        if obj is None:
            return None
        return self.codec.encode(obj, ctx=ctx)


class EnvelopeDeserializer:
    """confluent-kafka style value deserializer: ``deserializer(bytes, ctx) -> envelope``."""

    def __init__(self, codec: EnvelopeCodec[Any]) -> None:
        self.codec = codec

    def __call__(self, data: bytes | None, ctx: SerializationContext | None = None) -> Any:
        if data is None:
            return None
        return self.codec.decode(data)


# --------------------------------------------------------------------------- the envelopes' subjects
#: The registry's compatibility level for the envelopes' subjects: every kept schema version reads
#: every other's bytes (a field added or removed has a default: ``tests/unit/test_schema_evolution.py``),
#: since old and new writers and readers share topics during an upgrade.
DEFAULT_COMPATIBILITY = "FULL_TRANSITIVE"
COMPATIBILITY_LEVELS = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)


@dataclass(frozen=True)
class SubjectReport:
    """What the registry says of one envelope schema's subject."""

    schema_name: str
    subject: str
    #: ``None``: the subject has no version yet (nothing to be compatible with)
    compatible: bool | None = None
    schema_id: int | None = None
    versions: tuple[int, ...] = ()
    compatibility: str | None = None
    #: the id of the given schema when the subject holds it already
    registered_id: int | None = None

    def line(self) -> str:
        parts = [f"{self.schema_name}: subject {self.subject}"]
        if self.versions:
            parts.append(f"versions {', '.join(map(str, self.versions))}")
        if self.compatibility:
            parts.append(f"compatibility {self.compatibility}")
        if self.schema_id is not None:
            parts.append(f"id {self.schema_id}")
        if self.registered_id is not None:
            parts.append(f"this schema is id {self.registered_id}")
        elif self.compatible is None:
            parts.append("not registered yet")
        else:
            parts.append("compatible" if self.compatible else "INCOMPATIBLE")
        return "; ".join(parts)


def envelope_subject(registry: RegistrySettings, schema_name: str, topic: str) -> str:
    """The subject ``registry``'s strategy names for ``schema_name`` written to ``topic``."""
    record_name = f"{schemas.NAMESPACE}.{schemas.raw_schema(schema_name)['name']}"
    subject = registry.strategy(SerializationContext(topic, MessageField.VALUE), record_name)
    if not subject:
        raise ConfigurationError(f"the subject name strategy gave no subject for topic {topic!r}")
    return subject


_MISSING = object()


def _registry_call(what: str, call: Callable[[], Any], *, missing: Any = _MISSING) -> Any:
    """``call()``; a 404 gives ``missing`` (when given), other failures typed errors naming ``what``."""
    try:
        return call()
    except Exception as exc:
        if missing is not _MISSING and _is_not_found(exc):
            return missing
        if _unavailable(exc):
            raise SchemaRegistryUnavailableError(
                f"{what}: the schema registry did not answer: {exc}"
            ) from exc
        raise EnvelopeSerializationError(f"{what}: {exc}") from exc


def subject_report(client: Any, schema_name: str, subject: str, schema: Any) -> SubjectReport:
    """The subject's versions and level, and whether ``schema`` is registered there or compatible."""
    versions = tuple(
        _registry_call(f"listing the versions of {subject}", lambda: client.get_versions(subject), missing=())
    )
    if not versions:
        return SubjectReport(schema_name, subject)
    level = _registry_call(
        f"reading the compatibility of {subject}", lambda: client.get_compatibility(subject)
    )
    latest = _registry_call(f"reading {subject}", lambda: client.get_latest_version(subject))
    found = _registry_call(
        f"looking {schema_name} up under {subject}",
        lambda: client.lookup_schema(subject, schema),
        missing=None,
    )
    registered_id = None if found is None else int(found.schema_id)
    compatible = True
    if registered_id is None:
        compatible = bool(
            _registry_call(
                f"checking {schema_name} against {subject}",
                lambda: client.test_compatibility(subject, schema),
            )
        )
    return SubjectReport(
        schema_name,
        subject,
        compatible=compatible,
        schema_id=int(latest.schema_id),
        versions=versions,
        compatibility=str(level) if level else None,
        registered_id=registered_id,
    )


def register_schema(
    client: Any, schema_name: str, subject: str, schema: Any, compatibility: str = DEFAULT_COMPATIBILITY
) -> SubjectReport:
    """Set the subject's compatibility level and register ``schema`` there (the registry refuses an
    incompatible one: :class:`~airflow_kafka_events.errors.EnvelopeSerializationError`)."""
    if compatibility not in COMPATIBILITY_LEVELS:
        raise ConfigurationError(
            f"compatibility {compatibility!r} is not one of {', '.join(COMPATIBILITY_LEVELS)}"
        )
    _registry_call(
        f"setting the compatibility of {subject}",
        lambda: client.set_compatibility(subject_name=subject, level=compatibility),
    )
    _registry_call(
        f"registering {schema_name} under {subject}", lambda: client.register_schema(subject, schema)
    )
    return subject_report(client, schema_name, subject, schema)


def schema_from_text(text: str, origin: str) -> Any:
    """A registry ``Schema`` of an Avro schema's JSON ``text`` (checked to parse)."""
    import fastavro
    from confluent_kafka.schema_registry import Schema

    try:
        fastavro.parse_schema(json.loads(text))
    except Exception as exc:
        raise ConfigurationError(f"{origin} is not an Avro schema: {exc}") from exc
    return Schema(json.dumps(json.loads(text), separators=(",", ":")), schema_type="AVRO")
