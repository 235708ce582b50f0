"""The plugin's listener that leaves a triggerer's runner's inherited heap out of garbage collection.

Airflow's triggerer runs its triggers in a subprocess, the runner, forked from its supervisor (on
Linux; Airflow 3.4 spawns it afresh on macOS, where nothing is inherited).  The runner inherits the
supervisor's heap: about 275,000 objects the cyclic collector tracks (Airflow's imports and the
supervisor's state), alive as long as the process.  Every full collection in the runner walks all
of them (0.2-0.3 s on a busy 2-core machine) holding the GIL, so the runner's event loop waits and
Airflow's watchdog reports it blocked (``triggers.blocked_main_thread``), however short each
trigger's own steps are.  Airflow freezes a heap before it forks in its LocalExecutor, its Celery
workers and its DAG processor, not before it forks the triggerer's runner.

``on_starting`` (Airflow's listener hook, called when a job is created) registers fork handlers
for the job.  When that job is a triggerer's and the process forking is the one that created it
(the supervisor, not a runner forking in turn), the supervisor collects its garbage just before it
forks, and the runner, just forked and before its event loop starts, freezes what it inherited
(``gc.freeze()``; on Python 3.11-3.13 a constant-time splice of the collector's lists, while
Python 3.14's incremental collector walks the objects once).  Its full collections then walk only
what the runner made itself.  Frozen objects are still freed when their last reference goes; one
that dies in a reference cycle is not reclaimed, nor what only it holds.  That is bounded: the
supervisor's objects at the fork, its garbage collected just before, and what Airflow's own
after-fork handlers drop in the runner before the freeze (its database engine's pool, disposed
there: ~700 objects).  The supervisor itself is left as it is.  ``[kafka_events]
triggerer_freeze_heap = false`` leaves the runner's collector alone.  Forks of other jobs (the
scheduler, the DAG processor) and of any other process do nothing.
"""

from __future__ import annotations

import gc
import logging
import os
import weakref
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)

__all__ = ["RunnerHeapFreeze", "on_starting"]

TRIGGERER_JOB_TYPE = "TriggererJob"


def _freeze_enabled() -> bool:
    from airflow.configuration import conf

    return conf.getboolean("kafka_events", "triggerer_freeze_heap", fallback=True)


class RunnerHeapFreeze:
    """The fork handlers of one job: collect before a triggerer's supervisor forks, freeze in the child.

    Holds the job weakly (a process that creates many jobs keeps none of them alive); the job's type
    is read at the fork, when its job runner has set it (``on_starting`` comes before that).  Acts
    only in the process that created the job: a child inherits the handlers, and a runner that
    forks in turn (a trigger's process pool) must not collect or freeze anything.
    """

    def __init__(self, job: Any) -> None:
        self._job = weakref.ref(job)
        self._pid = os.getpid()
        self._freeze_in_child = False

    def applies(self) -> bool:
        if os.getpid() != self._pid:
            return False
        job = self._job()
        # the instance's own value: never an ORM load inside a fork handler
        return job is not None and vars(job).get("job_type") == TRIGGERER_JOB_TYPE and _freeze_enabled()

    def before(self) -> None:
        self._freeze_in_child = False
        try:
            if not self.applies():
                return
            gc.collect()
            self._freeze_in_child = True
        except Exception:  # a fork handler must not break the fork
            log.warning(
                "Cannot prepare the triggerer's runner's heap freeze; its collector is left alone",
                exc_info=True,
            )

    def after_in_child(self) -> None:
        if self._freeze_in_child:
            self._freeze_in_child = False
            gc.freeze()

    def after_in_parent(self) -> None:
        self._freeze_in_child = False

    def register(self) -> None:
        os.register_at_fork(
            before=self.before, after_in_child=self.after_in_child, after_in_parent=self.after_in_parent
        )


@hookimpl
def on_starting(component: Any) -> None:
    """Airflow's listener hook (see the module docstring): a job registers its fork handlers."""
    if not hasattr(component, "job_type"):  # not a job (a task runner, a worker)
        return
    try:
        RunnerHeapFreeze(component).register()
    except Exception:
        log.warning(
            "Cannot register the triggerer's runner's heap freeze; its collector is left alone", exc_info=True
        )
