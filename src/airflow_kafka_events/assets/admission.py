"""Asset-event admission: one pipeline decides what a consumer lets into Airflow.

The asset watcher and the partition bridge both run every record through
:class:`AdmissionPipeline`, so the checks they share give the same verdict for the same record.
Stages, in order; the first one that decides wins:

=====  ================  ===================================================  ====================
#      stage             refuses / skips                                      dead-letter reason
=====  ================  ===================================================  ====================
1      ``record-size``   value + key + headers over ``max_record_bytes``      ``too-large``
2      ``decode``        a tombstone, bytes that are no envelope, an unknown  ``undecodable``,
                         schema, invalid fields                               ``unknown-schema``,
                                                                              ``invalid-envelope``
3      ``select``        the caller's choice (another asset, no partition     skipped
                         key ...): ``select(envelope)`` returns why
4      ``extra-size``    ``extra`` over ``max_extra_bytes`` of compact JSON   ``too-large``
5      ``signature``     unsigned, or signed with no accepted key; the keys   ``signature-missing``,
                         could not be loaded                                  ``signature-invalid``,
                                                                              ``signing-key-unavailable``
6      ``allowlist``     a source no rule allows                              ``not-allowed``
7      ``causation``     more than ``max_causation_depth`` ancestors          ``causation-too-deep``
8      ``partition-key`` (``check_partition_key``) a key Airflow would refuse ``invalid-envelope``
9      ``dedupe``        a repeat of a seen idempotency key (or event id)     skipped (duplicate)
=====  ================  ===================================================  ====================

Anything else is accepted.  A failure of the pipeline itself (a bug, a ``select`` that raises)
refuses the record with ``internal-error`` instead of raising, so one bad record never stops a
consumer.  Stages 1-2 are about bytes that belong to nobody in particular
(:attr:`AdmissionVerdict.group_scope`): a consumer shared by several watchers dead-letters such
a record once; :meth:`AdmissionPipeline.screen` runs them alone, :meth:`AdmissionPipeline.judge`
runs stages 3-9 on an envelope decoded once for many pipelines.

The pipeline is synchronous and loads nothing: signing keys are given (``signing_keys``: the
keys, or a callable returning them, which may raise — the record is then refused with
``signing-key-unavailable``), and so is the memory of seen keys (any object with ``in`` and
``add(key) -> bool``, e.g. :class:`~airflow_kafka_events.assets.idempotency.SeenKeys`).

How a consumer uses it::

    pipeline = AdmissionPipeline(
        AdmissionConfig(select=asset_selector(asset_uri=uri), allowlist=allowlist,
                        signing_keys=keys_or_provider_or_None, remember_on_accept=True),
        seen=SeenKeys(max_size=100_000, ttl=86_400),
    )
    verdict = pipeline.admit(value, key=key, headers=headers)
    if verdict.accepted:
        hand_over(verdict.envelope)     # then pipeline.remember(verdict) unless remember_on_accept
    elif verdict.rejected:
        dead_letter(value, key, headers, verdict.reason, verdict.error, verdict.envelope)
    commit()                            # skips (verdict.detail says why) are committed too

This module imports no Airflow module.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal, Protocol

from airflow_kafka_events.assets.authz import Allowlist, verify_envelope
from airflow_kafka_events.assets.errors import (
    AuthorizationError,
    CausationTooDeepError,
    ConsumedRecordTooLargeError,
)
from airflow_kafka_events.assets.idempotency import SeenKeys
from airflow_kafka_events.assets.publish import causation_depth
from airflow_kafka_events.assets.validation import (
    DEFAULT_MAX_EXTRA_BYTES,
    check_partition_key,
    extra_size,
    sanitize_asset_uri,
)
from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeDecodeError,
    ExtraTooLargeError,
    PartitionKeyError,
    SchemaRegistryUnavailableError,
    UnknownSchemaError,
    ValidationError,
)
from airflow_kafka_events.kafka.consumer import RecordDecoder
from airflow_kafka_events.kafka.record_size import Header, record_size

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CONSUMER_MAX_CAUSATION_DEPTH",
    "DEFAULT_MAX_RECORD_BYTES",
    "AdmissionConfig",
    "AdmissionPipeline",
    "AdmissionVerdict",
    "KeyProvider",
    "SeenStore",
    "Selector",
    "Stage",
    "asset_selector",
    "decode_reason",
    "seen_key",
]

#: Default bound on a record's bytes (value, key and headers): four times the 64 KiB ``extra``
#: bound of the emit side, far above any valid envelope, far below the 1 MB client limits.
DEFAULT_MAX_RECORD_BYTES = 256 * 1024
#: Default bound on an accepted event's ancestors (the feedback-loop guard of consumers).
DEFAULT_CONSUMER_MAX_CAUSATION_DEPTH = 8

#: Signing keys given as a callable: returns the accepted keys, or raises when it cannot.
KeyProvider = Callable[[], Iterable[bytes | str]]
#: The caller's stage 3: ``None`` to go on, else why the envelope is not this consumer's.
Selector = Callable[[AssetEventEnvelope], "str | None"]


class SeenStore(Protocol):
    """The memory of seen keys the pipeline needs (:class:`SeenKeys` is one)."""

    def __contains__(self, key: object) -> bool: ...

    def add(self, key: str) -> bool: ...


class Stage(str, Enum):
    """The stage that decided a verdict (see the module doc)."""

    RECORD_SIZE = "record-size"
    DECODE = "decode"
    SELECT = "select"
    EXTRA_SIZE = "extra-size"
    SIGNATURE = "signature"
    ALLOWLIST = "allowlist"
    CAUSATION = "causation"
    PARTITION_KEY = "partition-key"
    DEDUPE = "dedupe"
    ACCEPTED = "accepted"
    INTERNAL = "internal"


Action = Literal["accept", "skip", "reject"]


@dataclass(frozen=True)
class AdmissionVerdict:
    """What to do with one record.

    ``accept``: ``envelope`` goes to Airflow (call :meth:`AdmissionPipeline.remember` once it
    is there, unless the pipeline remembers on accept); ``skip``: commit and move on (``detail``
    says why; ``stage`` is ``select`` or ``dedupe``); ``reject``: dead-letter with ``reason``
    and ``error``, then move on.
    """

    action: Action
    stage: Stage
    envelope: AssetEventEnvelope | None = None
    reason: DeadLetterReason | None = None
    error: BaseException | None = None
    detail: str | None = None
    #: the key the dedupe stage looked up (accepted and duplicate verdicts)
    seen_key: str | None = None
    #: bytes of the record (value, key, headers), when the record stages saw it
    record_bytes: int | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    @property
    def skipped(self) -> bool:
        return self.action == "skip"

    @property
    def rejected(self) -> bool:
        return self.action == "reject"

    @property
    def duplicate(self) -> bool:
        return self.action == "skip" and self.stage is Stage.DEDUPE

    @property
    def group_scope(self) -> bool:
        """The refused bytes are no event of any one asset: dead-letter them once per consumer."""
        return self.rejected and self.envelope is None


def _reject(
    stage: Stage,
    reason: DeadLetterReason,
    error: BaseException,
    envelope: AssetEventEnvelope | None = None,
    record_bytes: int | None = None,
) -> AdmissionVerdict:
    return AdmissionVerdict(
        "reject", stage, envelope=envelope, reason=reason, error=error, record_bytes=record_bytes
    )


def decode_reason(error: BaseException) -> DeadLetterReason:
    """The dead-letter reason of bytes that did not decode into an envelope."""
    if isinstance(error, UnknownSchemaError):
        return DeadLetterReason.UNKNOWN_SCHEMA
    if isinstance(error.__cause__, ValidationError):
        return DeadLetterReason.INVALID_ENVELOPE
    return DeadLetterReason.UNDECODABLE


def seen_key(envelope: AssetEventEnvelope) -> str:
    """The dedupe key of an event: its asset URI and idempotency key (else its event id)."""
    key = envelope.idempotency_key or f"event_id:{envelope.event_id}"
    return f"{envelope.asset.uri}\x00{key}"


#: ``sanitize_asset_uri``, remembered: a watcher compares every other asset's URI on its topic,
#: and a triggerer runs many watchers (it is pure; a URI it refuses raises again each time).
_normalized_uri = functools.lru_cache(maxsize=8192)(sanitize_asset_uri)


def asset_selector(
    *, asset_uri: str | None = None, asset_name: str | None = None, include_partitioned: bool = True
) -> Selector:
    """The asset watcher's stage 3: events of one asset (URI and/or name), optionally unpartitioned only.

    The URI is compared as given and normalized like ``airflow.sdk.Asset`` does.
    """
    if asset_uri is None and asset_name is None:
        raise ConfigurationError("asset_selector needs asset_uri and/or asset_name")
    uri = sanitize_asset_uri(asset_uri) if asset_uri is not None else None

    def is_ours(envelope: AssetEventEnvelope) -> bool:
        asset = envelope.asset
        if asset_name is not None and asset.name != asset_name:
            return False
        if uri is None or asset.uri == uri:
            return True
        try:
            return _normalized_uri(asset.uri) == uri
        except Exception:
            return False

    def select(envelope: AssetEventEnvelope) -> str | None:
        if not is_ours(envelope):
            return f"for asset {envelope.asset.uri!r}, not {uri or asset_name!r}"
        if not include_partitioned and envelope.partition_key is not None:
            return "has a partition key and include_partitioned is off"
        return None

    return select


def _positive_int(name: str, value: Any, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ConfigurationError(f"{name} must be an int {bound}, got {value!r}")


def _key_tuple(keys: Iterable[bytes | str]) -> tuple[bytes, ...]:
    result = tuple(key.encode("utf-8") if isinstance(key, str) else key for key in keys)
    if not result or any(not isinstance(key, bytes) or not key for key in result):
        raise ConfigurationError(
            "signing_keys must be non-empty keys (bytes or str), at least one; pass None to accept "
            "unsigned events"
        )
    return result


@dataclass(frozen=True)
class AdmissionConfig:
    """How a consumer admits records; validated on construction (:class:`ConfigurationError`).

    ``signing_keys``: ``None`` accepts unsigned events; keys (bytes or str) or a
    :data:`KeyProvider` require a signature by one of them.  ``select``: the caller's stage 3
    (see :func:`asset_selector`).  ``check_partition_key``: refuse keys Airflow would refuse
    (the bridge posts them; a watcher's events carry none).  ``remember_on_accept``: the dedupe
    stage records an accepted key at once; otherwise the caller calls
    :meth:`AdmissionPipeline.remember` once the event is in Airflow.  ``dedupe=False`` leaves
    repeats to the caller.
    """

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_extra_bytes: int = DEFAULT_MAX_EXTRA_BYTES
    signing_keys: tuple[bytes, ...] | KeyProvider | None = field(default=None, repr=False)
    allowlist: Allowlist | None = None
    max_causation_depth: int = DEFAULT_CONSUMER_MAX_CAUSATION_DEPTH
    check_partition_key: bool = False
    select: Selector | None = None
    remember_on_accept: bool = False
    #: ``False``: no stage 9 (the caller drops repeats itself, e.g. with a durable store)
    dedupe: bool = True

    def __post_init__(self) -> None:
        _positive_int("max_record_bytes", self.max_record_bytes)
        _positive_int("max_extra_bytes", self.max_extra_bytes)
        _positive_int("max_causation_depth", self.max_causation_depth, allow_zero=True)
        if self.signing_keys is not None and not callable(self.signing_keys):
            object.__setattr__(self, "signing_keys", _key_tuple(self.signing_keys))
        if self.allowlist is not None and not isinstance(self.allowlist, Allowlist):
            raise ConfigurationError(
                f"allowlist must be an Allowlist or None, got {type(self.allowlist).__qualname__}; "
                "build it with Allowlist.from_config(rules)"
            )
        if self.select is not None and not callable(self.select):
            raise ConfigurationError(f"select must be a callable or None, got {self.select!r}")


class AdmissionPipeline:
    """The stages of the module doc with one :class:`AdmissionConfig` and one memory of seen keys.

    Not thread-safe by itself beyond what ``seen`` is: give each consumer loop its own pipeline.
    """

    def __init__(
        self,
        config: AdmissionConfig,
        *,
        seen: SeenStore | None = None,
        decoder: RecordDecoder[AssetEventEnvelope] = ASSET_EVENT_CODEC,
    ) -> None:
        if not isinstance(config, AdmissionConfig):
            raise ConfigurationError(f"config must be an AdmissionConfig, got {type(config).__qualname__}")
        self.config = config
        self.seen: SeenStore = seen if seen is not None else SeenKeys()
        self.decoder = decoder

    # ------------------------------------------------------------------ the whole pipeline
    def admit(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        decoded: AssetEventEnvelope | BaseException | None = None,
        signing_keys: Iterable[bytes | str] | KeyProvider | BaseException | None = None,
    ) -> AdmissionVerdict:
        """The verdict on one record (its value, key and headers).

        ``decoded``: the record's envelope, or the exception decoding raised, when the caller
        decoded it already (an :class:`EnvelopeDecodeError` gets its reason, any other exception
        ``internal-error``).
        ``signing_keys``: this call's keys (or provider, or the error that prevented loading
        them), overriding the config's; only used when the config requires signatures.
        """
        screened = self.screen(value, key=key, headers=headers, decoded=decoded)
        if isinstance(screened, AdmissionVerdict):
            return screened
        envelope, size = screened
        return self.judge(envelope, signing_keys=signing_keys, record_bytes=size)

    def screen(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        decoded: AssetEventEnvelope | BaseException | None = None,
    ) -> tuple[AssetEventEnvelope, int] | AdmissionVerdict:
        """Stages 1-2: the envelope and the record's bytes, or a (group-scope) rejection."""
        size: int | None = None
        try:
            size = record_size(value, key, headers)
            limit = self.config.max_record_bytes
            if size > limit:
                error = ConsumedRecordTooLargeError(
                    f"the record is {size} bytes (value, key and headers), over this consumer's "
                    f"max_record_bytes={limit}: asset events should carry references (paths, ids), "
                    "not data; publish less, or raise max_record_bytes if such records are expected"
                )
                return _reject(Stage.RECORD_SIZE, DeadLetterReason.TOO_LARGE, error, record_bytes=size)
            if decoded is None:
                decoded = self._decode(value)
            if isinstance(decoded, EnvelopeDecodeError):
                return _reject(Stage.DECODE, decode_reason(decoded), decoded, record_bytes=size)
            if isinstance(decoded, SchemaRegistryUnavailableError):
                raise decoded  # the record is not at fault: the caller tries it again later
            if isinstance(decoded, BaseException):  # the caller's decoder failed otherwise: a bug
                return _reject(Stage.INTERNAL, DeadLetterReason.INTERNAL_ERROR, decoded, record_bytes=size)
            return decoded, size
        except SchemaRegistryUnavailableError:
            raise
        except Exception as exc:  # a bug: keep the record (dead-lettered) rather than stop
            log.exception("admission failed while screening a record")
            return _reject(Stage.INTERNAL, DeadLetterReason.INTERNAL_ERROR, exc, record_bytes=size)

    def _decode(self, value: bytes | None) -> AssetEventEnvelope | EnvelopeDecodeError:
        if value is None:
            return EnvelopeDecodeError("the record has no value (a tombstone), not an asset event envelope")
        try:
            return self.decoder.decode(value)
        except EnvelopeDecodeError as exc:
            return exc

    # ------------------------------------------------------------------ envelope stages
    def judge(
        self,
        envelope: AssetEventEnvelope,
        *,
        signing_keys: Iterable[bytes | str] | KeyProvider | BaseException | None = None,
        record_bytes: int | None = None,
    ) -> AdmissionVerdict:
        """Stages 3-9 on a decoded envelope (see :meth:`admit` for ``signing_keys``)."""
        try:
            verdict = self._judge(envelope, signing_keys)
        except Exception as exc:  # a bug, or a select that raised: dead-letter, never stop
            log.exception("admission failed while judging event %s", envelope.event_id)
            verdict = _reject(Stage.INTERNAL, DeadLetterReason.INTERNAL_ERROR, exc, envelope)
        if record_bytes is not None:
            verdict = replace(verdict, record_bytes=record_bytes)
        return verdict

    def _judge(self, envelope: AssetEventEnvelope, signing_keys: Any) -> AdmissionVerdict:
        config = self.config
        if config.select is not None:
            why = config.select(envelope)
            if why is not None:
                return AdmissionVerdict("skip", Stage.SELECT, envelope=envelope, detail=why)
        for stage, check in (
            (Stage.EXTRA_SIZE, self._check_extra),
            (Stage.SIGNATURE, lambda env: self._check_signature(env, signing_keys)),
            (Stage.ALLOWLIST, self._check_allowlist),
            (Stage.CAUSATION, self._check_causation),
            (Stage.PARTITION_KEY, self._check_partition_key),
        ):
            refusal = check(envelope)
            if refusal is not None:
                reason, error = refusal
                return _reject(stage, reason, error, envelope)
        return self._dedupe(envelope)

    def _check_extra(self, envelope: AssetEventEnvelope) -> tuple[DeadLetterReason, BaseException] | None:
        limit = self.config.max_extra_bytes
        size = extra_size(envelope.extra)
        if size <= limit:
            return None
        return DeadLetterReason.TOO_LARGE, ExtraTooLargeError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} has an extra of {size} bytes "
            f"as compact UTF-8 JSON, over this consumer's max_extra_bytes={limit}: put references "
            "(paths, ids) in extra, not the data itself, or raise max_extra_bytes"
        )

    def _check_signature(
        self, envelope: AssetEventEnvelope, override: Any
    ) -> tuple[DeadLetterReason, BaseException] | None:
        source = self.config.signing_keys
        if source is None:
            return None
        if override is not None:
            source = override
        try:
            if isinstance(source, BaseException):
                raise source
            keys = _key_tuple(source() if callable(source) else source)
        except Exception as exc:
            return DeadLetterReason.SIGNING_KEY_UNAVAILABLE, exc
        try:
            verify_envelope(envelope, keys)
        except AuthorizationError as exc:
            return DeadLetterReason(exc.reason), exc
        return None

    def _check_allowlist(self, envelope: AssetEventEnvelope) -> tuple[DeadLetterReason, BaseException] | None:
        if self.config.allowlist is None:
            return None
        try:
            self.config.allowlist.check(envelope)
        except AuthorizationError as exc:
            return DeadLetterReason.NOT_ALLOWED, exc
        return None

    def _check_causation(self, envelope: AssetEventEnvelope) -> tuple[DeadLetterReason, BaseException] | None:
        depth, limit = causation_depth(envelope), self.config.max_causation_depth
        if depth <= limit:
            return None
        return DeadLetterReason.CAUSATION_TOO_DEEP, CausationTooDeepError(
            f"event {envelope.event_id} for asset {envelope.asset.uri!r} has {depth} ancestor "
            f"event(s), more than max_causation_depth={limit}: DAGs "
            "triggering each other through this asset look like a feedback loop"
        )

    def _check_partition_key(
        self, envelope: AssetEventEnvelope
    ) -> tuple[DeadLetterReason, BaseException] | None:
        if not self.config.check_partition_key:
            return None
        try:
            check_partition_key(envelope.partition_key)
        except PartitionKeyError as exc:
            return DeadLetterReason.INVALID_ENVELOPE, exc
        return None

    def _dedupe(self, envelope: AssetEventEnvelope) -> AdmissionVerdict:
        key = seen_key(envelope)
        if not self.config.dedupe:
            return AdmissionVerdict("accept", Stage.ACCEPTED, envelope=envelope, seen_key=key)
        repeat = (not self.seen.add(key)) if self.config.remember_on_accept else key in self.seen
        if repeat:
            detail = f"repeats idempotency key {envelope.idempotency_key or envelope.event_id!r}"
            return AdmissionVerdict("skip", Stage.DEDUPE, envelope=envelope, detail=detail, seen_key=key)
        return AdmissionVerdict("accept", Stage.ACCEPTED, envelope=envelope, seen_key=key)

    # ------------------------------------------------------------------ after delivery
    def remember(self, verdict: AdmissionVerdict) -> None:
        """Record an accepted event's key once it reached Airflow: a later repeat is a duplicate."""
        if verdict.accepted and verdict.seen_key is not None:
            self.seen.add(verdict.seen_key)
