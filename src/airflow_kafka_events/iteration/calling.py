"""Calling an iterated callable like ``@task`` calls its function.

:func:`validate_iterate_kwargs` checks, when the DAG file is parsed, that the items can be
passed to the callable; :func:`item_outcome` maps what an item's call raised onto the runner's
outcomes; :func:`item_handler` is the runner's handler of one item: the call (its keyword
arguments built as ``@task`` builds them), then the item's partitioned asset event.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from airflow.sdk.bases.decorator import is_async_callable
from airflow.sdk.definitions._internal.mixins import ResolveMixin
from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from airflow_kafka_events.iteration.errors import NonRetryableItemError, SkipItem
from airflow_kafka_events.iteration.sources import StreamItems
from airflow_kafka_events.streams.consuming.operator import StreamRef

__all__ = [
    "item_handler",
    "item_outcome",
    "validate_iterate_kwargs",
]

_ITERABLE_HINT = (
    "a list or tuple, an upstream task's output (XComArg), a StreamRef, or from_stream(...) / results_of(...)"
)


def validate_iterate_kwargs(
    python_callable: Callable[..., Any],
    iterate_kwargs: Mapping[str, Any],
    op_args: Sequence[Any] = (),
    op_kwargs: Mapping[str, Any] | None = None,
    *,
    owner: str = "iterate()",
) -> None:
    """Check, when the DAG is parsed, that the items can be passed to ``python_callable``."""
    op_kwargs = op_kwargs or {}
    if not isinstance(iterate_kwargs, Mapping) or not iterate_kwargs:
        raise TypeError(f"{owner} needs at least one argument to iterate over, e.g. iterate(url=urls)")
    for name, value in iterate_kwargs.items():
        if name in KNOWN_CONTEXT_KEYS:
            raise ValueError(f"{owner}: cannot iterate over the task context variable {name!r}")
        if name in op_kwargs:
            raise TypeError(f"{owner}: argument {name!r} is both iterated over and given as a constant")
        if not isinstance(value, (ResolveMixin, StreamRef, StreamItems, list, tuple, range)):
            raise TypeError(
                f"{owner}: argument {name!r} must be {_ITERABLE_HINT}; got {type(value).__qualname__}"
            )
    streams = [name for name, value in iterate_kwargs.items() if isinstance(value, (StreamRef, StreamItems))]
    if streams and len(iterate_kwargs) > 1:
        raise TypeError(
            f"{owner}: a stream ({streams[0]!r}) must be the only argument iterated over; "
            "pass the other arguments as constants with .partial(...)"
        )
    signature = inspect.signature(python_callable)
    # the items' arguments are only known at run time: bind placeholders
    kwargs = {**op_kwargs, **dict.fromkeys(iterate_kwargs)}
    # context keys need no value; a default on the parameters given by keyword too keeps the
    # signature valid (a parameter without default after one with a default is fine here)
    loose = [
        p.replace(default=None)
        if p.default is p.empty
        and (
            p.name in KNOWN_CONTEXT_KEYS
            or (p.name in kwargs and p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY))
        )
        else p
        for p in signature.parameters.values()
    ]
    try:
        relaxed = signature.replace(parameters=loose)
    except ValueError:
        relaxed = signature
    try:
        relaxed.bind(*op_args, **kwargs)
    except TypeError as exc:
        name = getattr(python_callable, "__name__", repr(python_callable))
        raise TypeError(f"{owner}: {name}() cannot be called with these arguments: {exc}") from exc


@contextlib.contextmanager
def item_outcome() -> Iterator[None]:
    """An item's ``TaskDeferred`` fails it without retries; ``AirflowSkipException`` skips it."""
    try:
        yield
    except TaskDeferred as exc:
        raise NonRetryableItemError(
            f"an item cannot defer ({type(exc).__name__}); iterate items that run on the worker, "
            "or stream the deferred work through Kafka and iterate that stream"
        ) from None
    except AirflowSkipException as exc:
        raise SkipItem(str(exc)) from exc


#: ``emit(item_kwargs, context, result)``: an item's partitioned asset event.
Emit = Callable[[Mapping[str, Any], dict[str, Any], Any], None]


def item_handler(
    fn: Callable[..., Any], op_args: Sequence[Any], op_kwargs: Mapping[str, Any], emit: Emit | None
) -> Callable[[Any, dict[str, Any]], Any]:
    """The runner's handler of one item: ``fn`` called like ``@task`` calls it (an async ``fn`` on
    the event loop), then ``emit`` (on a thread for an async ``fn``)."""
    op_args = tuple(op_args)
    constants = dict(op_kwargs)
    params = list(inspect.signature(fn).parameters.values())
    wildcard = any(p.kind == p.VAR_KEYWORD for p in params)
    positional = {
        p.name for p in params[: len(op_args)] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    }
    names = [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in positional
    ]

    def binder(item_kwargs: Mapping[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        """The call's keyword arguments, as ``@task`` builds them (``KeywordParameters``): context,
        constants and the item's arguments (lowest precedence first), merged into the item's
        context copy."""
        context.update(constants)
        context.update(item_kwargs)
        if wildcard:
            return {k: v for k, v in context.items() if k not in positional} if positional else context
        return {name: context[name] for name in names if name in context}

    if is_async_callable(fn):

        async def handler(item_kwargs: Any, context: dict[str, Any]) -> Any:
            with item_outcome():
                result = await fn(*op_args, **binder(item_kwargs, context))
            if emit is not None:
                await asyncio.to_thread(emit, item_kwargs, context, result)
            return result

        return handler

    def sync_handler(item_kwargs: Any, context: dict[str, Any]) -> Any:
        with item_outcome():
            result = fn(*op_args, **binder(item_kwargs, context))
        if emit is not None:
            emit(item_kwargs, context, result)
        return result

    return sync_handler
