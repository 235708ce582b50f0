"""Test doubles for the operator tests: an in-memory stream reader, a context (the task state store:
:class:`harness.task_state.DictStore`)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.sequence import StreamBatch
from airflow_kafka_events.streams.descriptor import StreamDescriptor
from harness.task_state import DictStore

TOPIC = "airflow.trigger-events"


def stream(run: str, n: int, *, attempt: int = 0, error: str | None = None) -> list[TriggerEventEnvelope]:
    """``n`` data pages then the payload-less end marker (with ``error`` when given)."""
    envelopes = [
        TriggerEventEnvelope(
            trigger_run_id=run,
            sequence_index=i,
            attempt=attempt,
            is_last=False,
            payload={"page": i, "attempt": attempt},
            resume_cursor=str(i + 1),
        )
        for i in range(n)
    ]
    envelopes.append(
        TriggerEventEnvelope(
            trigger_run_id=run,
            sequence_index=n,
            attempt=attempt,
            is_last=True,
            error=None if error is None else StreamFailure(type="HTTPError", message=error),
        )
    )
    return envelopes


def descriptor(run: str, n: int, *, attempt: int = 0, error: str | None = None) -> dict[str, Any]:
    return StreamDescriptor(
        topic=TOPIC,
        trigger_run_id=run,
        attempt=attempt,
        count=n,
        first_offset=0,
        last_offset=n,
        partition=0,
        error=None if error is None else {"type": "HTTPError", "message": error},
    ).to_dict()


class FakeReader:
    """Hands out ``envelopes`` (offset = list index) in batches of ``max_events``, from ``checkpoint``."""

    def __init__(
        self,
        envelopes: list[TriggerEventEnvelope],
        *,
        checkpoint: Checkpoint | None = None,
        max_events: int = 3,
    ) -> None:
        self.checkpoints: list[Checkpoint] = []
        self._acked = checkpoint
        self.max_events = max_events
        self.pending = [
            (offset, e)
            for offset, e in enumerate(envelopes)
            if checkpoint is None
            or e.attempt > checkpoint.attempt
            or (e.attempt == checkpoint.attempt and e.sequence_index >= checkpoint.next_sequence_index)
        ]
        self.number = 0
        self.closed = False
        self.finished = bool(checkpoint is not None and checkpoint.finished)

    def next_batch(self) -> StreamBatch:
        chunk, self.pending = self.pending[: self.max_events], self.pending[self.max_events :]
        if not chunk:
            assert self.finished, "read past the end of a stream that did not finish"
            assert self._acked is not None
            events: list[TriggerEventEnvelope] = []
            checkpoint = self._acked
        else:
            events = [e for _, e in chunk]
            last_offset, last = chunk[-1]
            self.finished = last.is_last
            checkpoint = Checkpoint(
                attempt=last.attempt,
                next_sequence_index=last.sequence_index + 1,
                offset=last_offset + 1,
                partition=0,
                finished=last.is_last,
            )
        self.number += 1
        return StreamBatch(
            events=events,
            attempt=checkpoint.attempt,
            restarted=False,
            finished=self.finished,
            rejected=[],
            first_offset=chunk[0][0] if chunk else None,
            last_offset=chunk[-1][0] if chunk else None,
            partition=0,
            checkpoint=checkpoint,
            number=self.number,
        )

    def ack(self, batch: StreamBatch) -> Checkpoint:
        self._acked = batch.checkpoint
        self.checkpoints.append(batch.checkpoint)
        return batch.checkpoint

    def checkpoint(self) -> Checkpoint | None:
        return self._acked

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def context(
    *,
    dag_id: str = "dag",
    run_id: str = "manual__1",
    task_id: str = "produce",
    map_index: int = -1,
    clear_number: int = 0,
    store: DictStore | None = None,
    conf: dict[str, Any] | None = None,
    run_after: datetime | None = None,
    try_number: int = 1,
) -> dict[str, Any]:
    """A task context; its ``dag_run`` has a ``run_after`` only when one is given."""
    ti = SimpleNamespace(
        dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, try_number=try_number
    )
    dag_run = SimpleNamespace(clear_number=clear_number, conf=conf or {})
    if run_after is not None:
        dag_run.run_after = run_after
    ctx: dict[str, Any] = {"ti": ti, "dag_run": dag_run}
    if store is not None:
        ctx["task_state_store"] = store
    return ctx
