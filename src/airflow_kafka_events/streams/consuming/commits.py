"""A stream reader's position committed to its consumer group, the checkpoint riding in the metadata.

With ``group_id`` a :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` commits
each acknowledged position to that (dedicated) group; a reader created without a
checkpoint resumes from it.  The commit's metadata is
``{"trigger_run_id": ..., "checkpoint": ...}``; metadata of another run, or unreadable
metadata, is ignored.  This module imports no Airflow module.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from airflow_kafka_events.errors import KafkaOperationError
from airflow_kafka_events.streams.checkpoint import Checkpoint

__all__ = [
    "commit_checkpoint",
    "commit_metadata",
    "committed_checkpoint",
    "reader_config",
]

log = logging.getLogger(__name__)


def reader_config(
    consumer_config: Mapping[str, Any], trigger_run_id: str, group_id: str | None
) -> dict[str, Any]:
    """A stream reader's consumer configuration: its group, nothing committed or stored but on purpose."""
    config = dict(consumer_config)
    if group_id:
        config["group.id"] = group_id
    config.setdefault("group.id", f"airflow-kafka-events-stream-{trigger_run_id}")
    config.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
    )
    return config


def commit_metadata(trigger_run_id: str, checkpoint: Checkpoint) -> str:
    """The commit metadata that carries ``checkpoint`` of ``trigger_run_id``."""
    return json.dumps(
        {"trigger_run_id": trigger_run_id, "checkpoint": checkpoint.to_json()}, separators=(",", ":")
    )


def _stored_checkpoint(metadata: str, trigger_run_id: str) -> Checkpoint | None:
    stored = json.loads(metadata)
    if stored.get("trigger_run_id") != trigger_run_id:
        return None
    return Checkpoint.from_json(stored["checkpoint"])


def committed_checkpoint(
    consumer: Any,
    topic: str,
    partitions: list[int],
    *,
    trigger_run_id: str,
    group_id: str | None,
    timeout: float,
    where: str,
) -> tuple[int, Checkpoint] | None:
    """``(partition, checkpoint)`` the group committed for ``trigger_run_id`` among ``partitions``."""
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout)
    except KafkaException as exc:
        raise KafkaOperationError.from_exception(
            f"cannot read the committed position of group {group_id!r}", exc
        ) from exc
    for tp in committed:
        if tp.error is not None:  # not "nothing committed": starting over would hand pages out twice
            raise KafkaOperationError(
                f"cannot read the committed position of group {group_id!r} on {topic}[{tp.partition}]",
                kafka_error=tp.error,
            )
        if tp.offset < 0 or not tp.metadata:
            continue
        try:
            checkpoint = _stored_checkpoint(tp.metadata, trigger_run_id)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "%s: group %r has unreadable commit metadata on partition %d (%s); ignoring it",
                where,
                group_id,
                tp.partition,
                exc,
            )
            continue
        if checkpoint is not None:
            return tp.partition, checkpoint
    return None


def commit_checkpoint(
    consumer: Any,
    topic: str,
    checkpoint: Checkpoint,
    *,
    trigger_run_id: str,
    group_id: str | None,
    where: str,
) -> None:
    """Commit ``checkpoint`` (if it has a position), synchronously; raises :class:`KafkaOperationError`."""
    if checkpoint.partition is None or checkpoint.offset is None:
        return
    tp = TopicPartition(
        topic, checkpoint.partition, checkpoint.offset, commit_metadata(trigger_run_id, checkpoint)
    )
    try:
        consumer.commit(offsets=[tp], asynchronous=False)
    except KafkaException as exc:
        raise KafkaOperationError.from_exception(
            f"cannot commit the position of {where} to group {group_id!r}", exc
        ) from exc
