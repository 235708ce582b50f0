"""Who may publish an asset event for a consumer: allowlists and HMAC-SHA256 envelope signatures.

Two independent checks a consumer (the asset watcher) can apply to an
:class:`~airflow_kafka_events.envelopes.AssetEventEnvelope` before it becomes an Airflow asset
event.  Both raise an :class:`AuthorizationError` subclass whose ``reason`` is the short code a
dead-letter record carries.

**Allowlist** (:class:`Allowlist`): a list of rules; an event is allowed when its ``source``
matches at least one rule.  A rule restricts one or more of

* ``source_kinds`` -- :class:`~airflow_kafka_events.envelopes.SourceKind` values
  (``task``, ``dag_callback``, ``task_callback``, ``notifier``, ``external``);
* ``dag_ids`` -- ``fnmatch`` patterns (case-sensitive) the source's ``dag_id`` must match;
* ``producers`` -- ``fnmatch`` patterns the source's ``producer`` name must match;

and matches when every field it names matches (a field it does not name is unrestricted; a
source without a ``dag_id`` / ``producer`` never matches a rule that names that field).  The
JSON form, used as trigger keyword arguments, is a list of objects::

    [{"source_kinds": ["dag_callback"], "dag_ids": ["etl_*"]},
     {"source_kinds": ["external"], "producers": ["ci-pipeline"]}]

Sources are *declared by the sender*: an allowlist alone guards against mistakes (a DAG
emitting to the wrong asset), not against a malicious client that can write to the topic.
Pair it with Kafka ACLs on the topic and with signatures.

**Signatures**: HMAC-SHA256 with a shared secret key over the canonical encoding of the
envelope *without* its ``signature`` field (:func:`signing_payload`, recipe
:data:`SIGNATURE_RECIPE`)::

    ASCII bytes of the compact JSON (sorted keys, separators "," and ":", non-ASCII as \\uXXXX,
    no NaN/Infinity) of
    ["airflow-kafka-events/asset-event-signature/v1",
     {"event_id": ..., "asset": {"name": ..., "uri": ...},
      "partition_key": <str or null>,
      "partition_date": <UTC ISO-8601 with microseconds, "2026-01-02T03:04:05.000000+00:00", or null>,
      "extra": <the extra JSON object>, "idempotency_key": <str or null>,
      "source": {"kind": ..., "dag_id": ..., "run_id": ..., "task_id": ..., "map_index": ...,
                 "try_number": ..., "producer": ...},
      "emitted_at": <UTC ISO-8601 with microseconds>, "causation": [<event ids>]}]

:func:`sign_envelope` returns a copy carrying the 32-byte digest in ``signature``;
:func:`verify_envelope` recomputes it with each accepted key (key rotation: the current key
first, then previous ones) and compares in constant time.  Keys are ``bytes`` or ``str``
(UTF-8); use at least 32 random bytes (``python -c "import secrets;
print(secrets.token_urlsafe(32))"``).  Key material is always provided by the caller: this
module reads no configuration and imports no Airflow module.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_events.envelopes import AssetEventEnvelope, EventSource, SourceKind
from airflow_kafka_events.errors import AirflowKafkaEventsError, ValidationError

__all__ = [
    "SIGNATURE_RECIPE",
    "AllowRule",
    "Allowlist",
    "AuthorizationError",
    "NotAllowedError",
    "SignatureError",
    "SignatureInvalidError",
    "SignatureMissingError",
    "SigningKey",
    "compute_signature",
    "is_signature_valid",
    "sign_envelope",
    "signing_payload",
    "verify_envelope",
]

#: First element of the signed JSON array; names the recipe so that a later one cannot collide.
SIGNATURE_RECIPE = "airflow-kafka-events/asset-event-signature/v1"

#: A signing key: raw bytes, or a str used as its UTF-8 bytes.
SigningKey = bytes | str

_RULE_FIELDS = ("source_kinds", "dag_ids", "producers")


# --------------------------------------------------------------------------- errors
class AuthorizationError(AirflowKafkaEventsError):
    """An asset event was refused by a consumer's authorization checks.

    ``reason`` is the short code written to the dead-letter record's ``x-reason`` header.
    """

    reason = "not-authorized"


class NotAllowedError(AuthorizationError):
    """The event's source matches no rule of the consumer's allowlist."""

    reason = "not-allowed"


class SignatureError(AuthorizationError):
    """The event's signature could not be verified."""

    reason = "signature-invalid"


