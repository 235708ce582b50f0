"""A listing: the records an inspection scan kept, the window it scanned, and what it counted.

Each kind of listing (asset events, dead letters) is a :class:`Listing` of its records with its own
counts as further fields; its JSON form is the records, the window, then those counts.  A record's
JSON form is its fields (:func:`record_dict`).  This module imports no Airflow module.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from airflow_kafka_events.ui.inspection.window import ScannedWindow

__all__ = [
    "Listing",
    "record_dict",
]


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_json(item) for item in value]
    return value


def record_dict(record: Any) -> dict[str, Any]:
    """A record dataclass's fields in order, as JSON: a datetime as ISO 8601 text, a tuple as a list."""
    return {f.name: _json(getattr(record, f.name)) for f in fields(record)}


class _Record(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Record)


@dataclass(frozen=True)
class Listing(Generic[R]):
    """``records`` kept from the scanned ``window``; a subclass adds its counts as fields."""

    records: list[R]
    window: ScannedWindow

    def to_dict(self) -> dict[str, Any]:
        counts = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("records", "window")}
        return {"records": [r.to_dict() for r in self.records], "window": self.window.to_dict(), **counts}
