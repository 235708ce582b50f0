"""The part of :class:`~harness.airflow_stack.AirflowStack` that reads its logs: each component's
(``<home>/logs/<component>.log``, the current run or all), a task try's and a trigger's log files,
and the diagnostics an error message carries.  A mixin over the stack's ``components`` and ``log_dir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.processes import _tail

COMPONENTS: tuple[str, ...] = ("api-server", "scheduler", "triggerer", "dag-processor")


class ComponentLogs:
    """Log files of a deployment's components, task tries and triggers."""

    # provided by AirflowStack
    components: dict[str, Any]
    log_dir: Path

    def logs(self, component: str, *, current_only: bool = False) -> str:
        """Text of ``component``'s log file (all incarnations, or only the current one)."""
        comp = self.components[component]
        try:
            data = comp.log_path.read_bytes()
        except FileNotFoundError:
            return ""
        if current_only:
            data = data[comp.start_offset :]
        return data.decode("utf-8", errors="replace")

    def log_tail(self, component: str, lines: int = 40) -> str:
        return _tail(self.components[component].log_path, lines)

    def diagnostics(self, components: Sequence[str] = COMPONENTS, lines: int = 40) -> str:
        """Process state and log tails of ``components``, for failure messages."""
        parts = []
        for name in components:
            comp = self.components[name]
            if comp.proc is None:
                state = "never started"
            elif comp.proc.poll() is None:
                state = f"running, pid {comp.proc.pid}"
            elif comp.stopped:
                state = f"stopped by the harness, exit code {comp.proc.returncode}"
            else:
                state = f"EXITED with code {comp.proc.returncode}"
            parts.append(f"--- {name} ({state}), last {lines} lines of {comp.log_path} ---\n")
            parts.append(self.log_tail(name, lines) + "\n")
        return "".join(parts)

    def _task_log_path(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int) -> Path:
        path = self.log_dir / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            path = path / f"map_index={map_index}"
        return path / f"attempt={try_number}.log"

    def task_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        """The task's log file written by the worker (``[logging] log_filename_template`` layout)."""
        try:
            return self._task_log_path(dag_id, run_id, task_id, try_number, map_index).read_text(
                errors="replace"
            )
        except FileNotFoundError:
            return ""

    def trigger_log_files(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> list[Path]:
        """Trigger log files of the try, oldest triggerer job first (see :meth:`trigger_log`)."""
        task_log = self._task_log_path(dag_id, run_id, task_id, try_number, map_index)

        def job_id(path: Path) -> int:
            part = path.name.rsplit(".", 2)[-2]
            return int(part) if part.isdigit() else 0

        return sorted(task_log.parent.glob(f"{task_log.name}.trigger.*.log"), key=job_id)

    def trigger_log(
        self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1
    ) -> str:
        """What the triggerer(s) logged for the task's triggers of that try (JSON lines).

        The triggerer writes them next to the task log as ``attempt=N.log.trigger.<triggerer job id>.log``,
        one file per triggerer job that ran the trigger (a restarted triggerer adds a file).
        """
        files = self.trigger_log_files(dag_id, run_id, task_id, try_number, map_index)
        return "".join(p.read_text(errors="replace") for p in files)
