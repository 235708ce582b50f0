"""check_trigger_kwargs: values that cannot reach a triggerer are refused, naming the argument."""

from __future__ import annotations

import datetime
import functools
import textwrap
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.triggers.base import StartTriggerArgs

from airflow_kafka_events.errors import TriggerSerializationError, ValidationError
from airflow_kafka_events.provider.serialization import check_trigger_kwargs, roundtrip_trigger_kwargs
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin, StreamingTriggerOperator

pytestmark = pytest.mark.unit

OWNER = "MyOperator(task_id='fetch')"


def _error(kwargs: dict[str, Any]) -> TriggerSerializationError:
    with pytest.raises(TriggerSerializationError) as info:
        check_trigger_kwargs(kwargs, owner=OWNER)
    return info.value


def test_a_lambda_is_refused_naming_the_argument():
    error = _error({"pages": 3, "transform": lambda page: page})
    assert error.argument == "transform" and error.owner == OWNER
    message = str(error)
    assert message.startswith(OWNER) and "'transform'" in message and "a lambda" in message
    assert isinstance(error, ValidationError) and isinstance(error, ValueError)


def test_a_nested_lambda_in_a_dict_is_refused_with_its_path():
    error = _error({"options": {"retries": 3, "hooks": [1, {"on_page": lambda p: p}]}})
    assert error.argument == "options['hooks'][1]['on_page']"
    assert "options['hooks'][1]['on_page']" in str(error)


def test_a_local_function_is_refused():
    def local_filter(page: Any) -> bool:
        return True

    error = _error({"page_filter": local_filter})
    assert error.argument == "page_filter"
    assert "local function" in str(error) and "local_filter" in str(error)


def test_a_module_function_and_a_partial_are_refused_too():
    assert _error({"f": textwrap.dedent}).argument == "f"
    assert _error({"f": functools.partial(textwrap.dedent, "x")}).argument == "f"


def test_an_open_file_is_refused(tmp_path: Path):
    with open(tmp_path / "x.txt", "w") as handle:
        error = _error({"sink": handle})
    assert error.argument == "sink" and "open file" in str(error)


def test_plain_json_and_airflow_serde_values_pass():
    kwargs = {
        "url": "https://example.test/items",
        "pages": 3,
        "ratio": 0.5,
        "flag": True,
        "none": None,
        "headers": {"Accept": "application/json"},
        "ids": [1, 2, 3],
        "pair": (1, 2),
        "when": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
        "every": datetime.timedelta(seconds=5),
    }
    check_trigger_kwargs(kwargs, owner=OWNER)
    assert roundtrip_trigger_kwargs(kwargs) == kwargs
    check_trigger_kwargs(None, owner=OWNER)
    check_trigger_kwargs({}, owner=OWNER)


def test_non_dict_kwargs_and_non_str_names_are_refused():
    with pytest.raises(TriggerSerializationError, match="must be a dict"):
        check_trigger_kwargs([1, 2], owner=OWNER)  # type: ignore[arg-type]
    with pytest.raises(TriggerSerializationError, match="names must be str"):
        check_trigger_kwargs({1: "x"}, owner=OWNER)  # type: ignore[dict-item]


def test_the_error_survives_pickling():
    import pickle

    error = _error({"transform": lambda p: p})
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.argument, copy.owner, str(copy)) == (error.argument, error.owner, str(error))


# --------------------------------------------------------------------------- operators, parse time
class StartsInTriggerer(StreamingOperatorMixin, BaseOperator):
    def __init__(self, *, trigger_kwargs: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_from_trigger = True
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
            trigger_kwargs=trigger_kwargs,
            next_method="resume_stream",
        )


class WithTriggerFields(StreamingOperatorMixin, BaseOperator):
    trigger_kwargs_fields = ("page_filter",)

    def __init__(self, *, page_filter: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.page_filter = page_filter


def test_start_trigger_args_with_a_lambda_fail_when_the_operator_is_created():
    with pytest.raises(TriggerSerializationError) as info:
        StartsInTriggerer(task_id="fetch", trigger_kwargs={"pages": 3, "extra": {"f": lambda: 1}})
    assert info.value.argument == "extra['f']"
    assert "StartsInTriggerer(task_id='fetch')" in str(info.value)
    StartsInTriggerer(task_id="fine", trigger_kwargs={"pages": 3, "extra": {"f": "mod.func"}})


def test_trigger_kwargs_fields_are_checked_when_the_operator_is_created():
    with pytest.raises(TriggerSerializationError, match="'page_filter'"):
        WithTriggerFields(task_id="x", page_filter=lambda p: True)
    WithTriggerFields(task_id="y", page_filter="mypkg.filters.keep_all")


def test_streaming_trigger_operator_checks_its_trigger_kwargs_even_without_start_from_trigger():
    with pytest.raises(TriggerSerializationError, match="'on_page'"):
        StreamingTriggerOperator(
            task_id="fetch",
            trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
            trigger_kwargs={"pages": 1, "on_page": print},
            start_from_trigger=False,
        )


def test_a_dag_file_with_a_lambda_in_trigger_kwargs_fails_to_parse(tmp_path: Path):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "bad_stream_dag.py").write_text(
        textwrap.dedent(
            '''
            """A DAG (airflow) whose streaming task has a lambda in its trigger kwargs."""
            import pendulum
            from airflow.sdk import DAG
            from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

            with DAG("bad_stream_dag", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
                StreamingTriggerOperator(
                    task_id="fetch",
                    trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
                    trigger_kwargs={"pages": 3, "extra": {"page_filter": lambda page: True}},
                )
            '''
        )
    )
    (tmp_path / "good_stream_dag.py").write_text(
        textwrap.dedent(
            '''
            """A DAG (airflow) with a serializable streaming task."""
            import pendulum
            from airflow.sdk import DAG
            from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

            with DAG("good_stream_dag", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
                StreamingTriggerOperator(
                    task_id="fetch",
                    trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
                    trigger_kwargs={"pages": 3},
                )
            '''
        )
    )
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.dag_ids == ["good_stream_dag"]
    ((path, error),) = bag.import_errors.items()
    assert path.endswith("bad_stream_dag.py")
    assert "TriggerSerializationError" in error
    assert "extra['page_filter']" in error and "a lambda" in error
