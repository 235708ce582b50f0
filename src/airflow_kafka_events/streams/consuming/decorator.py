"""``@task.stream_consumer``: a function as the batch handler of a :class:`StreamConsumerOperator`.

::

    from airflow.sdk import task
    from airflow_kafka_events.streams.consuming.operator import StreamRef

    @task.stream_consumer(stream=StreamRef("produce"), max_events=50)
    def handle(events, context):
        for event in events:
            ...

    handle()

The function is called once per batch with ``(events, context)`` followed by whatever the
task was called with (``handle(table="x")`` calls ``handle(events, context, table="x")``);
``events`` is a list of :class:`~airflow_kafka_events.streams.consuming.consumption.StreamEvent`.
The task returns the consumer's summary dict.  The decorator is registered as
``task.stream_consumer`` through the provider's ``task-decorators``; it can also be used
directly: ``from airflow_kafka_events.streams.consuming.decorator import stream_consumer_task``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.decorator import get_unique_task_id, task_decorator_factory

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator

if TYPE_CHECKING:
    from airflow.sdk.bases.decorator import TaskDecorator
    from airflow.sdk.definitions.context import Context

    from airflow_kafka_events.streams.consuming.consumption import StreamEvent

__all__ = [
    "stream_consumer_task",
]


class _StreamConsumerDecoratedOperator(StreamConsumerOperator):
    """A :class:`StreamConsumerOperator` whose batch handler is the decorated function."""

    custom_operator_name = "@task.stream_consumer"
    template_fields: Sequence[str] = ("op_args", "op_kwargs")
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py"}
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        task_id: str,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not getattr(self, "_BaseOperator__from_mapped", False):
            task_id = get_unique_task_id(task_id, kwargs.get("dag"), kwargs.get("task_group"))
        op_args = list(op_args or [])
        op_kwargs = dict(op_kwargs or {})
        try:
            # the handler receives (events, context) first, then what the task was called with
            inspect.signature(python_callable).bind(None, None, *op_args, **op_kwargs)
        except TypeError as exc:
            raise TypeError(
                f"@task.stream_consumer function {getattr(python_callable, '__name__', python_callable)!r} "
                f"must accept (events, context, *call arguments): {exc}"
            ) from exc
        self.python_callable = python_callable
        self.op_args = op_args
        self.op_kwargs = op_kwargs
        kwargs.pop("handler", None)
        super().__init__(task_id=task_id, **kwargs)

    def handle_trigger_events(self, events: Sequence[StreamEvent], context: Context) -> Any:
        return self.python_callable(events, context, *self.op_args, **self.op_kwargs)


def stream_consumer_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Turn ``handler(events, context, ...)`` into a :class:`StreamConsumerOperator` task.

    ``kwargs`` are the operator's (``stream=StreamRef(...)`` is required, ``max_events``,
    ``max_wait``, ``gap_timeout``, ``start_timeout``, ``deferrable``, ``reschedule``,
    ``reschedule_interval``, ``idle_interval``, ``resume_wait``, ... and the usual task arguments).
    """
    if "handler" in kwargs:
        raise ConfigurationError(
            "@task.stream_consumer takes no handler=: the decorated function is the handler"
        )
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_StreamConsumerDecoratedOperator,
        **kwargs,
    )
