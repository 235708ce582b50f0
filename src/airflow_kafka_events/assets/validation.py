"""Checks run on an asset event before anything is sent, and key-name redaction.

Every check raises a subclass of :class:`~airflow_kafka_events.errors.AssetEventValidationError`
(itself a :class:`~airflow_kafka_events.errors.ValidationError`).  The rules mirror what
Airflow 3.3 accepts, so that an event that reaches Kafka can become an Airflow asset event:

* partition keys: ``str``, not blank or whitespace-only (``not key.strip()``), at most 250
  characters — Airflow's ``ID_LEN`` column width, enforced by the Execution API
  (``_validate_outlet_event_partition_keys``), ``OutletEventAccessor.add_partitions`` and
  ``SerializedDAG.validate_partition_key``;
* partition dates: timezone-aware ``datetime``, and only together with a partition key;
* asset name / URI: non-empty ``str`` of at most 1500 characters, not whitespace-only, name not
  ``self`` / ``context``; URIs are normalized like ``airflow.sdk.Asset`` does (lower-case scheme,
  no trailing slash, sorted query, no fragment, user info dropped when it holds a password,
  scheme ``airflow`` reserved) except for scheme-specific normalizers that providers register;
* ``extra``: a JSON object (``str`` keys, strict JSON values) of at most
  :data:`DEFAULT_MAX_EXTRA_BYTES` bytes as compact UTF-8 JSON, measured after redaction.

This module imports no Airflow module.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from airflow_kafka_events.envelopes.json_values import json_to_text
from airflow_kafka_events.errors import (
    CausationError,
    CausationLoopError,
    EnvelopeEncodeError,
    ExtraNotSerializableError,
    ExtraTooLargeError,
    IdempotencyKeyError,
    InvalidAssetError,
    NaiveDatetimeError,
    PartitionDateError,
    PartitionDateWithoutKeyError,
    PartitionKeyError,
    ValidationError,
)

__all__ = [
    "ASSET_IDENTIFIER_MAX_LENGTH",
    "DEFAULT_MAX_CAUSATION_DEPTH",
    "DEFAULT_MAX_EXTRA_BYTES",
    "EXTERNAL_SENSITIVE_KEYS",
    "IDEMPOTENCY_KEY_MAX_LENGTH",
    "PARTITION_KEY_MAX_LENGTH",
    "REDACTED",
    "Redactor",
    "check_asset",
    "check_causation",
    "check_extra",
    "check_idempotency_key",
    "check_partition",
    "check_partition_key",
    "check_timeout",
    "extra_size",
    "is_sensitive_key",
    "redact_by_key",
    "redact_external",
    "sanitize_asset_uri",
]

#: Longest partition key Airflow stores (``airflow.models.base.ID_LEN``).
PARTITION_KEY_MAX_LENGTH = 250
#: Longest asset name or URI Airflow accepts.
ASSET_IDENTIFIER_MAX_LENGTH = 1500
#: Default bound on ``extra``: 64 KiB of compact UTF-8 JSON (after redaction).
DEFAULT_MAX_EXTRA_BYTES = 64 * 1024
#: Default bound on the number of ancestor event ids an event may carry (feedback-loop guard).
DEFAULT_MAX_CAUSATION_DEPTH = 32
#: Longest explicit idempotency key.
IDEMPOTENCY_KEY_MAX_LENGTH = 512
#: What a redacted value is replaced with (Airflow's replacement too).
REDACTED = "***"

#: Key names whose values the external (no-Airflow) path redacts.  The same names as Airflow
#: 3.3's ``DEFAULT_SENSITIVE_FIELDS``; like Airflow, a key matches when one of these names is a
#: substring of the key lower-cased with runs of non-word characters turned into ``_``
#: (``"X-Api-Key"`` -> ``"x_api_key"`` contains ``"api_key"``).
EXTERNAL_SENSITIVE_KEYS: frozenset[str] = frozenset(
    {
        "access_key",
        "access_token",
        "api_key",
        "apikey",
        "auth_header",
        "authorization",
        "bearer",
        "connection_string",
        "dsn",
        "passphrase",
        "passwd",
        "password",
        "private_key",
        "proxy",
        "proxy_password",
        "proxies",
        "secret",
        "service_account",
        "service_key",
        "token",
        "keyfile_dict",
        "webhook_url",
    }
)

#: A function that returns a redacted copy of a JSON object.
Redactor = Callable[[dict[str, Any]], Any]


# --------------------------------------------------------------------------- partitions
def check_partition_key(partition_key: Any) -> str | None:
    """``partition_key`` if Airflow would accept it; :class:`PartitionKeyError` otherwise."""
    if partition_key is None:
        return None
    if not isinstance(partition_key, str):
        raise PartitionKeyError(
            f"partition_key must be a str or None, got {type(partition_key).__qualname__}"
        )
    if not partition_key.strip():
        raise PartitionKeyError(f"partition_key must not be empty or whitespace-only; got {partition_key!r}")
    if len(partition_key) > PARTITION_KEY_MAX_LENGTH:
        raise PartitionKeyError(
            f"partition_key must be at most {PARTITION_KEY_MAX_LENGTH} characters; got {len(partition_key)}"
        )
    return partition_key


def check_partition(partition_key: Any, partition_date: Any) -> tuple[str | None, datetime | None]:
    """Validate a key and an optional date: a date requires a key and must be timezone-aware."""
    key = check_partition_key(partition_key)
    if partition_date is None:
        return key, None
    if not isinstance(partition_date, datetime):
        raise PartitionDateError(
            f"partition_date must be a timezone-aware datetime, got {type(partition_date).__qualname__}"
        )
    if key is None:
        raise PartitionDateWithoutKeyError("partition_date requires partition_key: a date needs a key")
    if partition_date.tzinfo is None or partition_date.utcoffset() is None:
        raise NaiveDatetimeError(
            f"partition_date must be timezone-aware, got naive {partition_date.isoformat()}"
        )
    return key, partition_date


# --------------------------------------------------------------------------- assets
def _check_identifier(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidAssetError(f"asset {what} must be a str, got {type(value).__qualname__}")
    if not value:
        raise InvalidAssetError(f"asset {what} cannot be empty")
    if len(value) > ASSET_IDENTIFIER_MAX_LENGTH:
        raise InvalidAssetError(f"asset {what} cannot exceed {ASSET_IDENTIFIER_MAX_LENGTH} characters")
    if value.isspace():
        raise InvalidAssetError(f"asset {what} cannot be just whitespace")
    return value


def sanitize_asset_uri(uri: str) -> str:
    """Normalize ``uri`` the way ``airflow.sdk.Asset`` does, without provider normalizers.

    Values that do not look like URIs (no scheme, no netloc) and ``x-`` schemes are kept as
    they are.  Scheme ``airflow`` is reserved (:class:`InvalidAssetError`).  A password in the
    user info is dropped with the whole user info, with a ``UserWarning``, as Airflow does.
    """
    try:
        parsed = urllib.parse.urlsplit(uri)
    except ValueError as exc:
        raise InvalidAssetError(f"asset uri {uri!r} cannot be parsed: {exc}") from exc
    if not parsed.scheme and not parsed.netloc:
        return uri
    scheme = parsed.scheme.lower()
    if not scheme or scheme.startswith("x-"):
        return uri
    if scheme == "airflow":
        raise InvalidAssetError("asset scheme 'airflow' is reserved")
    netloc = parsed.netloc
    if parsed.password:
        warnings.warn(
            "An Asset URI should not contain a password. User info has been automatically dropped.",
            UserWarning,
            stacklevel=3,
        )
        netloc = netloc.rpartition("@")[2]
    query = urllib.parse.urlencode(sorted(urllib.parse.parse_qsl(parsed.query))) if parsed.query else ""
    return urllib.parse.urlunsplit(
        parsed._replace(
            scheme=scheme, netloc=netloc, path=parsed.path.rstrip("/") or "/", query=query, fragment=""
        )
    )


def check_asset(uri: Any, name: Any = None) -> tuple[str, str]:
    """``(name, uri)`` of an asset as Airflow would store it; ``name`` defaults to ``uri`` as given."""
    raw_uri = _check_identifier("uri", uri)
    asset_name = _check_identifier("name", raw_uri if name is None else name)
    if asset_name in {"self", "context"}:
        raise InvalidAssetError(f"prohibited name for asset: {asset_name}")
    return asset_name, _check_identifier("uri", sanitize_asset_uri(raw_uri))


# --------------------------------------------------------------------------- redaction
def _normalized_key(name: str) -> str:
    return re.sub(r"\W+", "_", name.strip().lower())


def is_sensitive_key(name: Any, names: Iterable[str] = EXTERNAL_SENSITIVE_KEYS) -> bool:
    """Whether a value under key ``name`` is sensitive (Airflow's substring rule)."""
    if not isinstance(name, str):
        return False
    normalized = _normalized_key(name)
    return any(s in normalized for s in names)


def _redact_all(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _redact_all(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_all(item) for item in value]
    return None if value is None else REDACTED


def redact_by_key(value: Any, is_sensitive: Callable[[str], bool]) -> Any:
    """A copy of a JSON value with every non-null leaf under a sensitive key replaced by ``"***"``.

    Unlike Airflow's masker (which keeps numbers and booleans under a sensitive key) every
    scalar is replaced: a numeric PIN under ``"password"`` is a secret too.  Containers under a
    sensitive key keep their shape.
    """
    if isinstance(value, dict):
        return {
            key: _redact_all(item) if is_sensitive(key) else redact_by_key(item, is_sensitive)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_by_key(item, is_sensitive) for item in value]
    return value


def redact_external(extra: dict[str, Any]) -> dict[str, Any]:
    """The external path's redactor: key names in :data:`EXTERNAL_SENSITIVE_KEYS`."""
    return redact_by_key(extra, is_sensitive_key)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- extra
def extra_size(extra: Mapping[str, Any]) -> int:
    """Bytes of ``extra`` as compact UTF-8 JSON (the measure of :func:`check_extra`)."""
    return len(json_to_text(dict(extra), what="extra").encode("utf-8"))


def check_max_bytes(max_bytes: Any) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValidationError(f"max_extra_bytes must be a positive int, got {max_bytes!r}")
    return max_bytes


def check_extra(
    extra: Any, *, redactor: Redactor = redact_external, max_bytes: int = DEFAULT_MAX_EXTRA_BYTES
) -> dict[str, Any]:
    """The redacted, plain-JSON copy of ``extra`` that will be published.

    ``extra`` must be a mapping with ``str`` keys whose values are strict JSON
    (:class:`ExtraNotSerializableError`); the copy is what a consumer decodes (tuples become
    lists, ``str``/``int`` subclasses their base type).  Its compact UTF-8 JSON, after
    redaction, must fit in ``max_bytes`` (:class:`ExtraTooLargeError`).
    """
    limit = check_max_bytes(max_bytes)
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise ExtraNotSerializableError(
            f"extra must be a mapping (a JSON object), got {type(extra).__qualname__}"
        )
    try:
        text = json_to_text(dict(extra), what="extra")
    except EnvelopeEncodeError as exc:
        raise ExtraNotSerializableError(str(exc)) from exc
    plain = json.loads(text)
    redacted = redactor(plain)
    if not isinstance(redacted, dict):
        raise ExtraNotSerializableError(
            f"redacting extra gave a {type(redacted).__qualname__}, not a JSON object; nothing was sent"
        )
    try:
        size = extra_size(redacted)
    except EnvelopeEncodeError as exc:  # a redactor that returns something that is not JSON
        raise ExtraNotSerializableError(f"redacted extra is not JSON: {exc}") from exc
    if size > limit:
        raise ExtraTooLargeError(
            f"extra is {size} bytes as compact UTF-8 JSON, over the {limit}-byte bound; "
            "put references (paths, ids) in extra, not the data itself"
        )
    return redacted


# --------------------------------------------------------------------------- other inputs
def check_idempotency_key(key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str):
        raise IdempotencyKeyError(f"idempotency_key must be a str or None, got {type(key).__qualname__}")
    if not key.strip():
        raise IdempotencyKeyError("idempotency_key must not be empty or whitespace-only")
    if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH:
        raise IdempotencyKeyError(
            f"idempotency_key must be at most {IDEMPOTENCY_KEY_MAX_LENGTH} characters; got {len(key)}"
        )
    return key


def check_causation(
    causation: Iterable[Any] | None, *, max_depth: int = DEFAULT_MAX_CAUSATION_DEPTH
) -> tuple[str, ...]:
    """Event ids, oldest first, without repeats; :class:`CausationLoopError` past ``max_depth``."""
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValidationError(f"max_causation_depth must be an int >= 0, got {max_depth!r}")
    if causation is None:
        return ()
    if isinstance(causation, (str, bytes)) or not isinstance(causation, Iterable):
        raise CausationError(f"causation must be a list of event ids, got {type(causation).__qualname__}")
    ids: list[str] = []
    for index, item in enumerate(causation):
        if not isinstance(item, str) or not item.strip():
            raise CausationError(f"causation[{index}] must be a non-empty event id str, got {item!r}")
        if item not in ids:
            ids.append(item)
    if len(ids) > max_depth:
        raise CausationLoopError(
            f"the event would carry {len(ids)} ancestor event ids, more than max_causation_depth="
            f"{max_depth}: DAGs triggering each other through asset events look like a feedback loop"
        )
    return tuple(ids)


def check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ValidationError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)
