"""The six assets ``e2e://multi/0..5`` of the watcher fault tests (``tests/e2e/faults``, their DAG
``watcher_dags/e2e_watchers_multi.py``): publishing their events and counting what Airflow made of them,
and, when a test fails, where each missing or repeated event stopped (:func:`account`)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from airflow_kafka_events.assets.publish import build_envelope
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.watcher.confirmations import mark_of
from harness.airflow_runs import json_column
from harness.airflow_stack import AirflowStack

ASSETS = [AssetRef(name=f"e2e://multi/{i}", uri=f"e2e://multi/{i}") for i in range(6)]


#: The DAG of the six watched assets (all six schedule one no-op DAG).
DAG_FILE = Path(__file__).parents[1] / "e2e" / "faults" / "watcher_dags" / "e2e_watchers_multi.py"


class WatchersStack(NamedTuple):
    """A stack running :data:`DAG_FILE` on two triggerers, and the topics its watchers read and write."""

    stack: AirflowStack
    topic: str
    dlq: str | None


@contextlib.contextmanager
def watchers_stack(
    tmp_path_factory: Any,
    kafka_admin: Any,
    bootstrap: str,
    *,
    name: str,
    topology: str,
    dead_letters: bool = False,
    recheck: bool = False,
    env: Mapping[str, str] | None = None,
) -> Iterator[WatchersStack]:
    """The six watchers on two triggerers, each allowed 3 of them (``[triggerer] capacity``), so Airflow
    puts 3 on each: a topic of 3 partitions, a stops topic (and with ``dead_letters`` a dead-letter
    topic) of their own named after ``name``, one connection with one ``group.id`` for all the
    watchers; ``recheck`` lets them ask the api-server what exists after an unclean stop; ``env`` is
    added to every component's environment."""
    run = uuid.uuid4().hex[:8]
    topic = f"e2e.watchers.{name}.{run}"
    stops = f"e2e.watchers.{name}-stops.{run}"
    dlq = f"e2e.watchers.{name}-dlq.{run}" if dead_letters else None
    specs = [TopicSpec(topic, partitions=3), TopicSpec(stops, cleanup_policy="compact")]
    ensure_topics(kafka_admin, specs + ([TopicSpec(dlq, partitions=1)] if dlq else []))
    dags = tmp_path_factory.mktemp(f"{name}-dags")
    shutil.copy2(DAG_FILE, dags / DAG_FILE.name)
    extra_env = stack_env(bootstrap, topic=topic, stops=stops, group_id=f"e2e-{name}-{run}", dlq=dlq)
    extra_env.update(env or {})
    stack = AirflowStack(
        home=tmp_path_factory.mktemp(f"{name}-home"), dags_folder=dags, extra_env=extra_env, topology=topology
    )
    if recheck:
        stack.enable_watcher_recheck()
    if "triggerer-2" not in stack.components:  # the embedded topology has one triggerer
        stack.add_triggerer("triggerer-2")
    for triggerer in ("triggerer", "triggerer-2"):
        stack.components[triggerer].env["AIRFLOW__TRIGGERER__CAPACITY"] = "3"
    try:
        stack.start(timeout=400.0, dag_ids=["e2e_watchers_multi"])
        if not stack.components["triggerer-2"].running:
            stack.restart_component("triggerer-2")
        yield WatchersStack(stack, topic, dlq)
    finally:
        stack.stop()


def stack_env(
    bootstrap: str, *, topic: str, stops: str, group_id: str, dlq: str | None = None
) -> dict[str, str]:
    """The environment of a stack running the DAG: its topic (and dead-letter topic), the watchers'
    stops topic, and the ``kafka_default`` and ``kafka_watcher`` connections (one consumer group for
    every watcher, auto-commit off)."""
    env = {
        "AIRFLOW_KAFKA_EVENTS_E2E_MULTI_TOPIC": topic,
        "AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC": stops,
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
        ),
        "AIRFLOW_CONN_KAFKA_WATCHER": json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": bootstrap,
                    "group.id": group_id,
                    "enable.auto.commit": "false",
                },
            }
        ),
    }
    if dlq is not None:
        env["AIRFLOW_KAFKA_EVENTS_E2E_MULTI_DLQ"] = dlq
    return env


class Published(NamedTuple):
    """One published event: its asset's URI, event id, where it is in the topic, when it was acknowledged."""

    asset: str
    event_id: str
    partition: int
    offset: int
    at: float  # wall clock (time.time())


