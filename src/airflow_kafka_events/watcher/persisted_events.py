"""The plugin's listener: records, with each watcher event Airflow persists, that it persisted it.

Airflow calls ``on_asset_event_emitted`` from ``AssetManager.register_asset_change``, in the
process that persists the event (for a watcher: the triggerer's supervisor, in
``Trigger.submit_event``) and before that transaction commits.  For an event a watcher of this
package fired (its payload carries the watcher's run and sequence number,
:mod:`airflow_kafka_events.watcher.confirmations`), the listener stores that sequence number
in the asset's ``asset_state_store`` in the same transaction: the thread's Airflow session
(``airflow.settings.Session``, the scoped session ``submit_event`` runs in), found holding the
event, inside a savepoint so that a failing write leaves the event's transaction intact.  Only
with Airflow's metadata-database state backend, whose writes join that transaction.

A record missing (the write failed, another backend) makes the watcher's next start fire the
event again (a repeat), never skip it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.listeners import hookimpl

from airflow_kafka_events.watcher.confirmations import mark_of, persisted_key

log = logging.getLogger(__name__)

__all__ = [
    "on_asset_event_emitted",
]


def _persisting(session: Any, run: str, seq: int) -> Any:
    """The ``AssetEvent`` of this run and sequence number in ``session``, ``None`` if another holds it."""
    from airflow.models.asset import AssetEvent

    for obj in list(session.identity_map.values()) + list(session.new):
        if isinstance(obj, AssetEvent) and mark_of(obj.extra) == (run, seq):
            return obj
    return None


def record_persisted(extra: Any) -> bool:
    """Store the run's sequence number of the watcher event ``extra`` belongs to, in the transaction
    persisting it; ``False`` when that is not possible (not a watcher's event, not found in the
    thread's session, another state backend)."""
    mark = mark_of(extra)
    if mark is None:
        return False
    from airflow import settings
    from airflow.state import AssetScope, get_state_backend
    from airflow.state.metastore import MetastoreBackend

    backend = get_state_backend()
    if not isinstance(backend, MetastoreBackend) or settings.Session is None:
        return False
    session = settings.Session()
    event = _persisting(session, *mark)
    if event is None or event.asset_id is None:
        return False
    run, seq = mark
    with session.begin_nested():
        scope = AssetScope(asset_id=event.asset_id)
        backend.set(scope, persisted_key(run), json.dumps({"seq": seq}), session=session)
    return True


@hookimpl
def on_asset_event_emitted(asset_event: Any) -> None:
    """Airflow's listener hook (see the module docstring)."""
    try:
        record_persisted(getattr(asset_event, "extra", None))
    except Exception:
        log.warning(
            "Cannot record that Airflow persisted a watcher's asset event; if its watcher stops in the "
            "next second, its next start fires the event again",
            exc_info=True,
        )
