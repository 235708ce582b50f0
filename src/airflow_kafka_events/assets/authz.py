"""Who may publish an asset event for a consumer: allowlists and HMAC-SHA256 envelope signatures.

Two independent checks a consumer (the asset watcher) can apply to an
:class:`~airflow_kafka_events.envelopes.model.AssetEventEnvelope` before it becomes an Airflow asset
event.  Both raise an :class:`AuthorizationError` subclass whose ``reason`` is the short code a
dead-letter record carries.

**Allowlist** (:class:`Allowlist`): a list of rules; an event is allowed when its ``source``
matches at least one rule.  A rule restricts one or more of

* ``source_kinds`` -- :class:`~airflow_kafka_events.envelopes.model.SourceKind` values
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

**Signatures**: HMAC-SHA256 with a shared secret key over bytes that any language can rebuild
from the Avro record alone (:func:`signing_payload`, recipe :data:`SIGNATURE_RECIPE_V2`).  The
``signature`` field holds ``b"v2:"`` followed by the 32-byte digest (35 bytes).

The signed bytes are a sequence of *items*.  An item is a UTF-8 string framed by its length as
4 bytes big-endian, ``len(utf8) || utf8``; an absent value (Avro ``null``) is the 4 bytes
``FF FF FF FF`` and nothing else.  Numbers are items holding their ASCII decimal text (``-`` for
negatives, no ``+``, no leading zeros); timestamps are the Avro ``timestamp-micros`` long
(microseconds since the Unix epoch).  The items, in this order::

    "airflow-kafka-events/asset-event-signature/v2"
    event_id, asset.name, asset.uri, partition_key, partition_date (micros or null)
    N = number of extra entries, then N pairs: key, value text
    idempotency_key
    source.kind (the enum symbol), source.dag_id, source.run_id, source.task_id,
    source.map_index, source.try_number, source.producer
    emitted_at (micros)
    M = number of causation ids, then the M ids in order

The ``extra`` value texts are the map values *exactly as carried* in the Avro record (each is
the strict JSON text of that key's value, see :mod:`airflow_kafka_events.envelopes.model`): they are
signed verbatim, never re-serialized, so ``1`` and ``1.0``, ``12345678901234567890`` and
``-0.0`` keep their meaning in every language.  The pairs are sorted by the key's UTF-8 bytes
(unsigned bytewise order; Avro map order is not fixed).  A Python envelope holds parsed values;
their texts are :func:`~airflow_kafka_events.envelopes.json_values.json_to_text` of each value, the very
texts the codec writes (:func:`extra_texts`).  A consumer that reads the raw Avro record can pass
its texts as ``extra_texts`` to verify what another language wrote verbatim.  Test vectors (key,
envelope bytes, signature) are in ``tests/vectors/signatures``.

A bare 32-byte digest (``signature_version`` 1: a Python re-serialization of the parsed
``extra`` that other languages cannot reproduce for some numbers) is refused with a
:class:`SignatureInvalidError` that says to sign with version 2.

:func:`verify_envelope` recomputes the digest with each accepted key (key rotation: the current
key first, then previous ones) and compares in constant time.  Keys are ``bytes`` or ``str``
(UTF-8); use at least 32 random bytes (``python -c "import secrets;
print(secrets.token_urlsafe(32))"``).  Key material is always provided by the caller: this
module reads no configuration and imports no Airflow module.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_kafka_events.assets.errors import (
    NotAllowedError,
    SignatureInvalidError,
    SignatureMissingError,
)
from airflow_kafka_events.envelopes.json_values import json_to_text
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, EventSource, SourceKind
from airflow_kafka_events.errors import ValidationError

__all__ = [
    "SIGNATURE_PREFIX_V2",
    "SIGNATURE_RECIPE_V2",
    "AllowRule",
    "Allowlist",
    "SigningKey",
    "compute_signature",
    "extra_texts",
    "is_signature_valid",
    "sign_envelope",
    "signature_version",
    "signing_payload",
    "verify_envelope",
]

log = logging.getLogger(__name__)

#: Version 2: the first item of the signed bytes.
SIGNATURE_RECIPE_V2 = "airflow-kafka-events/asset-event-signature/v2"
#: Version 2 signatures are this prefix followed by the 32-byte HMAC-SHA256 digest.
SIGNATURE_PREFIX_V2 = b"v2:"

#: A signing key: raw bytes, or a str used as its UTF-8 bytes.
SigningKey = bytes | str

_RULE_FIELDS = ("source_kinds", "dag_ids", "producers")


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
_DIGEST_SIZE = 32
_NULL_ITEM = b"\xff\xff\xff\xff"
_MAX_ITEM = 0xFFFFFFFE
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def _item(value: str | int | None) -> bytes:
    """One framed item: 4-byte big-endian length + UTF-8 bytes, or FF FF FF FF for null."""
    if value is None:
        return _NULL_ITEM
    data = str(value).encode("utf-8")  # an int: its decimal text
    if len(data) > _MAX_ITEM:
        raise ValidationError(f"a signed field of {len(data)} bytes is too long to frame")
    return len(data).to_bytes(4, "big") + data


def _micros(value: datetime | None) -> int | None:
    """The Avro timestamp-micros long of an aware datetime (exact integer arithmetic)."""
    return None if value is None else (value - _EPOCH) // _MICROSECOND


def extra_texts(envelope: AssetEventEnvelope) -> dict[str, str]:
    """The Avro map the codec writes for ``envelope.extra``: key -> strict JSON text of its value."""
    return {key: json_to_text(value, what=f"extra[{key!r}]") for key, value in envelope.extra.items()}


def _v2_items(envelope: AssetEventEnvelope, texts: Mapping[str, str]) -> list[bytes]:
    source = envelope.source
    items = [
        _item(SIGNATURE_RECIPE_V2),
        _item(envelope.event_id),
        _item(envelope.asset.name),
        _item(envelope.asset.uri),
        _item(envelope.partition_key),
        _item(_micros(envelope.partition_date)),
        _item(len(texts)),
    ]
    for key, text in sorted(texts.items(), key=lambda pair: pair[0].encode("utf-8")):
        items += (_item(key), _item(text))
    items += [
        _item(envelope.idempotency_key),
        _item(source.kind.value),
        _item(source.dag_id),
        _item(source.run_id),
        _item(source.task_id),
        _item(source.map_index),
        _item(source.try_number),
        _item(source.producer),
        _item(_micros(envelope.emitted_at)),
        _item(len(envelope.causation)),
    ]
    items += (_item(event_id) for event_id in envelope.causation)
    return items


def signing_payload(envelope: AssetEventEnvelope, *, extra_texts: Mapping[str, str] | None = None) -> bytes:
    """The version 2 signed bytes of ``envelope`` (see the module docstring); ``signature`` is not in them.

    ``extra_texts`` are the ``extra`` map values exactly as read from the Avro record; by default
    those a decoded envelope kept (``envelope.wire_extra``), else the texts the codec writes for
    ``envelope.extra`` (:func:`extra_texts`).
    """
    try:
        texts = _extra_texts_of(envelope) if extra_texts is None else dict(extra_texts)
        if set(texts) != set(envelope.extra):
            raise ValidationError("extra_texts must have the same keys as the envelope's extra")
        return b"".join(_v2_items(envelope, texts))
    except UnicodeEncodeError as exc:
        raise ValidationError(f"the envelope cannot be encoded for signing: {exc}") from exc


def _extra_texts_of(envelope: AssetEventEnvelope) -> dict[str, str]:
    wire = envelope.wire_extra
    if wire is not None and set(wire) == set(envelope.extra):
        return dict(wire)  # decoded: the texts the producer signed, whatever language wrote them
    try:
        return extra_texts(envelope)
    except ValidationError:
        raise
    except Exception as exc:  # EnvelopeEncodeError: a value that is not JSON
        raise ValidationError(f"the envelope cannot be encoded for signing: {exc}") from exc


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


def signature_version(signature: bytes | None) -> int | None:
    """2 for ``b"v2:"`` + 32 bytes, 1 for a bare 32-byte digest, None for anything else."""
    if signature is None:
        return None
    if len(signature) == len(SIGNATURE_PREFIX_V2) + _DIGEST_SIZE and signature.startswith(
        SIGNATURE_PREFIX_V2
    ):
        return 2
    return 1 if len(signature) == _DIGEST_SIZE else None


def compute_signature(
    envelope: AssetEventEnvelope, key: SigningKey, *, extra_texts: Mapping[str, str] | None = None
) -> bytes:
    """The version 2 ``signature`` value: ``b"v2:"`` + HMAC-SHA256 of :func:`signing_payload`."""
    payload = signing_payload(envelope, extra_texts=extra_texts)
    return SIGNATURE_PREFIX_V2 + hmac.new(_key_bytes(key), payload, hashlib.sha256).digest()


def sign_envelope(envelope: AssetEventEnvelope, key: SigningKey) -> AssetEventEnvelope:
    """A copy of ``envelope`` whose ``signature`` is its version 2 signature under ``key``.

    Any existing signature is replaced (it is not part of what is signed).
    """
    # signed as the codec will write it: not with texts another producer put on the wire
    unsigned = dataclasses.replace(envelope, wire_extra=None)
    return dataclasses.replace(unsigned, signature=compute_signature(unsigned, key))


def is_signature_valid(
    envelope: AssetEventEnvelope,
    keys: SigningKey | Iterable[SigningKey],
    *,
    extra_texts: Mapping[str, str] | None = None,
) -> bool:
    """Whether ``envelope`` carries a version 2 signature made with one of ``keys``."""
    accepted = _keys(keys)
    if signature_version(envelope.signature) != 2:
        return False
    assert envelope.signature is not None
    payload = signing_payload(envelope, extra_texts=extra_texts)
    digest = envelope.signature[len(SIGNATURE_PREFIX_V2) :]
    valid = False
    for key in accepted:
        expected = hmac.new(key, payload, hashlib.sha256).digest()
        # no early exit: the time taken does not tell which key matched
        valid = hmac.compare_digest(expected, digest) or valid
    return valid


def verify_envelope(
    envelope: AssetEventEnvelope,
    keys: SigningKey | Iterable[SigningKey],
    *,
    extra_texts: Mapping[str, str] | None = None,
) -> None:
    """Raise :class:`SignatureMissingError` / :class:`SignatureInvalidError` unless signed with a key.

    ``keys`` is one key or several (key rotation: every listed key is accepted).  Only version 2
    signatures are accepted.
    ``extra_texts``: the raw Avro ``extra`` texts, when the caller has them (see the module docs).
    """
    accepted = _keys(keys)
    if envelope.signature is None:
        raise SignatureMissingError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} is not signed, "
            "but this consumer only accepts signed events"
        )
    version = signature_version(envelope.signature)
    if version == 1:
        raise SignatureInvalidError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} carries a version 1 signature "
            "(a bare 32-byte digest), which is not accepted: sign it with sign_envelope (version 2)"
        )
    if not is_signature_valid(envelope, accepted, extra_texts=extra_texts):
        form = "" if version else f" of {len(envelope.signature)} bytes (neither version 1 nor 2)"
        raise SignatureInvalidError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} carries a signature{form} that "
            f"matches none of the {len(accepted)} accepted key(s) (tampered, or signed with another key)"
        )
