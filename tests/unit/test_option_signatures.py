"""Options written down twice stay in step with what they stand for.

A ``TypedDict`` of ``**options`` repeats the keyword parameters of the function it forwards them
to, and a table of names copied by ``getattr`` repeats the fields or parameters of its target:
a rename on one side fails here, not at run time.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.http import options as http_options
from airflow_kafka_events.http import trigger as http
from airflow_kafka_events.kafka import producer
from airflow_kafka_events.streams import progress
from airflow_kafka_events.streams.consuming.reader import ReadOptions
from airflow_kafka_events.streams.producing import trigger as streaming
from airflow_kafka_events.ui.inspection import dead_letters

pytestmark = pytest.mark.unit


def _keyword_options(function: Callable[..., Any], *, after: int = 0) -> set[str]:
    """Keyword-only parameters of ``function`` (with ``after``: its positional ones past the first)."""
    parameters = list(inspect.signature(function).parameters.values())
    keywords = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    return keywords | set(positional[after:]) if after else keywords


@pytest.mark.parametrize(
    ("options", "wrapped", "forwarding", "wrapped_only"),
    [
        (progress.StreamLookupOptions, progress.lookup_stream, [progress.find_stream_progress], set()),
        (
            dead_letters.DeadLetterReadOptions,
            dead_letters.load_dead_letter,
            [dead_letters.get_dead_letter],
            set(),
        ),
        (
            producer.SendOptions,
            producer.RecordProducer.send,
            [producer.RecordProducer.send_and_wait, producer.RecordProducer.send_async],
            {"block"},  # the waiting forms wait for room in the queue too
        ),
    ],
    ids=lambda item: getattr(item, "__qualname__", None),
)
def test_an_options_typed_dict_names_the_keyword_options_of_the_function_it_wraps(
    options, wrapped, forwarding, wrapped_only
):
    assert set(options.__annotations__) == _keyword_options(wrapped) - wrapped_only
    for function in forwarding:  # the functions that take them as **options
        (var_keyword,) = [
            p for p in inspect.signature(function).parameters.values() if p.kind is p.VAR_KEYWORD
        ]
        assert options.__name__ in str(var_keyword.annotation), function


def test_graph_pagination_options_are_the_http_triggers_but_the_fixed_paging_ones():
    own = _keyword_options(http.HttpPaginationTrigger.__init__)
    stream = _keyword_options(streaming.StreamingTrigger.__init__)
    expected = (own | stream) - set(http._GRAPH_FIXED) - {"endpoint", "http_conn_id"}
    assert set(http_options.GraphPaginationOptions.__annotations__) == expected
    assert set(http.HttpPaginationTrigger._own_kwargs) == own
    assert set(streaming._STREAM_KWARGS) == stream


def test_the_stream_reader_tuning_table_names_read_options_and_operator_attributes():
    from airflow_kafka_events.streams.producing import operator as operator_streaming

    table = operator_streaming._READER_TUNING
    assert set(table) == {field.name for field in dataclasses.fields(ReadOptions)}
    for name in table:
        assert hasattr(operator_streaming.StreamingOperatorMixin, f"stream_{name}"), name


def test_the_progress_table_names_fields_of_both_the_envelope_and_the_progress():
    table = set(progress._FROM_ENVELOPE)
    assert table <= {f.name for f in dataclasses.fields(progress.StreamProgress)}
    envelope_fields = set(inspect.signature(TriggerEventEnvelope).parameters)
    assert table <= envelope_fields
