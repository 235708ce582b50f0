"""Where a stream consumer is: a small JSON checkpoint and the store that keeps it.

A :class:`Checkpoint` is the position after the last batch of a trigger event stream
that its consumer fully handled: the ``attempt`` it follows, the ``next_sequence_index``
it expects, and the Kafka ``offset`` (in ``partition``) after the last handled record.
The offset only saves reading; the sequence position is what guarantees that nothing is
handled twice and nothing is skipped (see :mod:`airflow_kafka_events.streams.consuming.reader`).

Checkpoints are stored as JSON values, so they fit Airflow's task state store
(``context["task_state_store"]``), whose ``get(key, default=None)`` / ``set(key, value)``
match :class:`CheckpointStore`.  :func:`save_checkpoint` stores the checkpoint together
with a *generation* (the task instance's ``clear_number``) and :func:`load_checkpoint`
ignores a checkpoint of another generation: clearing a task starts its stream over,
while a retry of the same generation resumes where the previous try stopped.

This module imports no Airflow module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from airflow_kafka_events.errors import ValidationError

__all__ = [
    "CHECKPOINT_FORMAT",
    "Checkpoint",
    "CheckpointStore",
    "load_checkpoint",
    "save_checkpoint",
    "state_store_of",
]

#: Version of the JSON layout written by :meth:`Checkpoint.to_json`.
CHECKPOINT_FORMAT = 1

_INT64_MAX = 2**63 - 1


def _check_int(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        expected = "an int or None" if optional else "an int"
        raise ValidationError(f"Checkpoint.{name} must be {expected}, got {type(value).__qualname__}")
    if not 0 <= value <= _INT64_MAX:
        raise ValidationError(f"Checkpoint.{name} must be between 0 and {_INT64_MAX}, got {value}")


@dataclass(frozen=True)
class Checkpoint:
    """The position after the last handled batch of one trigger run's stream.

    * ``attempt`` / ``next_sequence_index``: the stream epoch followed and the first
      sequence index not handled yet (every lower one of that attempt was handled);
    * ``offset``: the Kafka offset to resume reading from (the offset after the last
      handled record), or ``None`` to scan the partition from its beginning;
    * ``partition``: the partition the stream lives in, when known;
    * ``finished``: the stream's last element was handled; nothing is left to read.
    """

    attempt: int = 0
    next_sequence_index: int = 0
    offset: int | None = None
    partition: int | None = None
    finished: bool = False

    def __post_init__(self) -> None:
        _check_int("attempt", self.attempt)
        _check_int("next_sequence_index", self.next_sequence_index)
        _check_int("offset", self.offset, optional=True)
        _check_int("partition", self.partition, optional=True)
        if not isinstance(self.finished, bool):
            raise ValidationError(
                f"Checkpoint.finished must be a bool, got {type(self.finished).__qualname__}"
            )

    def to_json(self) -> dict[str, Any]:
        """A JSON object (only str keys, int / bool / null values)."""
        return {"format": CHECKPOINT_FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, value: Any) -> Checkpoint:
        """Inverse of :meth:`to_json`; also accepts the JSON text of that object.

        Anything else (another format version, missing or mistyped fields) raises
        :class:`~airflow_kafka_events.errors.ValidationError`: a checkpoint that cannot
        be read must not silently restart a stream from its beginning.
        """
        if isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValidationError(f"checkpoint is not valid JSON text: {exc}") from exc
        if not isinstance(value, Mapping):
            raise ValidationError(f"a checkpoint is a JSON object, got {type(value).__qualname__}")
        version = value.get("format")
        if version != CHECKPOINT_FORMAT:
            raise ValidationError(
                f"checkpoint format {version!r} is not supported (this version reads {CHECKPOINT_FORMAT})"
            )
        try:
            return cls(
                attempt=value["attempt"],
                next_sequence_index=value["next_sequence_index"],
                offset=value.get("offset"),
                partition=value.get("partition"),
                finished=value.get("finished", False),
            )
        except KeyError as exc:
            raise ValidationError(f"checkpoint has no {exc.args[0]!r}") from exc


@runtime_checkable
class CheckpointStore(Protocol):
    """A key-value store of JSON values; Airflow's ``context["task_state_store"]`` is one."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


def state_store_of(context: Mapping[str, Any]) -> CheckpointStore | None:
    """``context["task_state_store"]`` when the context has one."""
    store = context.get("task_state_store")
    if (
        store is None
        or not callable(getattr(store, "get", None))
        or not callable(getattr(store, "set", None))
    ):
        return None
    return store  # type: ignore[no-any-return]


def _check_generation(generation: Any) -> None:
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise ValidationError(f"generation must be an int, got {type(generation).__qualname__}")


def save_checkpoint(store: CheckpointStore, key: str, checkpoint: Checkpoint, generation: int) -> None:
    """Store ``checkpoint`` under ``key`` for ``generation`` (the task instance's ``clear_number``)."""
    _check_generation(generation)
    if not isinstance(checkpoint, Checkpoint):
        raise ValidationError(f"expected a Checkpoint, got {type(checkpoint).__qualname__}")
    store.set(key, {"generation": generation, "checkpoint": checkpoint.to_json()})


def load_checkpoint(store: CheckpointStore, key: str, generation: int) -> Checkpoint | None:
    """The checkpoint stored under ``key`` for ``generation``, or ``None``.

    ``None`` when nothing is stored or when the stored checkpoint belongs to another
    generation (the task was cleared since: its stream starts over).  A stored value of
    the right generation that cannot be read raises
    :class:`~airflow_kafka_events.errors.ValidationError`.
    """
    _check_generation(generation)
    stored = store.get(key, None)
    if stored is None:
        return None
    if not isinstance(stored, Mapping) or "generation" not in stored or "checkpoint" not in stored:
        raise ValidationError(
            f"value stored under {key!r} is not a stream checkpoint "
            "(expected an object with 'generation' and 'checkpoint')"
        )
    if stored["generation"] != generation:
        return None
    return Checkpoint.from_json(stored["checkpoint"])
