"""Paths into a decoded JSON document: ``"paging.next"`` or ``["@odata.nextLink"]``, keys and list indices.

This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "PathPart",
    "lookup",
    "parse_path",
    "path_text",
]

PathPart = str | int


def parse_path(value: Any, name: str) -> tuple[PathPart, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts: list[Any] = value.split(".")
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise ConfigurationError(
            f"{name} must be a dotted str, a list of keys/indices, or None; got {type(value).__qualname__}"
        )
    if not parts:
        raise ConfigurationError(f"{name} must not be empty")
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, (str, int)) or part == "":
            raise ConfigurationError(f"{name} has an invalid part {part!r} (non-empty str or int)")
    return tuple(parts)


def lookup(document: Any, path: Sequence[PathPart]) -> tuple[bool, Any]:
    """``(found, value)`` of ``path`` in a decoded JSON document."""
    current = document
    for part in path:
        if isinstance(current, Mapping) and isinstance(part, str) and part in current:
            current = current[part]
        elif isinstance(current, list) and (isinstance(part, int) or (part.isdigit())):
            index = int(part)
            if not -len(current) <= index < len(current):
                return False, None
            current = current[index]
        else:
            return False, None
    return True, current


def path_text(path: Sequence[PathPart]) -> str:
    return ".".join(str(part) for part in path)
