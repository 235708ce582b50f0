"""What differs between the Airflow versions this package supports (3.3 and 3.4), in one place.

Each difference is detected from the installed Airflow's own API (never from its version string),
so a backport or a pre-release behaves like the release whose API it has:

* **earlier tries of a task instance** -- Airflow 3.3 keeps them in ``task_instance_history``
  (``TaskInstanceHistory``); Airflow 3.4 keeps every try as a ``task_instance`` row, the current
  one with ``working_set`` true and the archived ones with ``working_set`` NULL, and hides the
  archived rows from ORM queries unless the statement sets ``include_all_attempts``.
  :func:`earlier_tries` gives the model, the criteria and the execution options that select
  them on either version.
* **trigger queues for asset watchers** -- Airflow 3.4's ``BaseEventTrigger`` takes
  ``queue=`` (a triggerer started with ``--queues`` runs only the watchers of its queues);
  Airflow 3.3's has no queue and any triggerer runs any watcher.  :func:`watcher_queue` checks
  the argument and refuses it where Airflow would ignore it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_events.errors import UnsupportedByAirflowError, ValidationError

__all__ = [
    "EarlierTries",
    "earlier_tries",
    "watcher_queue",
    "watcher_queues_supported",
]


@dataclass(frozen=True)
class EarlierTries:
    """How to select the earlier (archived) tries of task instances on the installed Airflow.

    ``model`` has ``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``,
    ``start_date`` and ``end_date``; add ``criteria`` to the statement's ``WHERE`` and
    ``options`` to its ``execution_options``.
    """

    model: Any
    criteria: tuple[Any, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)


def earlier_tries() -> EarlierTries:
    """The model, criteria and execution options that select earlier tries (see the module doc)."""
    from airflow.models.taskinstance import TaskInstance

    if hasattr(TaskInstance, "working_set"):  # Airflow 3.4: one row per try
        return EarlierTries(
            model=TaskInstance,
            criteria=(TaskInstance.working_set.is_(None),),
            options={"include_all_attempts": True},
        )
    from airflow.models.taskinstancehistory import TaskInstanceHistory

    return EarlierTries(model=TaskInstanceHistory)


def watcher_queues_supported() -> bool:
    """Whether the installed Airflow places asset watchers on trigger queues (3.4 on)."""
    from airflow.triggers.base import BaseEventTrigger

    return "queue" in inspect.signature(BaseEventTrigger.__init__).parameters


def watcher_queue(queue: Any) -> str | None:
    """``queue`` checked for an asset watcher's trigger.

    :raises ValidationError: not ``None`` nor a non-blank ``str``.
    :raises UnsupportedByAirflowError: a queue on an Airflow without watcher queues (3.3).
    """
    if queue is None:
        return None
    if not isinstance(queue, str) or not queue.strip() or queue != queue.strip():
        raise ValidationError(
            f"queue must be a non-blank str without surrounding spaces (a triggerer's --queues name), "
            f"or None; got {queue!r}"
        )
    if not watcher_queues_supported():
        raise UnsupportedByAirflowError(
            f"queue={queue!r}: this Airflow cannot place asset watchers on trigger queues (Airflow 3.3's "
            "watchers run on any triggerer). Remove queue= to run the watcher on any triggerer, or "
            "upgrade to Airflow 3.4, whose triggerers started with --queues run the watchers of their queues."
        )
    return queue
