"""Where a reader may resume: per-partition positions that never pass an unfinished record.

A reader (e.g. an asset watcher) reads every record of its partitions, hands some of them on
for work that finishes later (an Airflow asset event persisted), and skips the rest.  The
position it may store durably for a partition is the offset of the first record handed on and
not yet finished, or, when nothing is pending, the offset after the last record read.
Storing that value and resuming from it after a crash loses nothing; what may repeat are the
records finished after the last store.

:class:`PositionTracker` is that bookkeeping, pure and synchronous.  Positions serialize to
JSON (``{"topic": {"partition": next_offset}}``) for a key/value store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_events.errors import ValidationError

__all__ = [
    "Partition",
    "PositionTracker",
    "positions_from_json",
    "positions_to_json",
]

#: ``(topic, partition)``
Partition = tuple[str, int]


def positions_to_json(positions: Mapping[Partition, int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): offset}`` as ``{"topic": {"partition": offset}}`` (JSON keys are str)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def positions_from_json(value: Any) -> dict[Partition, int]:
    """The inverse of :func:`positions_to_json`; ``None`` gives ``{}``; anything malformed raises."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"stored positions must be a mapping, got {type(value).__name__}")
    positions: dict[Partition, int] = {}
    for topic, partitions in value.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise ValidationError(f"stored positions of {topic!r} must map partitions to offsets")
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValidationError(f"stored position {topic}[{partition}] must be an int >= 0: {offset!r}")
            positions[(topic, int(partition))] = offset
    return positions


@dataclass
class _Lane:
    read_to: int  # the offset after the last record read (or the start position)
    pending: dict[int, Any] = field(default_factory=dict)  # handed on, not finished: offset -> tag


class PositionTracker:
    """Per-partition read frontiers and the records still pending between them and the store.

    ``start`` maps each partition to the offset reading starts at.  Then, per record:
    :meth:`read` (every record, in offset order per partition), :meth:`hand_on` (the records
    whose work finishes later), :meth:`finish` (that work is done).  :meth:`durable` is what may
    be stored; :meth:`rewind` follows a seek back.
    """

    def __init__(self, start: Mapping[Partition, int]) -> None:
        self._lanes: dict[Partition, _Lane] = {tp: _Lane(read_to=int(o)) for tp, o in start.items()}
        self._stored: dict[Partition, int] = {}

    # ------------------------------------------------------------------ reading
    def add_partitions(self, start: Mapping[Partition, int]) -> None:
        """Partitions that appeared later (a topic grew); existing ones are kept as they are."""
        for tp, offset in start.items():
            self._lanes.setdefault(tp, _Lane(read_to=int(offset)))

    def read(self, tp: Partition, offset: int) -> None:
        """The record at ``offset`` was read (handed on or skipped)."""
        self.advance_to(tp, offset + 1)

    def advance_to(self, tp: Partition, next_offset: int) -> None:
        """Every record before ``next_offset`` was read (those handed on are pending)."""
        lane = self._lane(tp)
        lane.read_to = max(lane.read_to, next_offset)

    def knows(self, tp: Partition) -> bool:
        return tp in self._lanes

    def hand_on(self, tp: Partition, offset: int, tag: Any = None) -> None:
        """The record at ``offset`` was read and its work finishes later (``tag`` is kept for it)."""
        self.read(tp, offset)
        self._lanes[tp].pending[offset] = tag

    def finish(self, tp: Partition, offsets: Iterable[int]) -> list[Any]:
        """The work of these records is done; returns their tags (unknown offsets are ignored)."""
        lane = self._lane(tp)
        return [lane.pending.pop(offset) for offset in offsets if offset in lane.pending]

    def rewind(self, tp: Partition, offset: int) -> None:
        """The reader sought back to ``offset``: records from there on will be read again."""
        lane = self._lane(tp)
        lane.pending = {o: tag for o, tag in lane.pending.items() if o < offset}
        lane.read_to = min(lane.read_to, offset)

    def pending_count(self) -> int:
        return sum(len(lane.pending) for lane in self._lanes.values())

    def pending_tags(self) -> list[Any]:
        """The tags of the records handed on and not finished."""
        return [tag for lane in self._lanes.values() for tag in lane.pending.values()]

    # ------------------------------------------------------------------ storing
    def durable(self) -> dict[Partition, int]:
        """Per partition: the first pending offset, else the read frontier."""
        return {tp: (min(lane.pending) if lane.pending else lane.read_to) for tp, lane in self._lanes.items()}

    def changed_since_stored(self) -> bool:
        return self.durable() != self._stored

    def mark_stored(self, positions: Mapping[Partition, int]) -> None:
        self._stored = dict(positions)

    def _lane(self, tp: Partition) -> _Lane:
        try:
            return self._lanes[tp]
        except KeyError:
            raise KeyError(f"partition {tp[0]}[{tp[1]}] is not tracked") from None
