"""``AssetEventNotifier``: publish an asset event from any callback slot.

Use it wherever Airflow takes a notifier — task callbacks (``on_success_callback``,
``on_failure_callback``, ``on_retry_callback`` ...), DAG callbacks, deadline alerts::

    DAG(..., on_failure_callback=AssetEventNotifier(incident, extra={"reason": "{{ reason }}"}))
    task(..., on_retry_callback=AssetEventNotifier("ops://checks", partition_key="{{ ti.task_id }}"))

``partition_key``, ``extra`` and ``idempotency_key`` are templated with the callback context.

Source kind: Airflow 3.3 does not hand a notifier its slot, but a DAG-level callback's context
always holds ``reason`` (set by both the DAG processor and ``dag.test()``), so there the kind is
``dag_callback`` with the DAG id and run id only — never the run's last task instance that such
a context may carry.  Everywhere else the kind is ``notifier``: with the task instance when the
context has one (a task-level slot), with DAG id and run id only when it has none (e.g. a
deadline alert).  ``producer`` is the notifier's class path.  The last receipt is kept on
``last_receipt``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk.bases.notifier import BaseNotifier

from airflow_kafka_events.assets.emit import (
    EmitOptions,
    emit_event,
    is_dag_callback_context,
    reject_parse_time,
    source_from_dag_context,
    source_from_task_context,
)
from airflow_kafka_events.assets.publish import Receipt
from airflow_kafka_events.envelopes.model import EventSource, SourceKind

__all__ = [
    "AssetEventNotifier",
    "notifier_source",
]


def notifier_source(context: Mapping[str, Any], producer: str) -> EventSource:
    """The source of a notifier's event, decided from what the context tells about its slot."""
    if is_dag_callback_context(context):
        return source_from_dag_context(context, kind=SourceKind.DAG_CALLBACK, producer=producer)
    if context.get("ti") is not None or context.get("task_instance") is not None:
        return source_from_task_context(context, kind=SourceKind.NOTIFIER, producer=producer)
    return source_from_dag_context(context, kind=SourceKind.NOTIFIER, producer=producer)


class AssetEventNotifier(BaseNotifier):
    """A notifier that emits one asset event per call (see the module docstring for the source).

    Parameters as :func:`~airflow_kafka_events.assets.emit.emit_asset_event`.
    """

    template_fields: Sequence[str] = ("partition_key", "extra", "idempotency_key")

    def __init__(
        self,
        asset: Any,
        partition_key: str | None = None,
        extra: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        """``options``: the other keyword arguments of :func:`emit_asset_event` (:class:`EmitKwargs`)."""
        super().__init__()
        self.asset = asset
        # the template fields live on the notifier (BaseNotifier renders them); the rest is validated now
        self.partition_key = partition_key
        self.extra = dict(extra) if extra is not None else None
        self.idempotency_key = options.pop("idempotency_key", None)
        self.options = EmitOptions(**options)
        self.last_receipt: Receipt | None = None

    def _update_context(self, context: Any) -> Any:
        # BaseNotifier copies the template fields into the callback context; here that would
        # overwrite the run's ``partition_key`` in a context other callbacks share.
        return context

    def __call__(self, *args: Any) -> None:
        # BaseNotifier renders templates into the instance for good; keep the templates so that
        # a second call (another task using the same notifier) renders its own context.
        saved = {name: getattr(self, name) for name in self.template_fields}
        try:
            super().__call__(*args)
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    @property
    def producer_name(self) -> str:
        cls = type(self)
        return f"{cls.__module__}.{cls.__qualname__}"

    def notify(self, context: Any) -> None:
        reject_parse_time()
        options = replace(
            self.options,
            partition_key=self.partition_key,
            extra=self.extra,
            idempotency_key=self.idempotency_key,
        )
        self.last_receipt = emit_event(
            self.asset, context=context, source=notifier_source(context, self.producer_name), options=options
        )
        self.log.info(
            "asset event %s published to %s[%s]@%s",
            self.last_receipt.event_id,
            self.last_receipt.topic,
            self.last_receipt.partition,
            self.last_receipt.offset,
        )

    async def async_notify(self, context: Any) -> None:
        """The triggerer path (deadline alerts): the blocking send runs in a worker thread."""
        await asyncio.to_thread(self.notify, context)
