"""Stream every event of an existing trigger through Kafka.

:class:`StreamingWrapperTrigger` runs any trigger (given as classpath and kwargs, exactly what
its ``serialize()`` returns) and writes each event it yields as one page: the payload of a
``TriggerEvent`` (converted to JSON, see :func:`json_payload`), or for a task-ending event
(``TaskSuccessEvent``, ``TaskFailedEvent``, ``TaskSkippedEvent``)
``{"task_instance_state": <state>, "xcoms": <xcoms>}``, after which the stream ends.  A
``TaskFailedEvent`` also ends the stream with ``StreamFailure(type="TaskFailed")`` so the task
fails as the wrapped trigger wanted.

The stream ends when the wrapped trigger returns, after ``max_events`` events, or when
``timeout`` seconds have passed since the wrapped trigger started: then with
``StreamFailure(type="Timeout")`` (the task fails), or, with ``timeout_is_error=False``,
normally.  The wrapped trigger is cancelled and its ``cleanup()`` awaited either way.

Wrapped triggers cannot be resumed mid-stream (their pages have no cursor): a wrapper
interrupted by a triggerer restart starts a new attempt when it runs again.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from typing import Any

from airflow.sdk.module_loading import import_string
from airflow.triggers.base import BaseTaskEndEvent, BaseTrigger
from airflow.utils.state import TaskInstanceState

from airflow_kafka_events.envelopes.model import StreamFailure
from airflow_kafka_events.errors import (
    ConfigurationError,
    EnvelopeEncodeError,
    StreamTimeoutError,
    WrappedTaskFailedError,
)
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger

__all__ = [
    "TASK_FAILED_ERROR_TYPE",
    "TIMEOUT_ERROR_TYPE",
    "StreamingWrapperTrigger",
    "json_payload",
]

#: ``StreamError.type`` of a stream ended by ``timeout``.
TIMEOUT_ERROR_TYPE = "Timeout"
#: ``StreamError.type`` of a stream whose wrapped trigger yielded ``TaskFailedEvent``.
TASK_FAILED_ERROR_TYPE = "TaskFailed"

_MAX_DEPTH = 200


_NOT_A_SCALAR = object()


def _scalar(value: Any) -> Any:
    """The JSON form of a scalar value; :data:`_NOT_A_SCALAR` for anything else."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)  # strict JSON has no nan/inf
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return _NOT_A_SCALAR


def _collection(value: Any, depth: int) -> Any:
    """The JSON form of a mapping, sequence or set; :data:`_NOT_A_SCALAR` for anything else."""
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(k): _json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_json(v, depth + 1) for v in value]
        with suppress(TypeError):
            items.sort()
        return items
    return _NOT_A_SCALAR


