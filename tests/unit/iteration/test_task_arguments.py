"""``@task.iterable`` accepts every argument plain ``@task`` accepts, with ``@task``'s meaning.

The AIP-104 proposal's example passes ``show_return_value_in_logs=False``; the arguments of
``@task`` are those of ``PythonOperator`` (plus ``multiple_outputs``) and ``BaseOperator``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pendulum
import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, BaseOperator, task

from airflow_kafka_events.errors import ConfigurationError
from unit.operators.fakes import context

pytestmark = pytest.mark.unit

START = pendulum.datetime(2025, 1, 1, tz="UTC")


def task_arguments() -> dict[str, Any]:
    """A value for each keyword argument of ``@task`` that iteration does not set itself."""
    names = set(inspect.signature(PythonOperator.__init__).parameters) - {
        "self",
        "kwargs",
        "python_callable",
        "op_args",
        "op_kwargs",
    }
    values: dict[str, Any] = {
        "templates_dict": {"when": "{{ ds }}"},
        "templates_exts": [".sql"],
        "show_return_value_in_logs": False,
    }
    assert names <= set(values), f"@task gained arguments: {names - set(values)}"
    return {name: values[name] for name in names}


def test_every_argument_of_task_is_accepted_and_means_the_same():
    arguments = task_arguments()
    with DAG(dag_id="args", schedule=None, start_date=START, catchup=False):

        @task.iterable(multiple_outputs=False, retries=2, pool="default_pool", **arguments)
        def work(n: int, templates_dict: dict[str, Any]) -> int:
            return n + len(templates_dict)

        out = work.iterate(n=[1, 2, 3])
    op = out.operator
    assert isinstance(op, BaseOperator) and op.retries == 2
    assert op.show_return_value_in_logs is False
    assert op.templates_dict == {"when": "{{ ds }}"} and "templates_dict" in op.template_fields
    assert tuple(op.template_ext) == (".sql",)


@pytest.mark.parametrize("shown", [True, False])
def test_show_return_value_in_logs_decides_whether_the_summary_is_logged(shown, capsys):
    with DAG(dag_id=f"shown-{shown}", schedule=None, start_date=START, catchup=False):

        @task.iterable(show_return_value_in_logs=shown, results_stream=False, templates_dict={"a": 1})
        def work(n: int, templates_dict: dict[str, Any]) -> int:
            return n * templates_dict["a"]

        op = work.iterate(n=[1, 2, 3]).operator
    summary = op.execute(context(task_id=op.task_id))
    assert summary["succeeded"] == 3  # the callable got templates_dict from the context
    text = capsys.readouterr().out  # the task logger writes there outside the task runner
    if shown:
        assert "Done. Returned value was:" in text and "'succeeded': 3" in text
    else:
        assert "Done. Returned value not shown" in text and "'succeeded': 3" not in text


def test_task_concurrency_is_refused_with_its_airflow_3_replacements():
    with DAG(dag_id="old-name", schedule=None, start_date=START, catchup=False):

        @task.iterable(task_concurrency=2)
        def work(n: int) -> int:
            return n

        with pytest.raises(ConfigurationError, match=r"max_active_tis_per_dag=N .* or concurrency=N"):
            work.iterate(n=[1, 2])