class SignatureMissingError(SignatureError):
    """The consumer requires signed events and this one carries no signature."""

    reason = "signature-missing"


class SignatureInvalidError(SignatureError):
    """The signature does not match the envelope under any accepted key."""

    reason = "signature-invalid"


# --------------------------------------------------------------------------- allowlist
def _str_set(field: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError(f"allow rule field {field!r} must be a list of str, got {value!r}")
    items: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item:
            raise ValidationError(f"allow rule field {field!r} holds {item!r}: expected a non-empty str")
        if item not in items:
            items.append(item)
    if not items:
        raise ValidationError(
            f"allow rule field {field!r} is empty, which would match nothing; leave it out to allow any"
        )
    return tuple(items)


@dataclass(frozen=True)
class AllowRule:
    """One allowlist rule; ``None`` fields are unrestricted (see the module docstring)."""

    source_kinds: tuple[str, ...] | None = None
    dag_ids: tuple[str, ...] | None = None
    producers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.source_kinds is None and self.dag_ids is None and self.producers is None:
            raise ValidationError(
                "an allow rule must restrict at least one of source_kinds, dag_ids, producers "
                "(use no allowlist at all to accept any source)"
            )
        if self.source_kinds is not None:
            kinds = _str_set("source_kinds", self.source_kinds)
            allowed = {kind.value for kind in SourceKind}
            unknown = [kind for kind in kinds if kind not in allowed]
            if unknown:
                raise ValidationError(
                    f"allow rule source_kinds {unknown} are not source kinds; use {sorted(allowed)}"
                )
            object.__setattr__(self, "source_kinds", kinds)
        if self.dag_ids is not None:
            object.__setattr__(self, "dag_ids", _str_set("dag_ids", self.dag_ids))
        if self.producers is not None:
            object.__setattr__(self, "producers", _str_set("producers", self.producers))

    @classmethod
    def from_dict(cls, rule: Mapping[str, Any]) -> AllowRule:
        if not isinstance(rule, Mapping):
            raise ValidationError(f"an allow rule must be a mapping, got {type(rule).__qualname__}")
        unknown = sorted(set(rule) - set(_RULE_FIELDS))
        if unknown:
            raise ValidationError(f"allow rule has unknown fields {unknown}; use {list(_RULE_FIELDS)}")
        return cls(**{name: rule[name] for name in _RULE_FIELDS if rule.get(name) is not None})

    def to_dict(self) -> dict[str, list[str]]:
        """The JSON form (only the fields the rule restricts)."""
        return {name: list(value) for name in _RULE_FIELDS if (value := getattr(self, name)) is not None}

    def matches(self, source: EventSource) -> bool:
        if self.source_kinds is not None and source.kind.value not in self.source_kinds:
            return False
        if self.dag_ids is not None and not _matches_any(source.dag_id, self.dag_ids):
            return False
        return self.producers is None or _matches_any(source.producer, self.producers)

    def describe(self) -> str:
        return " and ".join(f"{name} in {list(value)}" for name, value in self.to_dict().items())


def _matches_any(value: str | None, patterns: Sequence[str]) -> bool:
    return value is not None and any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)


@dataclass(frozen=True)
class Allowlist:
    """Rules an event's source must match (at least one of them)."""

    rules: tuple[AllowRule, ...]

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        if not rules:
            raise ValidationError(
                "an allowlist needs at least one rule (an empty one would refuse every event); "
                "use no allowlist at all to accept any source"
            )
        for rule in rules:
            if not isinstance(rule, AllowRule):
                raise ValidationError(f"allowlist rules must be AllowRule, got {type(rule).__qualname__}")
        object.__setattr__(self, "rules", rules)

    @classmethod
    def from_config(cls, config: Iterable[Mapping[str, Any]] | None) -> Allowlist | None:
        """An allowlist from its JSON form (a list of rule objects); ``None`` gives ``None``."""
        if config is None:
            return None
        if isinstance(config, (str, bytes, Mapping)) or not isinstance(config, Iterable):
            raise ValidationError(f"allow must be a list of rule objects, got {type(config).__qualname__}")
        return cls(tuple(AllowRule.from_dict(rule) for rule in config))

    def to_config(self) -> list[dict[str, list[str]]]:
        return [rule.to_dict() for rule in self.rules]

    def allows(self, source: EventSource) -> bool:
        return any(rule.matches(source) for rule in self.rules)

    def check(self, envelope: AssetEventEnvelope) -> None:
        """Raise :class:`NotAllowedError` unless the envelope's source matches a rule."""
        source = envelope.source
        if self.allows(source):
            return
        rules = "; ".join(f"({rule.describe()})" for rule in self.rules)
        raise NotAllowedError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} comes from source "
            f"kind={source.kind.value!r} dag_id={source.dag_id!r} producer={source.producer!r}, "
            f"which matches no allow rule: {rules}"
        )


