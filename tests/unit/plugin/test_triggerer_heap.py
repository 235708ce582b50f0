"""A triggerer's runner starts with the heap it inherits frozen (``gc.freeze``), the supervisor's
garbage collected just before the fork; other jobs' children and ``[kafka_events]
triggerer_freeze_heap = false`` leave the collector alone.

Each case runs in a subprocess (the collector's state and the fork handlers are the process's; pytest's
own must stay as they are): a real Airflow ``Job`` (its ``on_starting`` goes through Airflow's listener
manager to the plugin's listener) and a real ``os.fork()``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

CODE = """
import gc, json, os, sys
from airflow.jobs.job import Job

class Cycle:
    def __init__(self):
        self.me = self

kind = sys.argv[1]
job = Job()
if kind == "triggerer":
    from airflow.jobs.triggerer_job_runner import TriggererJobRunner
    TriggererJobRunner(job=job, capacity=10)
elif kind == "scheduler":
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    SchedulerJobRunner(job=job)
gc.disable()  # no automatic collection: only the fork handler can reclaim this cycle before the fork
Cycle()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    frozen = gc.get_freeze_count()
    # the runner forks in turn (a trigger's process pool): its own objects stay out of any freeze
    made_in_runner = [[n] for n in range(20_000)]
    inner_read, inner_write = os.pipe()
    grandchild = os.fork()
    if grandchild == 0:
        os.write(inner_write, str(gc.get_freeze_count()).encode())
        os._exit(0)
    os.close(inner_write)
    grandchild_frozen = int(os.read(inner_read, 100))
    os.waitpid(grandchild, 0)
    gc.unfreeze()
    garbage_frozen = any(isinstance(o, Cycle) for o in gc.get_objects())
    report = {"frozen": frozen, "garbage_frozen": garbage_frozen, "grandchild_frozen": grandchild_frozen}
    os.write(write, json.dumps(report).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 1000))
os.waitpid(pid, 0)
print(json.dumps({"parent_frozen": gc.get_freeze_count(), **child}))
"""


def _fork_after(kind: str, **env: str) -> dict[str, object]:
    import json

    result = subprocess.run(
        [sys.executable, "-c", CODE, kind],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_a_triggerers_runner_starts_with_its_inherited_heap_frozen_and_no_garbage_in_it():
    seen = _fork_after("triggerer")
    assert seen["frozen"] > 50_000, seen  # Airflow's imports and the job: everything inherited
    assert seen["garbage_frozen"] is False, "the supervisor's garbage was frozen into the runner"
    assert seen["parent_frozen"] == 0, "the supervisor's own collector was changed"
    # (a few inherited frozen objects die in the grandchild's own after-fork clean-up; none are added)
    assert seen["grandchild_frozen"] <= seen["frozen"], "a fork of the runner froze the runner's objects"


def test_other_jobs_forks_leave_the_collector_alone():
    seen = _fork_after("scheduler")
    assert seen["frozen"] == 0 and seen["parent_frozen"] == 0, seen


def test_triggerer_freeze_heap_false_leaves_the_runners_collector_alone():
    seen = _fork_after("triggerer", AIRFLOW__KAFKA_EVENTS__TRIGGERER_FREEZE_HEAP="false")
    assert seen["frozen"] == 0 and seen["parent_frozen"] == 0, seen
