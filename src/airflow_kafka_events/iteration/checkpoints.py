"""The progress checkpoint of an iteration: what a retry of the task skips.

Items done are tracked as a *watermark* -- every local index below it is done -- plus
a few ranges of indexes done out of order above it (:class:`CompletedItems`; local
index = ``ordinal // shards``).  The checkpoint (:class:`IterationCheckpoint`) is saved in
``store`` (Airflow's ``task_state_store``, which survives task retries, unlike XComs that
are cleared on a new try) every ``checkpoint_every`` completed items or
``checkpoint_interval`` seconds, whichever comes first, and when the runner ends (also on
failure) -- never once per item (:class:`CheckpointKeeper`).  A save starts as soon as
``checkpoint_every`` items completed (even while every slot is busy with a long item), and
a due save is awaited before the next item starts, so the saved state is about
``checkpoint_every`` items behind at most when a worker dies.  The next try of the task
skips every item of the checkpoint; a checkpoint of another ``generation`` (the DAG run's
``clear_number``: the task was cleared), shard layout or ``source_key`` is ignored and the
iteration starts over (:func:`usable_checkpoint`).

This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_events.errors import ValidationError

if TYPE_CHECKING:
    from airflow_kafka_events.iteration.outcome import IterationSummary

__all__ = [
    "CHECKPOINT_FORMAT",
    "DEFAULT_CHECKPOINT_KEY",
    "CheckpointKeeper",
    "CompletedItems",
    "IterationCheckpoint",
    "ProgressStore",
    "usable_checkpoint",
]

#: Version of the checkpoint JSON layout.
CHECKPOINT_FORMAT = 1
#: Task state store key of the checkpoint (the store is scoped to one task instance).
DEFAULT_CHECKPOINT_KEY = "iteration:progress"


# ====================================================================== completed items
class CompletedItems:
    """Local indexes of completed items: a watermark plus ranges completed out of order.

    Every index below :attr:`watermark` is completed; :attr:`ranges` are the half-open
    ranges ``[start, end)`` completed above it (sorted, disjoint, never adjacent).  Items
    completing in order only move the watermark; a failed item leaves a gap, and what
    completes after it extends one range, so the state stays small.
    """

    __slots__ = ("_count", "_ends", "_starts", "watermark")

    def __init__(self, watermark: int = 0, ranges: Iterable[Iterable[int]] = ()) -> None:
        if isinstance(watermark, bool) or not isinstance(watermark, int) or watermark < 0:
            raise ValidationError(f"watermark must be an int >= 0, got {watermark!r}")
        self.watermark = watermark
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._count = watermark
        for start, end in ranges:
            self._append_range(int(start), int(end))

    def _append_range(self, start: int, end: int) -> None:
        if not start < end:
            raise ValidationError(f"a completed range must have start < end, got [{start}, {end})")
        if start < self.watermark or (self._ends and start <= self._ends[-1]):
            raise ValidationError(
                f"completed range [{start}, {end}) is not above the watermark and the ranges before it"
            )
        self._starts.append(start)
        self._ends.append(end)
        self._count += end - start
        self._lift()

    def _lift(self) -> None:
        while self._starts and self._starts[0] == self.watermark:
            self.watermark = self._ends[0]
            del self._starts[0]
            del self._ends[0]

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        if index < self.watermark:
            return index >= 0
        pos = bisect.bisect_right(self._starts, index) - 1
        return pos >= 0 and index < self._ends[pos]

    def __len__(self) -> int:
        return self._count

    @property
    def ranges(self) -> list[list[int]]:
        return [[s, e] for s, e in zip(self._starts, self._ends, strict=True)]

    def add(self, index: int) -> bool:
        """Mark ``index`` completed; ``False`` when it already was."""
        if index < self.watermark:
            return False
        if index == self.watermark:
            self.watermark += 1
            self._count += 1
            self._lift()
            return True
        starts, ends = self._starts, self._ends
        pos = bisect.bisect_right(starts, index)
        if pos > 0 and index < ends[pos - 1]:
            return False
        joins_left = pos > 0 and ends[pos - 1] == index
        joins_right = pos < len(starts) and starts[pos] == index + 1
        if joins_left and joins_right:
            ends[pos - 1] = ends[pos]
            del starts[pos]
            del ends[pos]
        elif joins_left:
            ends[pos - 1] = index + 1
        elif joins_right:
            starts[pos] = index
        else:
            starts.insert(pos, index)
            ends.insert(pos, index + 1)
        self._count += 1
        return True

    def to_json(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "ranges": self.ranges}

    @classmethod
    def from_json(cls, value: Any) -> CompletedItems:
        if not isinstance(value, Mapping):
            raise ValidationError(f"completed items are a JSON object, got {type(value).__qualname__}")
        ranges = value.get("ranges", [])
        if not isinstance(ranges, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r) for r in ranges
        ):
            raise ValidationError(f"completed ranges must be [[start, end], ...], got {ranges!r}")
        return cls(value.get("watermark", 0), ranges)


# ====================================================================== checkpoint
@dataclass
class IterationCheckpoint:
    """What the task state store keeps between tries (``to_json`` / ``from_json``)."""

    generation: int
    source: str
    shard: int
    shards: int
    completed: CompletedItems = field(default_factory=CompletedItems)
    results: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "generation": self.generation,
            "source": self.source,
            "shard": self.shard,
            "shards": self.shards,
            **self.completed.to_json(),
            "results": self.results,
        }

    @classmethod
    def from_json(cls, value: Any) -> IterationCheckpoint:
        """Inverse of :meth:`to_json`; :class:`ValidationError` for anything else."""
        if not isinstance(value, Mapping):
            raise ValidationError(f"an iteration checkpoint is a JSON object, got {type(value).__qualname__}")
        if value.get("format") != CHECKPOINT_FORMAT:
            raise ValidationError(
                f"iteration checkpoint format {value.get('format')!r} is not supported "
                f"(this version reads {CHECKPOINT_FORMAT})"
            )
        try:
            generation, source, shard, shards = (
                value[k] for k in ("generation", "source", "shard", "shards")
            )
        except KeyError as exc:
            raise ValidationError(f"iteration checkpoint has no {exc.args[0]!r}") from exc
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (generation, shard, shards)):
            raise ValidationError("iteration checkpoint generation/shard/shards must be ints")
        if not isinstance(source, str):
            raise ValidationError("iteration checkpoint source must be a str")
        return cls(
            generation=generation,
            source=source,
            shard=shard,
            shards=shards,
            completed=CompletedItems.from_json(value),
            results=value.get("results"),
        )


class ProgressStore(Protocol):
    """Where the checkpoint is kept: Airflow's ``task_state_store`` is one."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