def _json(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise EnvelopeEncodeError("event payload is nested too deeply to convert to JSON")
    if isinstance(value, enum.Enum) and not isinstance(value, str):
        return _json(value.value, depth + 1)
    converted = _scalar(value)
    if converted is _NOT_A_SCALAR:
        converted = _collection(value, depth)
    if converted is not _NOT_A_SCALAR:
        return converted
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):  # pydantic models
        return _json(model_dump(mode="json"), depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json(dataclasses.asdict(value), depth + 1)
    try:
        from airflow.sdk.serde import serialize

        return _json(serialize(value), depth + 1)
    except Exception as exc:
        raise EnvelopeEncodeError(
            f"event payload value of type {type(value).__qualname__!r} cannot be converted to JSON: {exc}"
        ) from exc


def json_payload(value: Any) -> Any:
    """An event payload as a page payload.

    Top-level ``bytes`` stay raw bytes.  Otherwise the value becomes JSON: datetimes, dates
    and times as ISO 8601 text, timedeltas as seconds, enums as their value, Decimal and
    UUID as text, nested bytes as base64 text, tuples and sets as arrays, non-str keys as
    text, non-finite floats as text, pydantic models and dataclasses as objects, and
    anything else through Airflow's serde (``{"__classname__", "__version__", "__data__"}``,
    which ``airflow.sdk.serde.deserialize`` turns back into the object).
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return _json(value, 0)


def _state_text(state: Any) -> str:
    return str(state.value) if isinstance(state, enum.Enum) else str(state)


class StreamingWrapperTrigger(StreamingTrigger):
    """Runs a wrapped trigger and streams each event it yields through Kafka.

    :param wrapped_classpath: classpath of the wrapped trigger (``serialize()[0]``).
    :param wrapped_kwargs: its keyword arguments (``serialize()[1]``).
    :param max_events: stop after this many events (``None``: no limit).
    :param timeout: stop this many seconds after the wrapped trigger started (``None``: never).
    :param timeout_is_error: a timeout ends the stream with ``StreamFailure(type="Timeout")``
        (default) or, when false, normally.

    Stream keyword arguments as in :class:`StreamingTrigger`.
    """

    def __init__(
        self,
        *,
        wrapped_classpath: str,
        wrapped_kwargs: Mapping[str, Any] | None = None,
        max_events: int | None = None,
        timeout: float | None = None,
        timeout_is_error: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(wrapped_classpath, str) or "." not in wrapped_classpath:
            raise ConfigurationError(
                f"wrapped_classpath must be a dotted classpath, got {wrapped_classpath!r}"
            )
        if wrapped_kwargs is not None and not isinstance(wrapped_kwargs, Mapping):
            raise ConfigurationError(
                f"wrapped_kwargs must be a dict or None, got {type(wrapped_kwargs).__qualname__}"
            )
        if max_events is not None and (
            isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 0
        ):
            raise ConfigurationError(f"max_events must be a non-negative int or None, got {max_events!r}")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigurationError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
        self.wrapped_classpath = wrapped_classpath
        self.wrapped_kwargs: dict[str, Any] = dict(wrapped_kwargs or {})
        self.max_events = max_events
        self.timeout = timeout
        self.timeout_is_error = bool(timeout_is_error)
        self._wrapped: BaseTrigger | None = None

    @classmethod
    def wrap(cls, trigger: BaseTrigger, **options: Any) -> StreamingWrapperTrigger:
        """Wrap a trigger instance (through its ``serialize()``); ``options`` are this class's kwargs."""
        classpath, kwargs = trigger.serialize()
        return cls(wrapped_classpath=classpath, wrapped_kwargs=kwargs, **options)

    def trigger_kwargs(self) -> dict[str, Any]:
        return {
            "wrapped_classpath": self.wrapped_classpath,
            "wrapped_kwargs": dict(self.wrapped_kwargs),
            "max_events": self.max_events,
            "timeout": self.timeout,
            "timeout_is_error": self.timeout_is_error,
        }

    def build_wrapped(self) -> BaseTrigger:
        """A new instance of the wrapped trigger, attached to this trigger's task instance."""
        trigger_class = import_string(self.wrapped_classpath)
        trigger = trigger_class(**self.wrapped_kwargs)
        if not isinstance(trigger, BaseTrigger):
            raise ConfigurationError(f"{self.wrapped_classpath} is not a trigger class")
        if self.task_instance is not None:
            trigger.task_instance = self.task_instance
        trigger.trigger_id = self.trigger_id
        return trigger

    def stream_error_for(self, exc: BaseException) -> StreamFailure:
        if isinstance(exc, StreamTimeoutError):
            return StreamFailure(type=TIMEOUT_ERROR_TYPE, message=str(exc))
        if isinstance(exc, WrappedTaskFailedError):
            return StreamFailure(type=TASK_FAILED_ERROR_TYPE, message=str(exc))
        return super().stream_error_for(exc)

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        trigger = self._wrapped = self.build_wrapped()
        events = trigger.run()
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        seen = 0
        try:
            while self.max_events is None or seen < self.max_events:
                got, event = await self._next_event(
                    events, None if deadline is None else deadline - loop.time()
                )
                if not got:
                    if self.timeout_is_error:
                        raise StreamTimeoutError(
                            f"{self.wrapped_classpath} did not finish within {self.timeout}s "
                            f"({seen} event(s) streamed)"
                        )
                    return
                if event is _EXHAUSTED:
                    return
                seen += 1
                if isinstance(event, BaseTaskEndEvent):
                    state = event.task_instance_state
                    yield Page(
                        payload={
                            "task_instance_state": _state_text(state),
                            "xcoms": json_payload(event.xcoms),
                        }
                    )
                    if state == TaskInstanceState.FAILED:
                        raise WrappedTaskFailedError(f"{self.wrapped_classpath} ended the task as failed")
                    return
                yield Page(payload=json_payload(getattr(event, "payload", event)))
        finally:
            with suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]
            with suppress(Exception):
                await trigger.cleanup()

    @staticmethod
    async def _next_event(events: AsyncIterator[Any], left: float | None) -> tuple[bool, Any]:
        """``(True, event)``, ``(True, _EXHAUSTED)``, or ``(False, None)`` when ``left`` ran out."""
        if left is not None and left <= 0:
            return False, None
        step = asyncio.ensure_future(events.__anext__())
        try:
            done, _ = await asyncio.wait({step}, timeout=left)
        except BaseException:
            step.cancel()
            with suppress(BaseException):
                await step
            raise
        if step not in done:
            step.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await step
            return False, None
        try:
            return True, step.result()
        except StopAsyncIteration:
            return True, _EXHAUSTED

    async def on_kill(self) -> None:
        """Forward a user's kill to the wrapped trigger."""
        if self._wrapped is not None:
            await self._wrapped.on_kill()


#: What :meth:`StreamingWrapperTrigger._next_event` returns once the wrapped trigger is exhausted.
_EXHAUSTED: Any = object()
