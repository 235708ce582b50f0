"""Where a watcher's stream resumes: its stored state, its clean-stop mark in Kafka, which of the
records in doubt at a clean stop Airflow persisted, and (after an unclean stop) which of its
asset's events Airflow already has."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.positions import Partition, positions_from_json
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher.confirmations import (
    persisted_key,
    persisted_seq,
    recorded_with_events,
    settle,
)
from airflow_kafka_events.watcher.keys import DurableKeys
from airflow_kafka_events.watcher.recheck import fired_keys, recheck_conn_id
from airflow_kafka_events.watcher.stops import (
    MARK_READS,
    MarkReads,
    WatcherResumption,
    decode_mark,
    resumption,
)

log = logging.getLogger(__name__)

__all__ = ["PositionStore", "Resumed", "StopMarks", "forget_run", "recheck_airflow", "resume"]


class PositionStore(Protocol):
    async def aget(self, key: str, default: Any = None) -> Any: ...

    async def aset(self, key: str, value: Any) -> None: ...

    async def adelete(self, key: str) -> None: ...


@dataclass(frozen=True)
class StopMarks:
    """Where a watcher's clean-stop mark is written and read: made when it opens (the connection is
    read through the supervisor, and the producer connects ahead of the stop)."""

    settings: KafkaSettings
    producer: RecordProducer
    topic: str
    key: bytes
    #: reads the marks of the watchers starting together (the process's, :data:`MARK_READS`)
    reads: MarkReads = MARK_READS


@dataclass(frozen=True)
class Resumed:
    """What a watcher's stream resumes from (no positions: nothing was stored)."""

    positions: dict[Partition, int]
    keys: DurableKeys
    resumption: WatcherResumption
    #: the run whose state it resumed from
    previous_run: str | None


async def resume(
    label: str, store: PositionStore, state_key: str, stops: StopMarks | None, dedupe_ttl: float | None
) -> Resumed:
    """The stored state under ``state_key``, read with the watcher's clean-stop mark."""
    stored = await store.aget(state_key, None)
    if stored is None:
        return Resumed({}, DurableKeys(None, ttl=dedupe_ttl), resumption(None, None), None)
    if not isinstance(stored, Mapping):
        raise ValidationError(f"{label}: stored state {state_key!r} is not a mapping")
    found = resumption(stored, await _read_mark(label, stops))
    previous_run = stored.get("run") if isinstance(stored.get("run"), str) else None
    state = found.state or {}
    keys = DurableKeys(state.get("seen"), ttl=dedupe_ttl)
    if found.from_mark:
        where = stops.topic if stops is not None else "Kafka"
        settled = await _settle_in_doubt(label, store, found, keys, where)
        if settled is None:
            log.info(
                "%s resumes after a clean stop (its mark in %s): %d record(s) it fired then awaited "
                "Airflow's confirmation and are read again",
                label,
                where,
                found.in_doubt,
            )
        else:
            found = settled
    return Resumed(positions_from_json(state.get("positions")), keys, found, previous_run)


async def _settle_in_doubt(
    label: str, store: PositionStore, found: WatcherResumption, keys: DurableKeys, where: str
) -> WatcherResumption | None:
    """Which records in doubt at the clean stop Airflow persisted, from the listener's record
    (:mod:`~airflow_kafka_events.watcher.confirmations`): those join ``keys`` (dropped as repeats
    when read again), the others fire; nothing is left to recheck.  ``None`` when the mark does
    not list them or the record does not commit with the events (another state backend)."""
    run = found.state.get("run") if found.state is not None else None
    if found.in_doubt_fired is None or not isinstance(run, str) or not recorded_with_events():
        return None
    last = None
    if found.in_doubt_fired:
        last = persisted_seq(await store.aget(persisted_key(run), None))
    persisted, dropped = settle(found.in_doubt_fired, last)
    for key in persisted:
        keys.add(key)
    log.info(
        "%s resumes after a clean stop (its mark in %s): of the %d record(s) it fired that awaited "
        "Airflow's confirmation, Airflow persisted %d (not fired again) and dropped %d (fired again)",
        label,
        where,
        found.in_doubt,
        len(persisted),
        len(dropped),
    )
    return replace(found, in_doubt=0)


async def forget_run(label: str, store: PositionStore, run: str | None, current: str) -> None:
    """Delete the listener's record of run ``run`` (the ``current`` run's state is stored now)."""
    if run is None or run == current:
        return
    try:
        await store.adelete(persisted_key(run))
    except Exception as exc:
        log.debug("%s cannot delete %s: %s", label, persisted_key(run), exc)


async def _read_mark(label: str, stops: StopMarks | None) -> dict[str, Any] | None:
    """The watcher's clean-stop mark in Kafka, ``None`` when it has none or it cannot be read."""
    if stops is None:
        return None
    try:
        raw = await stops.reads.read(stops.settings, stops.topic, stops.key)
        return decode_mark(raw) if raw is not None else None
    except Exception as exc:
        log.warning(
            "%s cannot read its clean-stop mark from %s: %s; it starts as after a crash",
            label,
            stops.topic,
            exc,
        )
        return None


async def recheck_airflow(
    label: str,
    found: WatcherResumption,
    keys: DurableKeys,
    *,
    name: str | None,
    uri: str | None,
    topics: Collection[str],
) -> None:
    """After an unclean stop, the keys of the asset's recent watcher events in Airflow join ``keys``,
    the repeats the watcher drops (:mod:`~airflow_kafka_events.watcher.recheck`)."""
    conn_id = recheck_conn_id()
    if conn_id is None:
        if not found.clean:
            log.info(
                "%s resumes after an unclean stop: records its previous run fired after its last store "
                "may fire again ([kafka_events] watcher_airflow_api_conn_id is not set)",
                label,
            )
        return
    try:
        fired = await fired_keys(conn_id, name=name, uri=uri, topics=topics)
    except Exception as exc:
        log.warning(
            "%s resumes after an unclean stop but cannot ask Airflow which of its events exist "
            "(connection %r, [kafka_events] watcher_airflow_api_conn_id): %s; events its previous "
            "run fired after its last store may fire again",
            label,
            conn_id,
            exc,
        )
        return
    keys.add_all(fired)
    log.info(
        "%s resumes after an unclean stop: %d recent events of its asset in Airflow are not fired again",
        label,
        len(fired),
    )