def usable_checkpoint(
    stored: Any,
    *,
    generation: int,
    shard: int,
    shards: int,
    source_key: str,
    logger: logging.Logger | Any,
) -> tuple[IterationCheckpoint | None, bool]:
    """``(checkpoint, restart)``: the stored checkpoint if this run may use it.

    ``None`` when nothing is stored, or (logged) when it is of another generation (the task
    was cleared) or of another shard layout or source -- then ``restart`` is ``True``: the
    results sink must start over too.
    """
    if stored is None:
        return None, False
    checkpoint = IterationCheckpoint.from_json(stored)
    if checkpoint.generation != generation:
        logger.info(
            "iteration: the checkpoint is of generation %d, this task of generation %d "
            "(it was cleared): starting over",
            checkpoint.generation,
            generation,
        )
        return None, False
    if (checkpoint.shard, checkpoint.shards, checkpoint.source) != (shard, shards, source_key):
        logger.warning(
            "iteration: the checkpoint is of shard %d/%d over %r, this run is shard %d/%d "
            "over %r: starting over",
            checkpoint.shard,
            checkpoint.shards,
            checkpoint.source,
            shard,
            shards,
            source_key,
        )
        return None, True
    return checkpoint, False


# ====================================================================== saving
class CheckpointKeeper:
    """Saves the checkpoint ``snapshot()`` in ``store`` under ``key``, batched (see the module doc).

    :meth:`completed` after each completed item; :meth:`due` tells whether a save is due
    (the runner awaits :meth:`save` before starting the next item); :meth:`save_soon`
    starts one in the background.  Saves run in one I/O thread, one at a time;
    :meth:`final` saves once more when the run ends.  Every save counts in
    ``summary.checkpoints_saved``.  ``store=None``: nothing is ever saved.
    """

    def __init__(
        self,
        store: ProgressStore | None,
        key: str,
        snapshot: Callable[[], dict[str, Any]],
        summary: IterationSummary,
        *,
        every: int,
        interval: float,
        clock: Callable[[], float],
        logger: logging.Logger | Any,
    ) -> None:
        self.store = store
        self.key = key
        self.snapshot = snapshot
        self.summary = summary
        self.every = every
        self.interval = interval
        self.clock = clock
        self.log = logger
        self.dirty = False
        self.since_save = 0
        self.last_save = 0.0
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Future[None] | None = None

    def load(self) -> Any:
        """The stored JSON value, ``None`` when none (or no store)."""
        return None if self.store is None else self.store.get(self.key, None)

    def open(self) -> None:
        """Start the I/O thread (before the run's event loop starts)."""
        self.last_save = self.clock()
        self._io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="iteration-checkpoint")

    def completed(self) -> None:
        """One more item completed; a save starts once ``every`` items completed since the last."""
        self.dirty = True
        self.since_save += 1
        if self.since_save >= self.every and self.store is not None:
            self.save_soon()  # even while every slot is busy with a long item

    def due(self, now: float) -> bool:
        return (
            self.store is not None
            and self.dirty
            and (self.since_save >= self.every or now - self.last_save >= self.interval)
        )

    def _set(self, value: dict[str, Any]) -> None:
        assert self.store is not None
        self.store.set(self.key, value)

    async def save(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        assert self._io is not None
        async with self._lock:
            if self.store is None or not self.dirty:
                return
            value = self.snapshot()
            self.dirty = False
            self.since_save = 0
            self.last_save = self.clock()
            try:
                await asyncio.get_running_loop().run_in_executor(self._io, self._set, value)
            except Exception as exc:  # losing a checkpoint only costs re-runs
                self.dirty = True
                self.log.warning("iteration: saving the checkpoint failed: %s", exc)
            else:
                self.summary.checkpoints_saved += 1

    def save_soon(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self.save())

    async def settle(self) -> None:
        """Wait for a save started by :meth:`save_soon` (its errors are logged by it)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def close(self) -> None:
        """Stop the I/O thread, waiting for a save in flight: it must not land after the final one."""
        if self._io is not None:
            self._io.shutdown(wait=True)

    def final(self) -> None:
        """Save the checkpoint once more (the run ended); a failure is logged."""
        if self.store is None:
            return
        try:
            self._set(self.snapshot())
            self.dirty = False
            self.summary.checkpoints_saved += 1
        except Exception as exc:
            self.log.warning("iteration: saving the final checkpoint failed: %s", exc)