def publish_records(bootstrap: str, topic: str, per_asset: int, *, pause: float = 0.0) -> list[Published]:
    """``per_asset`` events of each asset, spread over the topic's 3 partitions (``pause`` seconds after
    each round of six); each as :class:`Published`."""
    producer = get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    sent: list[Published] = []
    for n in range(per_asset):
        for asset in ASSETS:
            envelope = build_envelope(
                asset=asset,
                source=EventSource(SourceKind.EXTERNAL, producer="e2e"),
                extra={"n": n, "u": uuid.uuid4().hex},
            )
            value = ASSET_EVENT_CODEC.encode(envelope, topic=topic)
            receipt = producer.send_and_wait(topic, value, key=asset.uri, partition=(n + len(sent)) % 3)
            sent.append(
                Published(asset.uri, envelope.event_id, receipt.partition, receipt.offset, time.time())
            )
        if pause:
            time.sleep(pause)
    return sent


def publish(bootstrap: str, topic: str, per_asset: int, *, pause: float = 0.0) -> list[str]:
    """``per_asset`` events of each asset, spread over the topic's 3 partitions; their event ids."""
    return [p.event_id for p in publish_records(bootstrap, topic, per_asset, pause=pause)]


def _asset_event_extras(stack: AirflowStack) -> list[Any]:
    """The ``extra`` of every asset event Airflow holds of the six assets."""
    rows = stack.query(
        "SELECT ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id WHERE a.uri LIKE ?",
        ("e2e://multi/%",),
    )
    return [json_column(row["extra"]) for row in rows]


def event_ids(stack: AirflowStack) -> Counter[str]:
    """How many Airflow asset events each published event id became."""
    extras = _asset_event_extras(stack)
    return Counter(((extra or {}).get("payload") or {}).get("event_id") for extra in extras)


def persisted_marks(stack: AirflowStack) -> set[tuple[str, int]]:
    """The watcher run and sequence number of every asset event Airflow holds of the six assets."""
    return {mark for extra in _asset_event_extras(stack) if (mark := mark_of(extra)) is not None}


def placement(stack: AirflowStack) -> Counter[int | None]:
    """How many of the stack's triggers each triggerer (its job id) holds; ``None``: not assigned."""
    return Counter(row["triggerer_id"] for row in stack.query("SELECT triggerer_id FROM trigger"))


def spread(stack: AirflowStack) -> list[int]:
    """How many triggers each triggerer holding any holds, fewest first."""
    return sorted(count for triggerer, count in placement(stack).items() if triggerer is not None)


#: A triggerer's log line of a fired event: Airflow's "Trigger fired event" with the watcher's payload.
_FIRED = re.compile(r"Trigger fired event.*?'event_id': '([^']+)'")
_FIRED_MARK = re.compile(r"'watcher': \{'run': '([0-9a-f]+)', 'seq': (\d+)\}")
_START = re.compile(r"===== harness: starting (\S+) \(start #(\d+)\)")
_PERSISTED_KEY = "airflow_kafka_events.watcher.persisted"


