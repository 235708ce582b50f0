"""The trigger a deferred stream consumer waits in: wake up for a batch, not for a page.

:class:`StreamWaitTrigger` follows the stream from the consumer's checkpoint in the triggerer
and hands nothing out: it only decides when the task is worth resuming.  It opens no Kafka
client of its own: every waiting trigger of a topic and connection in one triggerer is fed by one
shared reader, routing each record by its key to its stream's trigger
(:mod:`~airflow_kafka_events.streams.consuming.shared_wait`), which puts its own records in order
(:class:`~airflow_kafka_events.streams.consuming.follower.StreamFollower`, as a
:class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` would).  It yields ONE event:

* ``{"status": "ready", ...}`` when ``max_events`` pages past the checkpoint are there, or the
  stream's end (normal or failed) or a new attempt is known, or ``resume_wait`` seconds after
  the first new page arrived (whichever comes first).  The task then reads again from its
  checkpoint, in the worker, with full batches;
* ``{"status": "not_started", ...}`` when nothing of the stream arrived by ``start_deadline``;
* ``{"status": "gap", ...}`` when the stream started but its next page did not come by
  ``gap_deadline`` (moved forward by every page that arrives);
* ``{"status": "error", ...}`` when the shared reader failed in a way that does not heal by
  retrying (credentials, TLS or authorization refused, the topic deleted; a broker outage is
  ridden out, see :mod:`~airflow_kafka_events.kafka.shared_reader`, *Failures*).

The task turns the last three into the typed errors an in-worker read raises
(:class:`~airflow_kafka_events.errors.StreamNotStartedError`,
:class:`~airflow_kafka_events.errors.StreamGapError`,
:class:`~airflow_kafka_events.errors.KafkaOperationError`, or by the event's ``error_type`` its
subclass :class:`~airflow_kafka_events.errors.TopicError`,
:class:`~airflow_kafka_events.errors.KafkaAuthenticationError` or
:class:`~airflow_kafka_events.errors.KafkaTlsError`), so the consumer fails the same way in both
modes (``defer(timeout=)`` would end in ``TaskDeferralTimeout`` instead).

The start clock (``start_deadline``, wall-clock epoch seconds) stands still while the producing
task (``producer``) is known to be waiting for a slot (no state or ``scheduled``): the trigger asks
Airflow for that task's state every ``state_poll_interval`` seconds while the stream has not
started, and moves the deadline by the time it spent there.  So ``start_timeout`` counts the
time its producer was queued, running, deferred or finished, never the time it could not start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_events.errors import (
    KafkaAuthenticationError,
    KafkaOperationError,
    KafkaTlsError,
    StreamGapError,
    StreamNotStartedError,
    StreamReadError,
    TopicError,
    ValidationError,
)
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.slot_release import paused_start_deadline

if TYPE_CHECKING:
    from airflow_kafka_events.streams.consuming.operator import StreamRef
    from airflow_kafka_events.streams.consuming.reader import ReadOptions
    from airflow_kafka_events.streams.consuming.slot_release import WaitOptions

__all__ = [
    "StreamWaitTrigger",
    "producer_state_key",
    "wait_event_error",
]

#: The keyword arguments of :class:`StreamWaitTrigger` (each kept as the attribute of its name).
_KWARGS = (
    "topic",
    "trigger_run_id",
    "kafka_config_id",
    "checkpoint",
    "max_events",
    "resume_wait",
    "start_timeout",
    "start_deadline",
    "gap_timeout",
    "gap_deadline",
    "producer",
    "poll_timeout",
    "state_poll_interval",
)

#: The typed errors an ``error`` event's ``error_type`` comes back as (others: KafkaOperationError).
_ERROR_TYPES: dict[str, type[KafkaOperationError]] = {
    cls.__name__: cls for cls in (KafkaAuthenticationError, KafkaTlsError, TopicError)
}

#: Seconds of one look at the stream (the trigger checks its clocks at least this often).
FILL_SLICE = 1.0


def producer_state_key(task_id: str, map_index: int) -> str:
    """The key of a task's state in Airflow's ``task_states`` answer (``task_id[_map_index]``)."""
    return task_id if map_index < 0 else f"{task_id}_{map_index}"


def wait_event_error(event: Mapping[str, Any], *, topic: str, trigger_run_id: str) -> Exception | None:
    """The typed error a resumed task raises for ``event`` of this trigger (``None``: ``ready``)."""
    status = event.get("status")
    message = str(event.get("message", ""))
    if status == "not_started":
        return StreamNotStartedError(message, topic=topic, trigger_run_id=trigger_run_id)
    if status == "gap":
        return StreamGapError(
            message,
            missing_index=int(event["missing_index"]),
            attempt=int(event["attempt"]),
            present=tuple(event.get("present") or ()),
            topic=topic,
            trigger_run_id=trigger_run_id,
        )
    if status == "error":
        kind = _ERROR_TYPES.get(str(event.get("error_type")), KafkaOperationError)
        return kind(f"waiting for stream {trigger_run_id!r} on topic {topic!r} failed: {message}")
    if status != "ready":
        return ValidationError(f"unexpected event from the stream wait trigger: {dict(event)!r}")
    return None


class StreamWaitTrigger(BaseTrigger):
    """Waits in the triggerer until the stream ``trigger_run_id`` has a batch past ``checkpoint``.

    :param topic: the stream's topic.
    :param trigger_run_id: the stream's id.
    :param kafka_config_id: the Kafka connection.
    :param checkpoint: the consumer's position (``Checkpoint.to_json()``), ``None``: the start.
    :param max_events: pages that make a full batch (resume at once).
    :param resume_wait: seconds after the first new page to wait for a full batch.
    :param start_timeout: the consumer's ``start_timeout`` (for messages).
    :param start_deadline: epoch seconds by which the stream must have started.
    :param gap_timeout: the consumer's ``gap_timeout`` (for messages).
    :param gap_deadline: epoch seconds by which the next page must arrive once started
        (``None``: ``gap_timeout`` from when the trigger starts).
    :param producer: ``{"dag_id", "run_id", "task_id", "map_index"}`` of the producing task,
        whose state pauses the start clock (``None``: the clock always runs).
    :param poll_timeout: seconds of one Kafka poll.
    :param state_poll_interval: seconds between two looks at the producer's state.
    """

    def __init__(
        self,
        *,
        topic: str,
        trigger_run_id: str,
        kafka_config_id: str = "kafka_default",
        checkpoint: dict[str, Any] | None = None,
        max_events: int = 100,
        resume_wait: float = 5.0,
        start_timeout: float = 600.0,
        start_deadline: float | None = None,
        gap_timeout: float = 300.0,
        gap_deadline: float | None = None,
        producer: dict[str, Any] | None = None,
        poll_timeout: float = 0.2,
        state_poll_interval: float = 5.0,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.trigger_run_id = trigger_run_id
        self.kafka_config_id = kafka_config_id
        self.checkpoint = checkpoint
        self.max_events = int(max_events)
        self.resume_wait = float(resume_wait)
        self.start_timeout = float(start_timeout)
        self.start_deadline = start_deadline
        self.gap_timeout = float(gap_timeout)
        self.gap_deadline = gap_deadline
        self.producer = producer
        self.poll_timeout = float(poll_timeout)
        self.state_poll_interval = float(state_poll_interval)
        self._states_available = producer is not None

    @classmethod
    def waiting_for(
        cls,
        ref: StreamRef,
        *,
        dag_id: str,
        run_id: str,
        trigger_run_id: str,
        kafka_config_id: str,
        checkpoint: dict[str, Any] | None,
        read: ReadOptions,
        wait: WaitOptions,
        start_deadline: float,
        gap_deadline: float,
    ) -> StreamWaitTrigger:
        """The trigger a consuming task in DAG run ``run_id`` of ``dag_id`` defers to: ``ref``'s
        stream past ``checkpoint``, with the task's reading and waiting options."""
        return cls(
            topic=ref.topic,
            trigger_run_id=trigger_run_id,
            kafka_config_id=kafka_config_id,
            checkpoint=checkpoint,
            max_events=read.max_events,
            resume_wait=wait.resume_wait,
            start_timeout=read.start_timeout,
            start_deadline=start_deadline,
            gap_timeout=read.gap_timeout,
            gap_deadline=gap_deadline,
            producer={
                "dag_id": dag_id,
                "run_id": run_id,
                "task_id": ref.producer_task_id,
                "map_index": ref.map_index,
            },
            poll_timeout=read.poll_timeout,
            state_poll_interval=wait.state_poll_interval,
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            name: getattr(self, name) for name in _KWARGS
        }

    # ------------------------------------------------------------------ seams
    async def _open_watch(self) -> Any:
        """The stream as this trigger follows it: a feed of the triggerer's shared reader of the
        topic (no client of its own; see :mod:`~airflow_kafka_events.streams.consuming.shared_wait`)."""
        from asgiref.sync import sync_to_async

        from airflow_kafka_events.provider.hook import KafkaEventsHook
        from airflow_kafka_events.streams.consuming.follower import StreamFollower
        from airflow_kafka_events.streams.consuming.shared_wait import StreamWatch, wait_reader_config

        hook = KafkaEventsHook(kafka_config_id=self.kafka_config_id)
        settings = await sync_to_async(hook.get_settings)()  # the connection, from Airflow
        start = None if self.checkpoint is None else Checkpoint.from_json(self.checkpoint)
        follower = StreamFollower(
            self.topic, self.trigger_run_id, checkpoint=start, codec=settings.codecs.trigger
        )
        return StreamWatch(wait_reader_config(settings), follower, poll_timeout=self.poll_timeout)

    async def producer_state(self) -> tuple[bool, str | None]:
        """``(known, state)`` of the producing task, asked from Airflow (the triggerer's comms)."""
        if not self._states_available or self.producer is None:
            return False, None
        try:
            from airflow.sdk.execution_time import task_runner
            from airflow.sdk.execution_time.comms import GetTaskStates

            comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
            if comms is None or not hasattr(comms, "asend"):
                raise RuntimeError("no supervisor comms in this process")
            producer = self.producer
            response = await comms.asend(
                GetTaskStates(
                    dag_id=producer["dag_id"],
                    run_ids=[producer["run_id"]],
                    task_ids=[producer["task_id"]],
                    map_index=producer.get("map_index", -1),
                )
            )
            states = getattr(response, "task_states", None) or {}
        except Exception as exc:  # no comms (outside a triggerer) or an old API: the clock runs
            self.log.info("stream %s: producer states unavailable (%s)", self.trigger_run_id, exc)
            self._states_available = False
            return False, None
        key = producer_state_key(producer["task_id"], int(producer.get("map_index", -1)))
        return True, states.get(producer["run_id"], {}).get(key)

    # ------------------------------------------------------------------ run
    async def run(self) -> AsyncIterator[TriggerEvent]:
        watch: Any = None
        try:
            try:
                watch = await self._open_watch()
                payload = await self._wait(watch)
            except StreamGapError as exc:  # more later pages held than the follower keeps
                payload = self._gap_payload(str(exc), exc.missing_index, exc.attempt, exc.present)
            except (KafkaOperationError, StreamReadError) as exc:
                payload = {"status": "error", "error_type": type(exc).__name__, "message": str(exc)}
            yield TriggerEvent(payload)
        finally:
            if watch is not None:
                # shielded: leaving the shared reader (closing it, if last) ends even when cancelled
                await asyncio.shield(watch.close())

    async def _wait(self, watch: Any) -> dict[str, Any]:
        now = time.time()
        start_deadline = self.start_deadline if self.start_deadline is not None else now + self.start_timeout
        gap_deadline = self.gap_deadline if self.gap_deadline is not None else now + self.gap_timeout
        tracker = watch.tracker
        first_ready: float | None = None
        progress = tracker.progress
        next_state_look = now
        while True:
            await watch.fill(FILL_SLICE)
            now = time.time()
            if tracker.progress != progress:
                progress = tracker.progress
                gap_deadline = max(gap_deadline, now + self.gap_timeout)
            if tracker.ready_count and first_ready is None:
                first_ready = now
            reason = self._wake_reason(tracker, first_ready, now)
            if reason is not None:
                return self._ready_payload(reason, tracker, start_deadline)
            if not tracker.started:
                if now >= next_state_look:
                    start_deadline = await self._pause_start_clock(start_deadline, now)
                    next_state_look = now + self.state_poll_interval
                if now >= start_deadline:
                    return self._not_started_payload()
            elif now >= gap_deadline:
                return self._gap_payload(
                    f"stream {self.trigger_run_id!r} on topic {self.topic!r}: sequence_index "
                    f"{tracker.expected} of attempt {tracker.attempt} is missing "
                    f"(waited {self.gap_timeout:g}s)",
                    tracker.expected,
                    tracker.attempt,
                    tuple(tracker.buffered),
                )

    def _wake_reason(self, tracker: Any, first_ready: float | None, now: float) -> str | None:
        if tracker.ended:
            return "end"
        if tracker.restarts:
            return "new-attempt"
        if tracker.ready_count >= self.max_events:
            return "full-batch"
        if first_ready is not None and now - first_ready >= self.resume_wait:
            return "resume-wait"
        return None

    async def _pause_start_clock(self, start_deadline: float, now: float) -> float:
        """The start deadline, moved by the time since the last look if the producer could not start."""
        known, state = await self.producer_state()
        last, self._last_state_look = getattr(self, "_last_state_look", None), now
        return paused_start_deadline(
            start_deadline, producer_state=state, known=known, last_look=last, now=now
        )

    def _ready_payload(self, reason: str, tracker: Any, start_deadline: float) -> dict[str, Any]:
        self.log.info(
            "stream %s: resuming the consumer (%s, %d page(s) ready)",
            self.trigger_run_id,
            reason,
            tracker.ready_count,
        )
        return {
            "status": "ready",
            "reason": reason,
            "ready": tracker.ready_count,
            "start_deadline": start_deadline,
        }

    def _not_started_payload(self) -> dict[str, Any]:
        return {
            "status": "not_started",
            "message": (
                f"stream {self.trigger_run_id!r} on topic {self.topic!r} did not start within "
                f"{self.start_timeout:g}s: no element arrived: its producer never started"
            ),
        }

    def _gap_payload(
        self, message: str, missing_index: int, attempt: int, present: tuple[int, ...]
    ) -> dict[str, Any]:
        return {
            "status": "gap",
            "message": message,
            "missing_index": missing_index,
            "attempt": attempt,
            "present": list(present),
        }
