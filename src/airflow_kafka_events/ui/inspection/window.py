"""Bounded windows: what an inspection reads of a topic, and what it did read.

:class:`ScanWindow` is asked for: records at or after ``since`` (``None``: from the low watermark)
and before ``until`` (``None``: up to the high watermark), at most ``max_records`` per partition
-- the *newest* ones when there are more, so the answer is ``truncated`` and says so.
:class:`ScannedWindow` is the answer's statement of it, per partition: the offsets read
(``start_offset`` inclusive, ``end_offset`` exclusive), the records read, and whether records of
the window were left out -- which ones, :attr:`PartitionWindow.kept` says: ``"newest"`` (a
listing, or a stream's latest attempt read back from its latest envelope: *older* records not
read) or ``"oldest"`` (a stream's latest attempt read forward from its first offset: *newer*
records, ``end_offset`` .. ``unread_end - 1``, not read).  Offsets come from
``offsets_for_times`` on each partition, so the cost of a window is bounded by ``max_records``
whatever the topic holds.

This module imports no Airflow module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_events.ui.inspection.errors import InvalidWindowError

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "KEPT_NEWEST",
    "KEPT_OLDEST",
    "MAX_RECORDS_LIMIT",
    "PartitionWindow",
    "ScanWindow",
    "ScannedWindow",
    "human_time",
]

#: Records per partition a window reads unless asked otherwise.
DEFAULT_MAX_RECORDS = 1000
#: The largest ``max_records`` accepted (per partition).
MAX_RECORDS_LIMIT = 1_000_000
#: :attr:`PartitionWindow.kept`: the newest ``max_records`` were read (older ones were not).
KEPT_NEWEST = "newest"
#: :attr:`PartitionWindow.kept`: the oldest ``max_records`` were read, forward (newer ones were not).
KEPT_OLDEST = "oldest"


def _aware(name: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidWindowError(
            f"ScanWindow.{name} must be a datetime or None, got {type(value).__qualname__}"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidWindowError(
            f"ScanWindow.{name} must be timezone-aware, got {value.isoformat()} (add a UTC offset)"
        )
    return value.astimezone(timezone.utc)


def human_time(value: datetime) -> str:
    """``value`` for people: ``2026-12-02 03:04:05 UTC`` (whole seconds, UTC)."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def to_ms(value: datetime) -> int:
    """Epoch milliseconds of an aware datetime."""
    return int(value.timestamp() * 1000)


def from_ms(value: int | None) -> datetime | None:
    """The UTC datetime of epoch milliseconds (``None`` for none / a negative value)."""
    if value is None or value < 0:
        return None
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc)


@dataclass(frozen=True)
class ScanWindow:
    """The records to read: ``since <= timestamp < until``, at most ``max_records`` per partition."""

    since: datetime | None = None
    max_records: int = DEFAULT_MAX_RECORDS
    until: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "since", _aware("since", self.since))
        object.__setattr__(self, "until", _aware("until", self.until))
        count = self.max_records
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_RECORDS_LIMIT:
            raise InvalidWindowError(
                f"ScanWindow.max_records must be an int from 1 to {MAX_RECORDS_LIMIT}, got {count!r}"
            )
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise InvalidWindowError(
                f"ScanWindow.until ({self.until.isoformat()}) must be after since ({self.since.isoformat()})"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": None if self.since is None else self.since.isoformat(),
            "until": None if self.until is None else self.until.isoformat(),
            "max_records": self.max_records,
        }


@dataclass(frozen=True)
class PartitionWindow:
    """What was read of one partition: offsets ``start_offset`` .. ``end_offset - 1``.

    ``low`` / ``high`` are the partition's watermarks when it was read.  ``truncated``: the
    window holds records that were not read (``max_records`` was reached); which ones depends on
    ``kept``:

    * ``"newest"`` (:data:`KEPT_NEWEST`, the default: listings, and a stream's attempt read back
      from its latest envelope): records *before* ``start_offset`` were not read;
    * ``"oldest"`` (:data:`KEPT_OLDEST`: a stream's attempt read forward from its first offset):
      records from ``end_offset`` to ``unread_end - 1`` (*newer* ones) were not read.
    """

    partition: int
    start_offset: int
    end_offset: int
    records_scanned: int
    truncated: bool
    low: int
    high: int
    kept: str = KEPT_NEWEST
    #: With ``kept="oldest"``: the end (exclusive) of what the read would have covered.
    unread_end: int | None = None

    def __post_init__(self) -> None:
        if self.kept not in (KEPT_NEWEST, KEPT_OLDEST):
            raise InvalidWindowError(
                f"PartitionWindow.kept is {KEPT_NEWEST!r} or {KEPT_OLDEST!r}, got {self.kept!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ScannedWindow:
    """The window an answer was computed from (see the module doc)."""

    topic: str
    window: ScanWindow
    partitions: tuple[PartitionWindow, ...]

    @property
    def truncated(self) -> bool:
        return any(p.truncated for p in self.partitions)

    @property
    def records_scanned(self) -> int:
        return sum(p.records_scanned for p in self.partitions)

    def describe(self) -> str:
        """One line for people: what was read, and what was not."""
        since = "the start" if self.window.since is None else human_time(self.window.since)
        until = "" if self.window.until is None else f" until {human_time(self.window.until)}"
        text = (
            f"scanned {self.records_scanned} record(s) of topic {self.topic!r} in "
            f"{len(self.partitions)} partition(s) from {since}{until}, at most "
            f"{self.window.max_records} per partition"
        )
        cut = [p.partition for p in self.partitions if p.truncated and p.kept == KEPT_NEWEST]
        if cut:
            text += (
                f"; TRUNCATED in partition(s) {', '.join(map(str, cut))}: older records were not read "
                "(raise max records, or ask for a later 'since')"
            )
        for p in self.partitions:
            if p.truncated and p.kept == KEPT_OLDEST:
                text += (
                    f"; TRUNCATED in partition {p.partition}: newer records (offsets {p.end_offset}.."
                    f"{(p.unread_end or p.end_offset) - 1}) were not read (raise max records)"
                )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            **self.window.to_dict(),
            "records_scanned": self.records_scanned,
            "truncated": self.truncated,
            "partitions": [p.to_dict() for p in self.partitions],
        }
