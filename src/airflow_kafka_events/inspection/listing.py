"""A listing: the records an inspection scan kept, the window it scanned, and what it counted.

Each kind of listing (asset events, dead letters) is a :class:`Listing` of its records with its own
counts as further fields; its JSON form is the records, the window, then those counts.  This module
imports no Airflow module.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Generic, Protocol, TypeVar

from airflow_kafka_events.inspection.window import ScannedWindow

__all__ = ["Listing"]


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
