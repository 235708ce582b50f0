"""``@task.iterable``: task iteration (AIP-104) in the TaskFlow style.

::

    from airflow.sdk import dag, task

    @task.iterable(concurrency=8, item_retries=2, item_timeout=30)
    async def get_pokemon(url: str):
        ...

    get_pokemon.iterate(url=list_pokemon())                 # ONE task instance, every url
    get_pokemon.batch(size=2).iterate(url=list_pokemon())   # TWO instances, ~half each

The decorator is registered as ``task.iterable`` through the provider's ``task-decorators``
(it can also be imported: ``from airflow_kafka_events.iteration import iterable_task``).
Its keyword arguments are those of
:class:`~airflow_kafka_events.iteration.operator.IterableOperator` and the usual task
arguments (``retries``, ``execution_timeout``, ``pool`` ...).

* ``.iterate(**items)`` creates ONE task instance that runs the function once per item;
  items are never materialised as task instances, so there is no ``max_map_length`` cap.
* ``.batch(size=n).iterate(**items)`` creates n task instances with Airflow's own
  ``expand()`` (over the shard indexes 0 .. n-1); each handles the items whose ordinal
  ``% n`` is its index.
* ``.partial(**constants)`` fixes arguments of every call; ``.override(**task_kwargs)``
  changes task arguments, as for ``@task``.

Calling the decorated function directly, or ``.expand()``, is refused: an iterable task
is started with ``.iterate()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import attr
from airflow.sdk.bases.decorator import _TaskDecorator, get_unique_task_id
from airflow.sdk.definitions._internal.contextmanager import DagContext, TaskGroupContext
from airflow.sdk.definitions.xcom_arg import XComArg

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.iteration.calling import validate_iterate_kwargs
from airflow_kafka_events.iteration.operator import IterableOperator

__all__ = [
    "IterableBatch",
    "IterableTaskDecorator",
    "iterable_task",
]


class _IterableDecoratedOperator(IterableOperator):
    """The operator of ``@task.iterable`` tasks."""

    custom_operator_name = "@task.iterable"


@attr.define(slots=False)
class IterableTaskDecorator(_TaskDecorator[Any, Any, Any]):
    """A ``@task.iterable`` function: start it with :meth:`iterate` or :meth:`batch`."""

    def __call__(self, *args: Any, **kwargs: Any) -> XComArg:
        raise TypeError(
            f"@task.iterable task {self.function.__name__!r} is started with "
            f".iterate(argument=items) or .batch(size=n).iterate(argument=items), not called directly"
        )

    def expand(self, **map_kwargs: Any) -> XComArg:
        raise TypeError(
            f"@task.iterable task {self.function.__name__!r}: use .iterate(...) (one task instance) or "
            ".batch(size=n).iterate(...) (n task instances) instead of .expand()"
        )

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> XComArg:
        raise TypeError(
            f"@task.iterable task {self.function.__name__!r}: use .iterate(...) instead of .expand_kwargs()"
        )

    def _split_kwargs(
        self, iterate_kwargs: dict[str, Any], call: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(task arguments, constants)``, once ``iterate_kwargs`` are checked (``call`` names the call)."""
        kwargs = dict(self.kwargs)
        constants = dict(kwargs.pop("op_kwargs", None) or {})
        kwargs.pop("multiple_outputs", None)
        owner = f"{self.function.__name__}.{call}"
        validate_iterate_kwargs(self.function, iterate_kwargs, (), constants, owner=owner)
        return kwargs, constants

    def iterate(self, **iterate_kwargs: Any) -> XComArg:
        """ONE task instance running the function once per item of ``iterate_kwargs``.

        Each value is a list/tuple, an upstream task's output (XComArg), or ONE stream
        (``StreamRef``, ``from_stream(...)``, ``results_of(...)``).  Returns the task's
        output: its summary dict.
        """
        kwargs, constants = self._split_kwargs(iterate_kwargs, "iterate()")
        operator = self.operator_class(
            python_callable=self.function,
            op_args=[],
            op_kwargs=constants,
            iterate_kwargs=iterate_kwargs,
            **kwargs,
        )
        if self.function.__doc__ and not any(
            getattr(operator, name, None) for name in ("doc", "doc_json", "doc_md", "doc_rst", "doc_yaml")
        ):
            operator.doc_md = self.function.__doc__
        return XComArg(operator)

    def batch(self, *, size: int) -> IterableBatch:
        """``size`` task instances sharing the items (``.batch(size=n).iterate(...)``)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"batch(size=...) must be an int >= 1, got {size!r}")
        return IterableBatch(self, size)


@dataclass(eq=False)
class IterableBatch:
    """What ``.batch(size=n)`` returns; its :meth:`iterate` creates the n task instances."""

    decorator: IterableTaskDecorator
    size: int

    def iterate(self, **iterate_kwargs: Any) -> XComArg:
        """n mapped task instances (``expand()`` over shard indexes); see the module doc.

        Returns their output: the n summaries, in shard order.
        """
        decorator = self.decorator
        kwargs, constants = decorator._split_kwargs(iterate_kwargs, f"batch(size={self.size}).iterate()")
        task_id = kwargs.pop("task_id")
        dag = kwargs.pop("dag", None) or DagContext.get_current()
        task_group = kwargs.pop("task_group", None) or TaskGroupContext.get_current(dag)
        task_id = get_unique_task_id(task_id, dag, task_group)
        if decorator.function.__doc__ and "doc_md" not in kwargs:
            kwargs["doc_md"] = decorator.function.__doc__
        partial = decorator.operator_class.partial(
            task_id=task_id,
            dag=dag,
            task_group=task_group,
            python_callable=decorator.function,
            op_args=[],
            op_kwargs=constants,
            iterate_kwargs=iterate_kwargs,
            shards=self.size,
            **kwargs,
        )
        return XComArg(partial.expand(shard=list(range(self.size))))


def iterable_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> Any:
    """``@task.iterable`` / ``@task.iterable(**operator_kwargs)`` (see the module doc)."""
    for reserved in ("iterate_kwargs", "shard", "shards", "python_callable"):
        if reserved in kwargs:
            raise ConfigurationError(f"@task.iterable takes no {reserved}=: it is set by iterate() / batch()")

    def wrap(function: Callable[..., Any]) -> IterableTaskDecorator:
        if not callable(function):
            raise TypeError("@task.iterable takes no positional arguments; use keyword arguments")
        return IterableTaskDecorator(
            function=function,
            multiple_outputs=False,
            operator_class=_IterableDecoratedOperator,
            kwargs=dict(kwargs),
            decorator_name="iterable",
        )

    if python_callable is not None:
        return wrap(python_callable)
    return wrap