# --------------------------------------------------------------------------- signatures
def _utc_text(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def signing_payload(envelope: AssetEventEnvelope) -> bytes:
    """The bytes that are signed: the canonical encoding of ``envelope`` without ``signature``."""
    body = {
        "event_id": envelope.event_id,
        "asset": {"name": envelope.asset.name, "uri": envelope.asset.uri},
        "partition_key": envelope.partition_key,
        "partition_date": _utc_text(envelope.partition_date),
        "extra": dict(envelope.extra),
        "idempotency_key": envelope.idempotency_key,
        "source": envelope.source.to_avro(),
        "emitted_at": _utc_text(envelope.emitted_at),
        "causation": list(envelope.causation),
    }
    try:
        text = json.dumps(
            [SIGNATURE_RECIPE, body],
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"the envelope cannot be encoded for signing: {exc}") from exc
    return text.encode("ascii")


def _key_bytes(key: Any) -> bytes:
    if isinstance(key, str):
        key = key.encode("utf-8")
    elif isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    if not isinstance(key, bytes):
        raise ValidationError(f"a signing key must be bytes or str, got {type(key).__qualname__}")
    if not key:
        raise ValidationError("a signing key must not be empty")
    return key


def _keys(keys: SigningKey | Iterable[SigningKey]) -> list[bytes]:
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        return [_key_bytes(keys)]
    if not isinstance(keys, Iterable):
        raise ValidationError(f"signing keys must be a key or a list of keys, got {type(keys).__qualname__}")
    result = [_key_bytes(key) for key in keys]
    if not result:
        raise ValidationError("at least one signing key is needed")
    return result


def compute_signature(envelope: AssetEventEnvelope, key: SigningKey) -> bytes:
    """HMAC-SHA256 (32 bytes) of :func:`signing_payload` under ``key``."""
    return hmac.new(_key_bytes(key), signing_payload(envelope), hashlib.sha256).digest()


def sign_envelope(envelope: AssetEventEnvelope, key: SigningKey) -> AssetEventEnvelope:
    """A copy of ``envelope`` whose ``signature`` is its HMAC-SHA256 under ``key``.

    Any existing signature is replaced (it is not part of what is signed).
    """
    return dataclasses.replace(envelope, signature=compute_signature(envelope, key))


def is_signature_valid(envelope: AssetEventEnvelope, keys: SigningKey | Iterable[SigningKey]) -> bool:
    """Whether ``envelope`` carries a signature made with one of ``keys``."""
    if envelope.signature is None:
        return False
    payload = signing_payload(envelope)
    valid = False
    for key in _keys(keys):
        expected = hmac.new(key, payload, hashlib.sha256).digest()
        # no early exit: the time taken does not tell which key matched
        valid = hmac.compare_digest(expected, envelope.signature) or valid
    return valid


def verify_envelope(envelope: AssetEventEnvelope, keys: SigningKey | Iterable[SigningKey]) -> None:
    """Raise :class:`SignatureMissingError` / :class:`SignatureInvalidError` unless signed with a key.

    ``keys`` is one key or several (key rotation: every listed key is accepted).
    """
    accepted = _keys(keys)
    if envelope.signature is None:
        raise SignatureMissingError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} is not signed, "
            "but this consumer only accepts signed events"
        )
    if not is_signature_valid(envelope, accepted):
        raise SignatureInvalidError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} carries a signature that "
            f"matches none of the {len(accepted)} accepted key(s) (tampered, or signed with another key)"
        )
