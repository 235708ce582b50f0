"""What Airflow persisted of a watcher's events, written in the same transaction as the events.

Airflow's triggerer confirms the events a trigger fired one supervisor round late, so at a graceful
stop the records a watcher fired in its last round are *in doubt*: Airflow persisted the events
its runner sent in its last exchange with the supervisor (whose confirmation would have come with
the next exchange, which a stop never makes) and dropped the ones fired after it
(docs/watcher-restarts.md).  A trigger cannot ask Airflow which, except through the REST API.

So Airflow itself records it: every event a watcher fires carries, in its payload under
:data:`PAYLOAD_KEY`, the watcher's run and the event's sequence number in that run
(:func:`fired_mark`), and the package's listener (:mod:`airflow_kafka_events.watcher.persisted_events`,
Airflow's ``on_asset_event_emitted`` hook, called by the process that persists the event, inside its
transaction) stores the sequence number in the asset's ``asset_state_store`` under
:func:`persisted_key` of the run.  The key commits with the event or not at all.

A run's events are persisted in the order it fired them (the runner and the supervisor pass
them on first in, first out), so the stored number splits the records in doubt at a stop exactly:
those fired up to it are in Airflow, those after it are not (:func:`settle`).  This holds when
the state store is Airflow's metadata database (``[state_store] backend``, the default); with
another backend the write is not part of the event's transaction and the watcher does not rely on
it (:func:`recorded_with_events`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "METASTORE_BACKEND",
    "PAYLOAD_KEY",
    "PERSISTED_KEY",
    "fired_mark",
    "mark_of",
    "persisted_key",
    "persisted_seq",
    "recorded_with_events",
    "settle",
]

#: Key of the watcher's run and sequence number in an event's payload.
PAYLOAD_KEY = "watcher"
#: ``asset_state_store`` key prefix of the last sequence number persisted of a run (``<prefix>[<run>]``).
PERSISTED_KEY = "airflow_kafka_events.watcher.persisted"
#: Airflow's state backend that keeps the asset state store in the metadata database.
METASTORE_BACKEND = "airflow.state.metastore.MetastoreBackend"


def fired_mark(run: str, seq: int) -> dict[str, Any]:
    """The payload entry of the ``seq``-th record run ``run`` handed on."""
    return {"run": run, "seq": seq}


def mark_of(extra: Any) -> tuple[str, int] | None:
    """``(run, seq)`` of an asset event's ``extra`` when a watcher fired it, else ``None``."""
    if not isinstance(extra, Mapping) or not extra.get("from_trigger"):
        return None
    payload = extra.get("payload")
    mark = payload.get(PAYLOAD_KEY) if isinstance(payload, Mapping) else None
    if not isinstance(mark, Mapping):
        return None
    run, seq = mark.get("run"), mark.get("seq")
    if not isinstance(run, str) or not run or isinstance(seq, bool) or not isinstance(seq, int):
        return None
    return run, seq


def persisted_key(run: str) -> str:
    """The ``asset_state_store`` key of run ``run``'s last persisted sequence number."""
    return f"{PERSISTED_KEY}[{run}]"


def persisted_seq(stored: Any) -> int | None:
    """The sequence number in a stored :func:`persisted_key` value (``None``: nothing persisted)."""
    if isinstance(stored, Mapping):
        seq = stored.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            return seq
    return None


def recorded_with_events(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the listener's record commits with the events: Airflow's state backend is the
    metadata database (``[state_store] backend``, default :data:`METASTORE_BACKEND`)."""
    from airflow_kafka_events.airflow_config import airflow_option

    backend = airflow_option("state_store", "backend", METASTORE_BACKEND, environ=environ)
    return (backend or METASTORE_BACKEND).strip() == METASTORE_BACKEND


def settle(in_doubt: Sequence[Sequence[Any]], last_persisted: int | None) -> tuple[list[str], list[str]]:
    """The keys of the records in doubt (``[seq, key]`` pairs) Airflow persisted, and those it did not.

    ``last_persisted`` is the run's stored sequence number (``None``: none of its events persisted).
    """
    persisted: list[str] = []
    dropped: list[str] = []
    for seq, key in in_doubt:
        (persisted if last_persisted is not None and seq <= last_persisted else dropped).append(key)
    return persisted, dropped
