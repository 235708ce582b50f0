"""Avro schemas of the envelopes, every released version kept as ``<name>/v<N>.avsc``.

The files are plain Avro schema JSON, so producers written in other languages can use
them directly (see :func:`schema_path`).  The highest version of a name is the current
one: this package writes with it and reads every older version through Avro schema
resolution.  A later version may only add fields that have a default.

Nothing is read at import time; each file is read and parsed once, on first use.
Parsed schemas are shared: treat the returned dicts as read-only.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, cast

import fastavro
import fastavro.schema

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "ASSET_EVENT_ENVELOPE",
    "NAMESPACE",
    "TRIGGER_EVENT_ENVELOPE",
    "canonical_form",
    "current_version",
    "load_schema",
    "raw_schema",
    "schema_fingerprint",
    "schema_names",
    "schema_path",
    "schema_text",
    "schema_versions",
]

NAMESPACE = "io.airflow_kafka_events"
TRIGGER_EVENT_ENVELOPE = "trigger_event_envelope"
ASSET_EVENT_ENVELOPE = "asset_event_envelope"

_ROOT = Path(__file__).resolve().parent
_VERSION_FILE = re.compile(r"^v([0-9]+)\.avsc$")
_FINGERPRINT_ALGORITHM = "CRC-64-AVRO"


@functools.cache
def _names() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in _ROOT.iterdir() if p.is_dir() and any(p.glob("v*.avsc"))))


def schema_names() -> list[str]:
    """Names of the schemas shipped with the package (one directory each)."""
    return list(_names())


@functools.cache
def _versions(name: str) -> tuple[int, ...]:
    if name not in _names():
        raise ConfigurationError(f"unknown envelope schema {name!r}; known schemas: {', '.join(_names())}")
    found = []
    for path in (_ROOT / name).iterdir():
        match = _VERSION_FILE.match(path.name)
        if match:
            found.append(int(match.group(1)))
    return tuple(sorted(found))


def schema_versions(name: str) -> list[int]:
    """Every kept version of schema ``name``, ascending."""
    return list(_versions(name))


def current_version(name: str) -> int:
    """The version this package writes: the highest one kept."""
    return _versions(name)[-1]


def _resolve_version(name: str, version: int | None) -> int:
    versions = _versions(name)
    if version is None:
        return versions[-1]
    if version not in versions:
        raise ConfigurationError(
            f"schema {name!r} has no version {version!r}; kept versions: {', '.join(map(str, versions))}"
        )
    return version


def schema_path(name: str, version: int | None = None) -> Path:
    """Path of the ``.avsc`` file of ``name`` at ``version`` (default: current)."""
    return _ROOT / name / f"v{_resolve_version(name, version)}.avsc"


@functools.cache
def _text(name: str, version: int) -> str:
    return (_ROOT / name / f"v{version}.avsc").read_text(encoding="utf-8")


def schema_text(name: str, version: int | None = None) -> str:
    """The ``.avsc`` file's text, e.g. to register it in a schema registry."""
    return _text(name, _resolve_version(name, version))


def raw_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """The schema as plain JSON data (a fresh, unparsed copy)."""
    data: dict[str, Any] = json.loads(schema_text(name, version))
    return data


@functools.cache
def _parsed(name: str, version: int) -> dict[str, Any]:
    # Looked up through the module so that tests can count the calls.
    return cast("dict[str, Any]", fastavro.parse_schema(json.loads(_text(name, version))))


def load_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """The schema parsed with fastavro; parsed once per (name, version) and shared."""
    return _parsed(name, _resolve_version(name, version))


@functools.cache
def _canonical(name: str, version: int) -> str:
    return str(fastavro.schema.to_parsing_canonical_form(_parsed(name, version)))


def canonical_form(name: str, version: int | None = None) -> str:
    """Avro Parsing Canonical Form of the schema."""
    return _canonical(name, _resolve_version(name, version))


@functools.cache
def _fingerprint(name: str, version: int) -> bytes:
    # fastavro returns the CRC-64-AVRO value as the hex of its little-endian bytes,
    # which is the byte order Avro single-object encoding puts on the wire.
    return bytes.fromhex(fastavro.schema.fingerprint(_canonical(name, version), _FINGERPRINT_ALGORITHM))


def schema_fingerprint(name: str, version: int | None = None) -> bytes:
    """8-byte CRC-64-AVRO fingerprint of the canonical form, little-endian (wire order)."""
    return _fingerprint(name, _resolve_version(name, version))
