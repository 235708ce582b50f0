"""What a watcher gives Airflow, and how DAG code reads it back (no Airflow import).

An asset watcher's event becomes ``AssetEvent.extra == {"from_trigger": True, "payload": ...}``
with the payload of :func:`envelope_payload`.  :func:`watcher_payload` reads it back from an
asset event (e.g. ``context["triggering_asset_events"][asset]``), and :func:`watcher_causation`
continues the causation chain of the current run's triggering events (pass it as
``causation=`` when emitting).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.assets.idempotency import _utc_text
from airflow_kafka_events.assets.publish import PROVENANCE_EXTRA_KEY, causation_from_extra, provenance_extra
from airflow_kafka_events.envelopes.model import AssetEventEnvelope

if TYPE_CHECKING:
    from airflow_kafka_events.kafka.consumer import SourceRecord

log = logging.getLogger(__name__)

__all__ = [
    "causation_from_watcher_extra",
    "envelope_payload",
    "watcher_causation",
    "watcher_payload",
]


def envelope_payload(envelope: AssetEventEnvelope, record: SourceRecord | None = None) -> dict[str, Any]:
    """The JSON payload a watcher gives Airflow for ``envelope`` (``AssetEvent.extra["payload"]``)."""
    payload: dict[str, Any] = {
        "event_id": envelope.event_id,
        "asset": {"name": envelope.asset.name, "uri": envelope.asset.uri},
        "partition_key": envelope.partition_key,
        "partition_date": _utc_text(envelope.partition_date),
        "extra": dict(envelope.extra),
        "idempotency_key": envelope.idempotency_key,
        "source": envelope.source.to_avro(),
        "emitted_at": _utc_text(envelope.emitted_at),
        "causation": list(envelope.causation),
        "signed": envelope.signature is not None,
    }
    if record is not None:
        payload["kafka"] = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
    payload.update(provenance_extra(envelope))
    return payload


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else its attribute ``name`` (``None`` when it has none)."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def watcher_payload(event_or_extra: Any) -> dict[str, Any] | None:
    """The payload of an asset event a watcher made, or ``None`` for any other asset event.

    Accepts an asset event (anything with ``extra``, e.g. an item of
    ``context["triggering_asset_events"][asset]``) or its ``extra`` mapping.
    """
    extra = event_or_extra if isinstance(event_or_extra, Mapping) else _field(event_or_extra, "extra")
    if not isinstance(extra, Mapping) or not extra.get("from_trigger"):
        return None
    payload = extra.get("payload")
    if not isinstance(payload, Mapping) or PROVENANCE_EXTRA_KEY not in payload:
        return None
    return dict(payload)


def causation_from_watcher_extra(extra: Any) -> tuple[str, ...]:
    """The causation chain (ancestors, then the event) of an asset event's ``extra``.

    Reads the provenance a watcher puts in ``extra["payload"]`` and, for events made another
    way (a bridge, the REST API with provenance), at the top level of ``extra``.
    """
    chain = causation_from_extra(extra)
    if chain:
        return chain
    payload = watcher_payload(extra)
    return causation_from_extra(payload) if payload is not None else ()


def watcher_causation(context: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Event ids of the chains behind the current run's triggering asset events.

    Pass it as ``causation=`` to ``emit_asset_event`` / ``emit_from_dag_callback`` /
    ``emit_from_task_callback`` so an event emitted by a run that a watcher triggered extends
    the chain, and the watchers' ``max_causation_depth`` can cut feedback loops.
    """
    if not context:
        return ()
    accessor = context.get("triggering_asset_events")
    if not isinstance(accessor, Mapping) or not accessor:
        return ()
    chain: list[str] = []
    try:
        for events in accessor.values():
            for event in events:
                for event_id in causation_from_watcher_extra(_field(event, "extra")):
                    if event_id not in chain:
                        chain.append(event_id)
    except Exception as exc:  # causation is best effort; an explicit one still applies
        log.warning("could not read the triggering asset events for causation: %s", exc)
    return tuple(chain)
