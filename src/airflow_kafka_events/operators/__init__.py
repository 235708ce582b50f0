"""Operators of airflow-kafka-events: streaming producers and stream consumers.

* :class:`StreamingOperatorMixin` -- a deferrable operator whose trigger streams every page
  through Kafka; the task resumes once and handles the pages in batches
  (``handle_trigger_events``) or one by one through its classic ``execute_complete``;
* :class:`StreamingTriggerOperator` -- a task that only fetches pages into Kafka
  (``start_from_trigger``; the trigger ends the task with the stream descriptor as XCom);
* :class:`StreamConsumerOperator` / :class:`StreamRef` -- handle another task's stream of
  the same DAG run by reference, in order, in batches; ``@task.stream_consumer``
  (:func:`stream_consumer_task`) is its TaskFlow flavour.

Both read a stream with :mod:`airflow_kafka_events.stream_consumption` (``StreamEvent``,
``StreamSummary``, the reading loop and its checkpoints).
"""

from __future__ import annotations

from airflow_kafka_events.operators.consumer import StreamConsumerOperator, StreamRef, consumer_group_id
from airflow_kafka_events.operators.decorators import stream_consumer_task
from airflow_kafka_events.operators.streaming import StreamingOperatorMixin, StreamingTriggerOperator
from airflow_kafka_events.stream_consumption import StreamEvent, StreamSummary

__all__ = [
    "StreamConsumerOperator",
    "StreamEvent",
    "StreamRef",
    "StreamSummary",
    "StreamingOperatorMixin",
    "StreamingTriggerOperator",
    "consumer_group_id",
    "stream_consumer_task",
]
