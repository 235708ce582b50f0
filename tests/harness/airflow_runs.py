"""The part of :class:`~harness.airflow_stack.AirflowStack` that asks a running deployment about its
DAGs, runs, task instances and XComs (REST API) and reads its metadata DB (read-only SQL).

A mixin: :class:`RunsAndMetadata` uses the stack's ``api`` / ``api_json`` / ``wait_for`` /
``_check_alive`` / ``_fail`` and its database settings.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

TERMINAL_DAG_RUN_STATES = ("success", "failed")


class AirflowStackError(RuntimeError):
    """A component failed to start, died, or a wait ran past its deadline."""


def json_column(value: Any) -> Any:
    """A JSON column of a :meth:`RunsAndMetadata.query` row as Python: SQLite gives its text,
    PostgreSQL (the production topology) the decoded value."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _q(value: str) -> str:
    """Quote one path segment of a REST URL."""
    return quote(value, safe="")


class RunsAndMetadata:
    """DAGs, runs, task instances, XComs and the metadata DB of a running deployment."""

    # provided by AirflowStack
    api: Any
    api_json: Any
    wait_for: Any
    _check_alive: Any
    _fail: Any
    database: str
    database_url: str
    db_path: Any

    def import_errors(self) -> list[dict[str, Any]]:
        return self.api_json("GET", "importErrors", params={"limit": 100})["import_errors"]

    def wait_dag_parsed(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until ``GET /api/v2/dags/{dag_id}`` answers 200; return the DAG."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(("api-server", "dag-processor"))
            response = self.api("GET", f"dags/{_q(dag_id)}")
            if response.status_code == 200:
                return response.json()
            if time.monotonic() > deadline:
                try:
                    errors = json.dumps(self.import_errors(), indent=1)[:4000]
                except AirflowStackError as exc:
                    errors = str(exc)
                raise self._fail(
                    f"DAG {dag_id!r} was not parsed within {timeout:.0f}s (last answer "
                    f"{response.status_code}); DAGs folder {self.dags_folder} holds "
                    f"{sorted(p.name for p in self.dags_folder.iterdir())}; import errors: {errors}",
                    components=("dag-processor", "api-server"),
                )
            time.sleep(0.5)

    def unpause(self, dag_id: str) -> None:
        self.api_json(
            "PATCH",
            f"dags/{_q(dag_id)}",
            params={"update_mask": "is_paused"},
            json={"is_paused": False},
            expect=200,
        )

    def trigger_dag(
        self,
        dag_id: str,
        conf: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        *,
        user: str = "admin",
        parse_timeout: float = 120.0,
    ) -> str:
        """Wait for ``dag_id`` to be parsed, unpause it, create a manual run; return its run_id."""
        self.wait_dag_parsed(dag_id, timeout=parse_timeout)
        self.unpause(dag_id)
        body: dict[str, Any] = {"logical_date": None, "conf": dict(conf or {})}
        if run_id is not None:
            body["dag_run_id"] = run_id
        run = self.api_json("POST", f"dags/{_q(dag_id)}/dagRuns", json=body, user=user, expect=200)
        return run["dag_run_id"]

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.api_json("GET", f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}", expect=200)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.api_json(
            "GET",
            f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances",
            params={"limit": 100},
            expect=200,
        )["task_instances"]

    def _run_summary(self, dag_id: str, run_id: str) -> str:
        try:
            tis = self.task_instances(dag_id, run_id)
        except (AirflowStackError, httpx.HTTPError) as exc:
            return f"<task instances unavailable: {exc}>"
        return ", ".join(f"{ti['task_id']}[{ti['map_index']}]={ti['state']}" for ti in tis) or "<none>"

    def wait_for_dag_run(
        self,
        dag_id: str,
        run_id: str,
        states: Iterable[str] = TERMINAL_DAG_RUN_STATES,
        timeout: float = 180.0,
    ) -> str:
        """Wait until the run's state is one of ``states``; return that state.

        A poll the api-server does not answer in time (a loaded machine) is polled again until the deadline.
        """
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                state = self.dag_run(dag_id, run_id)["state"]
            except httpx.TimeoutException as exc:
                state = f"<no answer: {exc!r}>"
            if state in wanted:
                return state
            if time.monotonic() > deadline:
                raise self._fail(
                    f"DAG run {dag_id}/{run_id} is {state!r}, not in {sorted(wanted)} after {timeout:.0f}s; "
                    f"task instances: {self._run_summary(dag_id, run_id)}",
                    components=("scheduler", "triggerer", "dag-processor"),
                )
            time.sleep(0.5)

    def _ti_path(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        path = f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}"
        return f"{path}/{map_index}" if map_index >= 0 else path

    def task_instance(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> dict[str, Any] | None:
        """The task instance, or None while it does not exist yet."""
        response = self.api("GET", self._ti_path(dag_id, run_id, task_id, map_index))
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._fail(
                f"GET task instance answered {response.status_code}: {response.text}", ("api-server",)
            )
        return response.json()

    def wait_for_task_state(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: Iterable[str],
        map_index: int = -1,
        timeout: float = 120.0,
    ) -> str:
        """Wait until the task instance's state is one of ``states``; return that state."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            ti = self.task_instance(dag_id, run_id, task_id, map_index)
            state = ti["state"] if ti else None
            if state in wanted:
                return state
            if time.monotonic() > deadline:
                raise self._fail(
                    f"Task {dag_id}/{run_id}/{task_id}[{map_index}] is {state!r}, not in {sorted(wanted)} "
                    f"after {timeout:.0f}s; task instances: {self._run_summary(dag_id, run_id)}",
                    components=("scheduler", "triggerer"),
                )
            time.sleep(0.5)

    def task_instance_tries(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> list[dict[str, Any]]:
        """Every try of the task instance (``.../taskInstances/{task_id}[/{map_index}]/tries``)."""
        path = f"{self._ti_path(dag_id, run_id, task_id, map_index)}/tries"
        return self.api_json("GET", path, expect=200)["task_instances"]

    def xcom(
        self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1
    ) -> Any:
        """Deserialized XCom value of a task instance."""
        path = f"dags/{_q(dag_id)}/dagRuns/{_q(run_id)}/taskInstances/{_q(task_id)}/xcomEntries/{_q(key)}"
        params = {"map_index": map_index, "deserialize": True, "stringify": False}
        return self.api_json("GET", path, params=params, expect=200)["value"]

    # ------------------------------------------------------------------ metadata DB (read-only)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        """Run a read-only SQL query on the metadata DB; rows as dicts (``?`` placeholders)."""
        if self.database == "postgres":
            import psycopg
            from psycopg.rows import dict_row

            with psycopg.connect(self.database_url.replace("+psycopg", ""), row_factory=dict_row) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())  # type: ignore[arg-type]
        with contextlib.closing(
            sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30)
        ) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql, params)]

    def state_change_log(
        self,
        dag_id: str,
        run_id: str | None = None,
        task_id: str | None = None,
        map_index: int | None = None,
        events: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of the metadata ``log`` table for ``dag_id`` (oldest first).

        Each row has ``id, dttm, dag_id, task_id, map_index, run_id, try_number, event, owner, extra``.
        The execution API writes one row per task-instance state change it handles, with ``event`` the
        new state: ``running`` (a worker started or resumed the task), ``deferred`` (the task handed
        over to a trigger), ``success``/``failed``/``up_for_retry``/``up_for_reschedule``, ...; a task
        that deferred once and resumed shows ``running, deferred, running, success``. Other rows come
        from the REST API (``trigger_dag_run``, ``patch_dag``, ...), the CLI (``cli_scheduler``, ...)
        and the scheduler (``state mismatch``, executor events); ``events`` filters by name.
        """
        clauses = ["dag_id = ?"]
        params: list[Any] = [dag_id]
        for column, value in (("run_id", run_id), ("task_id", task_id), ("map_index", map_index)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if events is not None:
            wanted = list(events)
            clauses.append(f"event IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        sql = (
            "SELECT id, dttm, dag_id, task_id, map_index, run_id, try_number, event, owner, extra "
            f"FROM log WHERE {' AND '.join(clauses)} ORDER BY id"
        )
        return self.query(sql, params)
