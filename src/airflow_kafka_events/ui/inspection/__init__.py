"""Reading what this package put in Kafka, for people: streams, dead letters, asset events.

Used by the operator CLI (``airflow-kafka-events streams|dlq|replay-assets``) and the Airflow UI
view.  Every function takes a plain librdkafka client config and topic names, reads a bounded
window only (:class:`ScanWindow`; the answer states the :class:`ScannedWindow` it read) -- except
:func:`list_streams`, which reads the stream index (a compacted topic of one record per stream) --
and
raises typed errors naming the topic, the brokers and the fix (:mod:`.errors`).  Previews and
headers are redacted (:func:`redact`).

This package imports no Airflow module.
"""

from __future__ import annotations

from airflow_kafka_events.ui.inspection.asset_events import (
    AssetEventListing,
    AssetEventRecord,
    list_asset_events,
    scan_asset_events,
)
from airflow_kafka_events.ui.inspection.dead_letters import (
    DeadLetterListing,
    DeadLetterRecord,
    DeadLetterSource,
    dead_letters_by_source,
    get_dead_letter,
    list_dead_letters,
)
from airflow_kafka_events.ui.inspection.errors import (
    BrokerTimeoutError,
    InspectionError,
    InvalidWindowError,
    NotADeadLetterError,
    RecordNotFoundError,
    ReplayError,
    StreamIndexNotFoundError,
    StreamNotFoundError,
    TopicNotFoundError,
)
from airflow_kafka_events.ui.inspection.redact import preview, redact
from airflow_kafka_events.ui.inspection.replay import AUDIT_LOGGER, ReplayReceipt, replay_dead_letter
from airflow_kafka_events.ui.inspection.stream_state import PageInfo, StreamOverview
from airflow_kafka_events.ui.inspection.streams import (
    StreamDetail,
    StreamListing,
    WrittenSpan,
    list_streams,
    show_stream,
    tail_stream,
)
from airflow_kafka_events.ui.inspection.window import PartitionWindow, ScannedWindow, ScanWindow

__all__ = [
    "AUDIT_LOGGER",
    "AssetEventListing",
    "AssetEventRecord",
    "BrokerTimeoutError",
    "DeadLetterListing",
    "DeadLetterRecord",
    "DeadLetterSource",
    "InspectionError",
    "InvalidWindowError",
    "NotADeadLetterError",
    "PageInfo",
    "PartitionWindow",
    "RecordNotFoundError",
    "ReplayError",
    "ReplayReceipt",
    "ScanWindow",
    "ScannedWindow",
    "StreamDetail",
    "StreamIndexNotFoundError",
    "StreamListing",
    "StreamNotFoundError",
    "StreamOverview",
    "TopicNotFoundError",
    "WrittenSpan",
    "dead_letters_by_source",
    "get_dead_letter",
    "list_asset_events",
    "list_dead_letters",
    "list_streams",
    "preview",
    "redact",
    "replay_dead_letter",
    "scan_asset_events",
    "show_stream",
    "tail_stream",
]