def _line_time(line: str) -> float | None:
    try:
        return datetime.fromisoformat(line.split(" ", 1)[0].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return None


class Fired(NamedTuple):
    """One "Trigger fired event" line: the triggerer, its start number, when, the watcher's run and number."""

    triggerer: str
    start: int
    at: float | None
    run: str | None
    seq: int | None


def fired_events(stack: AirflowStack, triggerers: Iterable[str]) -> dict[str, list[Fired]]:
    """Every fired event in the logs of ``triggerers`` (all their starts), by event id."""
    fired: dict[str, list[Fired]] = defaultdict(list)
    for name in triggerers:
        start = 0
        for line in stack.logs(name).splitlines():
            started = _START.search(line)
            if started:
                start = int(started.group(2))
                continue
            match = _FIRED.search(line)
            if match is None:
                continue
            mark = _FIRED_MARK.search(line)
            fired[match.group(1)].append(
                Fired(
                    name,
                    start,
                    _line_time(line),
                    mark.group(1) if mark else None,
                    int(mark.group(2)) if mark else None,
                )
            )
    return fired


def _timestamp(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def account(stack: AirflowStack, published: Sequence[Published], triggerers: Iterable[str]) -> dict[str, Any]:
    """Per asset, what became of the ``published`` events: how many were emitted, fired by a watcher
    (the triggerers' logs) and persisted as asset events (the metadata DB); the missing ones split into
    *not fired* and *fired, no asset event*, each with its place in the topic and its firings; the
    repeated ones; and how long persisting took (an event's asset event time minus its first firing).
    Also the watchers' persisted-number records (``asset_state_store``) and the persisting rate."""
    fired = fired_events(stack, triggerers)
    rows = stack.query(
        "SELECT ae.id, ae.timestamp, ae.extra, a.uri FROM asset_event ae JOIN asset a ON a.id = ae.asset_id "
        "WHERE a.uri LIKE ? ORDER BY ae.id",
        ("e2e://multi/%",),
    )
    persisted: dict[str, list[float | None]] = defaultdict(list)
    for row in rows:
        payload = (json_column(row["extra"]) or {}).get("payload") or {}
        persisted[payload.get("event_id")].append(_timestamp(row["timestamp"]))
    records = stack.query(
        "SELECT a.uri, s.key, s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.uri LIKE ? AND s.key LIKE ?",
        ("e2e://multi/%", f"{_PERSISTED_KEY}%"),
    )
    by_asset: dict[str, list[Published]] = defaultdict(list)
    for event in published:
        by_asset[event.asset].append(event)
    report: dict[str, Any] = {"assets": {}}
    lags: list[float] = []
    for asset in sorted(by_asset):
        events = by_asset[asset]
        missing = [e for e in events if not persisted.get(e.event_id)]
        asset_lags = [
            persisted[e.event_id][0] - min(f.at for f in fired[e.event_id] if f.at is not None)  # type: ignore[operator]
            for e in events
            if persisted.get(e.event_id)
            and persisted[e.event_id][0] is not None
            and any(f.at is not None for f in fired.get(e.event_id, []))
        ]
        lags += asset_lags
        report["assets"][asset] = {
            "emitted": len(events),
            "fired": sum(1 for e in events if fired.get(e.event_id)),
            "fired_lines": sum(len(fired.get(e.event_id, [])) for e in events),
            "asset_events": sum(len(persisted.get(e.event_id, [])) for e in events),
            "not_fired": [_where(e, []) for e in missing if not fired.get(e.event_id)],
            "fired_not_persisted": [_where(e, fired[e.event_id]) for e in missing if fired.get(e.event_id)],
            "repeated": [
                {**_where(e, fired.get(e.event_id, [])), "asset_events": len(persisted[e.event_id])}
                for e in events
                if len(persisted.get(e.event_id, [])) > 1
            ],
            "persist_lag_s": {"p50": _percentile(asset_lags, 0.5), "max": _percentile(asset_lags, 1.0)},
            "persisted_records": {
                row["key"]: json_column(row["value"]) for row in records if row["uri"] == asset
            },
        }
    stamps = sorted(t for ts in persisted.values() for t in ts if t is not None)
    mine = {e.event_id for e in published}
    mine_stamps = sorted(t for i in mine for t in persisted.get(i, []) if t is not None)
    report["persist_lag_s"] = {
        "p50": _percentile(lags, 0.5),
        "p90": _percentile(lags, 0.9),
        "max": _percentile(lags, 1.0),
    }
    report["asset_events_total"] = len(stamps)
    if len(mine_stamps) > 1 and published:
        span = mine_stamps[-1] - mine_stamps[0]
        sent_span = max(e.at for e in published) - min(e.at for e in published)
        report["rates"] = {
            "emitted_per_s": round(len(published) / sent_span, 1) if sent_span > 0 else None,
            "asset_events_per_s": round(len(mine_stamps) / span, 1) if span > 0 else None,
            "first_emit_to_last_asset_event_s": round(mine_stamps[-1] - min(e.at for e in published), 1),
        }
    return report


def _where(event: Published, firings: Sequence[Fired]) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "at": f"{event.partition}@{event.offset}",
        "emitted": datetime.fromtimestamp(event.at).isoformat(timespec="milliseconds"),
        "fired": [
            f"{f.triggerer}#{f.start} "
            f"{datetime.fromtimestamp(f.at).isoformat(timespec='milliseconds') if f.at else '?'} "
            f"run={f.run} seq={f.seq}"
            for f in firings
        ],
    }


def summary(report: dict[str, Any]) -> str:
    """One line per asset of :func:`account`'s report, then the missing and repeated events."""
    lines = [
        f"{asset}: emitted {a['emitted']}, fired {a['fired']} ({a['fired_lines']} firings), "
        f"asset events {a['asset_events']}; not fired {len(a['not_fired'])}, fired but no asset event "
        f"{len(a['fired_not_persisted'])}, repeated {len(a['repeated'])}; persist lag {a['persist_lag_s']}; "
        f"persisted records {a['persisted_records']}"
        for asset, a in report["assets"].items()
    ]
    lines.append(f"persist lag (s) {report['persist_lag_s']}; rates {report.get('rates')}")
    for asset, a in report["assets"].items():
        for kind in ("not_fired", "fired_not_persisted", "repeated"):
            lines += [f"  {asset} {kind}: {json.dumps(e)}" for e in a[kind][:20]]
    return "\n".join(lines)


def keep_evidence(stack: AirflowStack, report: dict[str, Any], name: str) -> Path:
    """Write ``report`` (JSON) and a dump of the metadata database into the stack's home, which
    outlives the stack (the database does not); the report's path."""
    path = stack.home / f"{name}.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    stack.dump_database(stack.home / f"{name}-metadata.sql")
    return path
