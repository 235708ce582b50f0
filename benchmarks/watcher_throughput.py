"""B8: asset events per second into Airflow, Airflow's own ceiling vs Kafka watchers on 1 to 1,000 assets.

One broker and one Airflow deployment (api-server, scheduler, dag-processor, ONE triggerer or
``--triggerers`` of them; a PostgreSQL metadata DB of its own, or SQLite with ``--database sqlite``;
``tests/harness/airflow_stack.py``; Airflow's own health-check thresholds) with
``benchmarks/dags`` as the DAGs folder.  One DAG, ``b8_consumer``
(``benchmarks/dags/b8_watcher_throughput.py``), is scheduled on all B8 assets and one that never
gets an event (ALL of them must be updated, so no DAG run is made); the
benchmark moves through phases by writing the phase into a control file the DAG file reads at
parse time, so only the phase's watchers run (Airflow adds and removes them on the next parse;
the benchmark waits until the trigger table holds exactly them and every one of them has started).
The Airflow components import ``airflow_kafka_events`` from a copy of the committed ``src/`` (``git
archive HEAD``, first on their ``PYTHONPATH``), so edits to the working tree during a run cannot
change the watchers' code half-way (``--live-src``: the working tree as it is):

``ceiling``
    ``bench://b8/ceiling`` watched by :class:`b8_triggers.BurstTrigger` (no Kafka at all): on
    request it fires ``count`` events as fast as it can (or at ``rate``/s), in the same triggerer
    and the same metadata DB.  This is what Airflow itself can take.
``ceiling-<n>`` (e.g. ``ceiling-100``, ``ceiling-1000``)
    Airflow's ceiling in the shape of ``kafka-<n>``: the same ``n`` assets, each watched by its own
    ``BurstTrigger``, the batch shared round-robin between them (``n`` triggers, ``n`` assets, still
    no Kafka), every trigger starting its share at the same moment: what Airflow itself can take for
    ``n`` watched assets.
``ceiling-<n>+pad``
    ``ceiling-<n>`` whose events are padded to the size of the payload a Kafka watcher fires for the
    benchmark's events (a ceiling event is ``{"b8", "seq", "emitted_at"}``, about 80 B; a watcher's
    about 1 KB), logged without the padding: what Airflow itself takes for events as large as the
    watchers'.  ``kafka-<n>`` gets a ratio to it too ("vs +pad").
``kafka-<n>`` (``n`` from 1 to 2,000)
    ``n`` assets, each a ``kafka_watched_asset`` on ONE topic of that configuration (3
    partitions), in the triggerer(s); this process emits asset event envelopes to the topic
    (pipelined sends with the repo's ``RecordProducer``), spread round-robin over the assets.

Airflow places the triggers (``[triggerer] capacity``, Airflow's default 1,000 a triggerer, or
``--capacity``); the benchmark reports how many each triggerer got.

Each phase: a warm-up batch (not counted; for Kafka one event per asset), then a **burst** of
``--events`` events (all emitted at once), then one **paced** batch per rate of ``--rates``
(``--paced-seconds`` long).  Per batch, from the ``asset_event`` rows (read-only queries, found by
the batch tag in ``extra``):

* throughput = events / (last row's ``timestamp`` - first event's ``emitted_at``), and the steady
  rate between the 10th and the 90th percentile row;
* latency = row ``timestamp`` - ``emitted_at`` (the trigger's event time for the ceiling, the
  envelope's ``emitted_at`` for Kafka; one machine clock), p50 / p95 / max;
* the latency split at the triggerer's ``Trigger fired event`` log line (when its runner yielded
  the event): emit -> fired (for Kafka: produce, read, decode, filter) and fired -> row (Airflow:
  the runner's state sync to its supervisor, then one ``Trigger.submit_event`` per event);
* CPU seconds of the triggerer(s) (supervisor + runner process), scheduler, dag-processor,
  api-server, broker, this process, and all of them, while the batch ran;
* Kafka: how many times the watchers stored their position in ``asset_state_store`` meanwhile
  (sampled every 0.25 s from the table: a lower bound).  Each store is a request the triggerer's
  supervisor answers between its passes over queued events, and a DB write of its own.

Per phase, of the triggerer(s) (supervisor and runner processes): resident memory, threads, Kafka
clients (librdkafka ``rdk:main`` threads) and librdkafka threads after the phase's batches, against
the same with no watcher at all (sampled before the first phase); per watcher: memory above that
baseline, and CPU ms per second with no events (the quiet ``--gap`` before the burst) and while paced.

Ratios: every configuration's burst throughput / the (one-asset) ceiling's, and each ``kafka-<n>``'s
/ ``ceiling-<n>``'s when that phase ran ("vs ceiling-N": the cost of the Kafka path alone).
The path before the watcher redesign (one consumer group, polls on a shared thread) is no longer
in the code, so it is not measured side by side: compare with the ceiling.  Uses
``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from airflow_kafka_events.assets.publish import build_envelope, record_key
from airflow_kafka_events.assets.watcher_payload import envelope_payload
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
from airflow_kafka_events.kafka.producer import RecordProducer, close_all_producers
from benchmarks.cpu_accounting import (
    _tree_cpu,
    machine_busy,
    tree_resources,
    triggerer_threads,
    wait_for_quiet,
)
from benchmarks.harness import (
    AIRFLOW_DEFAULT_HEALTH,
    DAGS_FOLDER,
    REPO,
    airflow_stack_class,
    create_topics,
    json_text,
    kafka_broker,
    loadavg,
    machine_at_start,
    parse_db_time,
    percentile,
    running_stack,
    say,
    scratch_dir,
    write_results,
)
from benchmarks.watcher_report import PADDED, print_report, print_resources, summarize

DAG_ID = "b8_consumer"
MAX_ASSETS = 2000
CEILING = ("b8_ceiling", "bench://b8/ceiling")
STATE_KEY_PATTERN = "airflow_kafka_events.watcher[%"
PARTITIONS = 3
CPU_COMPONENTS = ("scheduler", "dag-processor", "api-server")


def kafka_assets(count: int) -> list[tuple[str, str]]:
    return [(f"b8_k{count}_a{i:03d}", f"bench://b8/k{count}/a{i:03d}") for i in range(count)]


# ====================================================================== CPU accounting
def cpu_snapshot(setup: Setup) -> dict[str, float]:
    out = {"triggerer": sum(_tree_cpu(setup.stack.pid(name)) for name in setup.triggerers)}
    out.update({name: _tree_cpu(setup.stack.pid(name)) for name in CPU_COMPONENTS})
    out["broker"] = _tree_cpu(setup.broker_pid)
    own = os.times()
    out["benchmark process"] = own.user + own.system  # emitting, DB polling (not its children)
    out["total"] = _tree_cpu(os.getpid())  # this process and everything it started
    out["machine"] = machine_busy()
    for name in setup.triggerers:
        for kind, seconds in triggerer_threads(setup.stack.pid(name)).items():
            out[f"triggerer: {kind}"] = out.get(f"triggerer: {kind}", 0.0) + seconds
    return out


def triggerer_resources(setup: Setup) -> dict[str, dict[str, float]]:
    """:func:`tree_resources` of each triggerer, and their sum (``all``)."""
    out = {name: tree_resources(setup.stack.pid(name)) for name in setup.triggerers}
    total: dict[str, float] = {}
    for figures in out.values():
        for key, value in figures.items():
            total[key] = round(total.get(key, 0) + value, 1)
    out["all"] = total
    return out


# ====================================================================== environment
@dataclass
class Setup:
    stack: Any  # harness.airflow_stack.AirflowStack
    bootstrap: str
    run: str
    control: Path
    topics: dict[int, str]
    counts: tuple[int, ...]
    triggerers: tuple[str, ...]
    scratch: Path
    broker_pid: int | None
    started_in: float
    code: str
    asset_ids: dict[str, int] = field(default_factory=dict)


def snapshot_src(dest: Path) -> str:
    """Extract the committed ``src/`` into ``dest``; return ``<commit>`` (plus ``+dirty src`` if the
    working tree's ``src/`` differs from it)."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "HEAD", "src"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f"{commit} (working tree's src/ differs: not used)" if dirty else commit


@contextlib.contextmanager
def environment(
    *,
    keep_home: bool,
    live_src: bool,
    counts: Sequence[int],
    triggerers: int,
    capacity: int | None,
    parse_interval: float | None,
    database: str,
    namespace_levels: str | None = None,
) -> Iterator[Setup]:
    """Broker (unless ``KAFKA_BOOTSTRAP_SERVERS``), topics, the Airflow stack; all stopped after."""
    t0 = time.monotonic()
    run = uuid.uuid4().hex[:8]
    with scratch_dir("bench-b8-", keep=keep_home) as scratch, kafka_broker(scratch / "kafka") as broker:
        control = scratch / "control"
        control.mkdir()
        (control / "phase").write_text("none\n")
        bootstrap = broker.bootstrap
        topics = {count: f"bench.b8.k{count}.{run}" for count in counts}
        create_topics(
            bootstrap,
            [TopicSpec(t, partitions=PARTITIONS) for t in topics.values()]
            + [TopicSpec(f"bench.b8.dlq.{run}", partitions=1)],
        )
        paths = [str(DAGS_FOLDER)]
        if live_src:
            code = "working tree"
        else:
            code = snapshot_src(scratch / "code")
            paths.insert(0, str(scratch / "code" / "src"))
        say(f"[code]    airflow_kafka_events for Airflow: {code}")
        pythonpath = os.pathsep.join(p for p in (*paths, os.environ.get("PYTHONPATH", "")) if p)
        extra_env = {
            "AIRFLOW_KAFKA_EVENTS_B8_RUN": run,
            "AIRFLOW_KAFKA_EVENTS_B8_DIR": str(control),
            "AIRFLOW_KAFKA_EVENTS_B8_COUNTS": ",".join(str(c) for c in counts),
            "PYTHONPATH": pythonpath,  # the triggerer imports b8_triggers.BurstTrigger
            "AIRFLOW_CONN_KAFKA_WATCHER": json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": {
                        "bootstrap.servers": bootstrap,
                        "group.id": f"bench-b8-watchers-{run}",
                        "enable.auto.commit": "false",
                        "auto.offset.reset": "earliest",
                        "topic.metadata.refresh.interval.ms": "2000",
                    },
                }
            ),
            "AIRFLOW__TRIGGERER__SHARED_STREAM_COHORT_GRACE_PERIOD": "5",
            **AIRFLOW_DEFAULT_HEALTH,
        }
        if capacity is not None:
            extra_env["AIRFLOW__TRIGGERER__CAPACITY"] = str(capacity)
        if parse_interval is not None:
            extra_env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = f"{parse_interval:g}"
        if namespace_levels is not None:
            extra_env["AIRFLOW__LOGGING__NAMESPACE_LEVELS"] = namespace_levels
        stack = airflow_stack_class()(scratch / "airflow", DAGS_FOLDER, extra_env, database=database)
        names = ("triggerer", *(f"triggerer-{i}" for i in range(2, triggerers + 1)))
        for name in names[1:]:
            stack.add_triggerer(name)
            stack.topology_components.append(name)
        with running_stack(stack, [DAG_ID], since=t0) as started_in:
            try:
                yield Setup(
                    stack,
                    bootstrap,
                    run,
                    control,
                    topics,
                    tuple(counts),
                    names,
                    scratch,
                    broker.pid,
                    started_in,
                    code,
                )
            finally:
                close_all_producers()  # the benchmark's cached producers, before the stack stops


# ====================================================================== phases
def is_ceiling(phase: str) -> bool:
    """``ceiling`` (one asset) and ``ceiling-<n>`` (the ``n`` assets of ``kafka-<n>``): no Kafka."""
    return phase == "ceiling" or phase.startswith("ceiling-")


def phase_assets(phase: str) -> list[tuple[str, str]]:
    if phase == "ceiling":
        return [CEILING]
    return kafka_assets(int(phase.split("-", 1)[1]))


def ceiling_triggers(phase: str) -> list[str]:
    """Names of the phase's ``BurstTrigger``\\ s (the DAG file's ``ceiling_trigger_name``)."""
    if phase == "ceiling":
        return ["ceiling"]
    count = phase.split("-", 1)[1]
    return [f"c{count}-{name.rsplit('_', 1)[-1]}" for name, _ in phase_assets(phase)]


def load_asset_ids(setup: Setup) -> None:
    names = [CEILING[0]] + [name for count in setup.counts for name, _ in kafka_assets(count)]

    def all_there() -> dict[str, int] | None:
        rows = setup.stack.query("SELECT id, name FROM asset WHERE name LIKE ?", ("b8_%",))
        found = {str(r["name"]): int(r["id"]) for r in rows}
        return found if all(n in found for n in names) else None

    setup.asset_ids = setup.stack.wait_for(
        all_there, 120, "the B8 assets in the asset table", ("dag-processor",)
    )


def switch_phase(setup: Setup, phase: str, timeout: float) -> tuple[float, dict[str, int]]:
    """Write ``phase``; wait until exactly its watchers exist, are assigned and have started; return how
    long that took and how many of its triggers each triggerer runs (by its job's hostname and id)."""
    started = time.monotonic()
    switched_at = datetime.now(timezone.utc)
    ready_files = (
        [setup.control / f"{name}.ready" for name in ceiling_triggers(phase)] if is_ceiling(phase) else []
    )
    phase_file = setup.control / "phase"
    if phase_file.read_text().strip() != phase:  # the same phase again: its triggers keep running
        for ready_file in ready_files:
            ready_file.unlink(missing_ok=True)
    phase_file.write_text(phase + "\n")
    names = {name for name, _ in phase_assets(phase)}
    ids = [setup.asset_ids[n] for n in names]
    marks = ",".join("?" * len(ids))
    stack = setup.stack

    def registered() -> bool:
        rows = stack.query(
            "SELECT a.name AS name, t.triggerer_id AS triggerer FROM asset_watcher aw "
            "JOIN asset a ON a.id = aw.asset_id JOIN trigger t ON t.id = aw.trigger_id"
        )
        watched = {str(r["name"]) for r in rows}
        triggers = int(stack.query("SELECT COUNT(*) AS n FROM trigger")[0]["n"])
        return watched == names and triggers == len(names) and all(r["triggerer"] is not None for r in rows)

    stack.wait_for(registered, timeout, f"the watchers of phase {phase} to be registered and assigned")

    def running() -> bool:
        if ready_files:
            return all(ready_file.exists() for ready_file in ready_files)
        rows = stack.query(
            f"SELECT asset_id, updated_at FROM asset_state_store WHERE key LIKE ? AND asset_id IN ({marks})",
            (STATE_KEY_PATTERN, *ids),
        )
        fresh = {int(r["asset_id"]) for r in rows if parse_db_time(r["updated_at"]) >= switched_at}
        return len(fresh) == len(ids)

    stack.wait_for(
        running, timeout, f"every watcher of phase {phase} to start reading", setup.triggerers, interval=0.5
    )
    placed = stack.query("SELECT triggerer_id AS job, COUNT(*) AS n FROM trigger GROUP BY triggerer_id")
    return time.monotonic() - started, {f"job {r['job']}": int(r["n"]) for r in placed}


# ====================================================================== batches
@dataclass
class Batch:
    phase: str
    kind: str  # warmup, burst, paced-<rate>
    count: int
    rate: float | None
    label: str = ""  # the phase, with "#2", "#3" ... when a phase is measured again
    pad: int = 0  # ceiling: characters of padding in each event (``ceiling-<n>+pad``)
    others_before: float | None = None  # CPU cores other processes used just before (see --max-others)
    others_during: float | None = None  # ... and while the batch ran
    tag: str = ""
    emit_s: float = 0.0  # how long emitting took (Kafka: until every send was acknowledged)
    wall_s: float = 0.0  # first emit -> every row seen by this process
    rows: int = 0
    distinct: int = 0
    throughput: float = 0.0
    steady_rate: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    #: the same split at the triggerer's "Trigger fired event" log line (the runner yielded it)
    emit_to_fired_ms: dict[str, float] = field(default_factory=dict)
    fired_to_row_ms: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: Kafka: position writes to asset_state_store seen while the batch ran (sampled: a lower bound)
    position_stores: int | None = None
    loadavg_end: list[float] = field(default_factory=list)


def _where(setup: Setup, phase: str) -> tuple[str, list[int]]:
    ids = [setup.asset_ids[n] for n, _ in phase_assets(phase)]
    keys = ("payload", "b8") if is_ceiling(phase) else ("payload", "extra", "b8")
    tag = json_text(setup.stack.database, "extra", keys)
    return f"asset_id IN ({','.join('?' * len(ids))}) AND {tag} = ?", ids


def ceiling_poll_interval(count: int) -> float:
    """How often each ``BurstTrigger`` of ``ceiling-<count>`` looks for a request (the DAG file's)."""
    return max(0.02, count / 500)


def emit_ceiling(setup: Setup, batch: Batch) -> float:
    """Tell the phase's triggers to fire the batch: ``n`` triggers share it round-robin (seq ``i``,
    ``i + n`` ... for trigger ``i``), all starting at the same moment (two of their poll intervals
    and half a second from now), event ``seq`` at ``seq / rate`` after it when paced."""
    names = ceiling_triggers(batch.phase)
    start_at = time.time() + 2 * ceiling_poll_interval(len(names)) + 0.5
    ready = []
    for i, name in enumerate(names):
        count = batch.count // len(names) + (1 if i < batch.count % len(names) else 0)
        spec = {
            "batch": batch.tag,
            "count": count,
            "rate": batch.rate,
            "first": i,
            "step": len(names),
            "start_at": start_at,
        }
        if batch.pad:
            spec["pad"] = batch.pad
        tmp = setup.control / f"{name}.go.tmp"
        tmp.write_text(json.dumps(spec))
        ready.append((tmp, setup.control / f"{name}.go"))
    t0 = time.monotonic()
    for tmp, go in ready:
        os.rename(tmp, go)
    return time.monotonic() - t0


def watcher_payload_pad(count_assets: int) -> int:
    """Characters of padding that make a ceiling event's JSON as long as the payload a Kafka watcher of
    ``kafka-<count_assets>`` fires for one of :func:`emit_kafka`'s envelopes."""
    name, uri = kafka_assets(count_assets)[-1]
    tag, seq = "0123456789abcdef", 99_999
    envelope = build_envelope(
        asset=AssetRef(name=name, uri=uri),
        source=EventSource(SourceKind.EXTERNAL, producer="b8-bench"),
        extra={"b8": tag, "seq": seq},
        idempotency_key=f"{tag}-{seq}",
    )
    record = SimpleNamespace(topic=f"bench.b8.k{count_assets}.0123abcd", partition=2, offset=99_999)
    watcher = len(json.dumps(envelope_payload(envelope, record)))  # type: ignore[arg-type]
    emitted_at = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    ceiling = len(json.dumps({"b8": tag, "seq": seq, "emitted_at": emitted_at, "pad": ""}))
    return max(0, watcher - ceiling)


def emit_kafka(setup: Setup, producer: RecordProducer, batch: Batch) -> float:
    count_assets = int(batch.phase.split("-", 1)[1])
    assets = [AssetRef(name=n, uri=u) for n, u in kafka_assets(count_assets)]
    topic = setup.topics[count_assets]
    source = EventSource(SourceKind.EXTERNAL, producer="b8-bench")
    futures = []
    t0 = time.monotonic()
    for seq in range(batch.count):
        if batch.rate:
            due = t0 + seq / batch.rate
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
        asset = assets[seq % len(assets)]
        envelope = build_envelope(
            asset=asset,
            source=source,
            extra={"b8": batch.tag, "seq": seq},
            idempotency_key=f"{batch.tag}-{seq}",
        )
        headers: list[tuple[str, bytes | str | None]] = [("event_id", envelope.event_id)]
        futures.append(
            producer.send(
                topic, ASSET_EVENT_CODEC.encode(envelope, topic=topic), key=record_key(asset), headers=headers
            )
        )
    for future in futures:
        future.result(timeout=60)
    return time.monotonic() - t0


#: The runner's line for a ceiling event (its whole payload: the batch tag and number).
FIRED = re.compile(r"^(\S+) \[info\s*\] Trigger fired event .*?'b8': '([^']+)', 'seq': (\d+)")
#: ... for a watcher's event (its asset event's id, not its payload: ``WatcherTriggerEvent``).
FIRED_EVENT = re.compile(r"^(\S+) \[info\s*\] Trigger fired event .*?'event_id': '([^']+)'")


def fired_times(setup: Setup, tag: str, event_ids: dict[str, int]) -> dict[int, datetime]:
    """When the triggerer's runner yielded each event of batch ``tag`` (its log, per ``seq``); a
    watcher's line names its asset event, ``event_ids`` maps those of the batch to their ``seq``."""
    found: dict[int, datetime] = {}
    for name in setup.triggerers:
        with (setup.stack.log_dir / f"{name}.log").open(errors="replace") as fh:
            for line in fh:
                if "Trigger fired event" not in line:
                    continue
                seq: int | None = None
                match = FIRED.match(line)
                if match is not None:
                    seq = int(match.group(3)) if match.group(2) == tag else None
                else:
                    by_id = FIRED_EVENT.match(line)
                    seq = event_ids.get(by_id.group(2)) if by_id is not None else None
                    match = by_id
                if match is not None and seq is not None:
                    found.setdefault(seq, datetime.fromisoformat(match.group(1).replace("Z", "+00:00")))
    return found


def spread(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "max": round(max(values), 1),
        "min": round(min(values), 1),
    }


class PositionStores:
    """Counts the watchers' position writes (``asset_state_store.updated_at`` changes) in a thread.

    Sampled every ``interval`` seconds; a watcher stores at most once a second, so this sees nearly
    all of them (a lower bound).
    """

    def __init__(self, setup: Setup, asset_ids: Sequence[int], interval: float = 0.25) -> None:
        self._stack = setup.stack
        self._ids = list(asset_ids)
        self._interval = interval
        self._seen: set[tuple[int, str]] = set(self._sample())
        self._first = len(self._seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="b8-position-stores", daemon=True)
        self._thread.start()

    def _sample(self) -> list[tuple[int, str]]:
        rows = self._stack.query(
            f"SELECT asset_id, updated_at FROM asset_state_store WHERE key LIKE ? "
            f"AND asset_id IN ({','.join('?' * len(self._ids))})",
            (STATE_KEY_PATTERN, *self._ids),
        )
        return [(int(r["asset_id"]), str(r["updated_at"])) for r in rows]

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(Exception):  # a busy database: the next sample
                self._seen.update(self._sample())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self._seen.update(self._sample())
        return len(self._seen) - self._first


def run_batch(setup: Setup, producer: RecordProducer, batch: Batch, timeout: float) -> Batch:
    batch.tag = f"{setup.run}-{batch.phase}-{batch.kind}-{uuid.uuid4().hex[:6]}"
    where, ids = _where(setup, batch.phase)
    stack = setup.stack
    cpu0 = cpu_snapshot(setup)
    stores = None if is_ceiling(batch.phase) else PositionStores(setup, ids)
    t0 = time.monotonic()
    if is_ceiling(batch.phase):
        batch.emit_s = emit_ceiling(setup, batch)
    else:
        batch.emit_s = emit_kafka(setup, producer, batch)

    def count() -> int:
        return int(
            stack.query(f"SELECT COUNT(*) AS n FROM asset_event WHERE {where}", (*ids, batch.tag))[0]["n"]
        )

    deadline_s = timeout + batch.count / 5
    stack.wait_for(
        lambda: count() >= batch.count,
        deadline_s,
        f"{batch.count} asset events of {batch.phase} {batch.kind}",
        setup.triggerers,
        interval=0.2,
    )
    batch.wall_s = time.monotonic() - t0
    if stores is not None:
        batch.position_stores = stores.stop()
    cpu1 = cpu_snapshot(setup)
    batch.cpu_s = {k: round(cpu1[k] - cpu0.get(k, 0.0), 2) for k in cpu1}
    others = batch.cpu_s.pop("machine") - batch.cpu_s["total"]
    batch.others_during = round(max(0.0, others) / batch.wall_s, 2)
    batch.loadavg_end = loadavg()
    rows = stack.query(f"SELECT timestamp, extra FROM asset_event WHERE {where}", (*ids, batch.tag))
    stored: list[datetime] = []
    latencies: list[float] = []
    emitted: list[datetime] = []
    seqs: set[int] = set()
    extras = [json.loads(row["extra"]) if isinstance(row["extra"], str) else row["extra"] for row in rows]
    event_ids = {
        str(e["payload"].get("event_id")): int(e["payload"]["extra"]["seq"])
        for e in extras
        if not is_ceiling(batch.phase)
    }
    fired = fired_times(setup, batch.tag, event_ids)
    to_fired: list[float] = []
    after_fired: list[float] = []
    for row, extra in zip(rows, extras, strict=True):
        payload = extra["payload"]
        at = parse_db_time(row["timestamp"])
        sent = datetime.fromisoformat(payload["emitted_at"])
        stored.append(at)
        emitted.append(sent)
        latencies.append((at - sent).total_seconds() * 1000)
        seq = int((payload if is_ceiling(batch.phase) else payload["extra"])["seq"])
        seqs.add(seq)
        if seq in fired:
            to_fired.append((fired[seq] - sent).total_seconds() * 1000)
            after_fired.append((at - fired[seq]).total_seconds() * 1000)
    stored.sort()
    batch.rows, batch.distinct = len(rows), len(seqs)
    span = (stored[-1] - min(emitted)).total_seconds()
    batch.throughput = round(len(rows) / span, 1) if span > 0 else 0.0
    lo, hi = int(0.1 * (len(stored) - 1)), int(0.9 * (len(stored) - 1))
    steady = (stored[hi] - stored[lo]).total_seconds()
    batch.steady_rate = round((hi - lo) / steady, 1) if steady > 0 else 0.0
    batch.latency_ms = spread(latencies)
    batch.emit_to_fired_ms = spread(to_fired)
    batch.fired_to_row_ms = spread(after_fired)
    return batch


def describe(batch: Batch) -> str:
    lat = batch.latency_ms
    rate = "max" if not batch.rate else f"{batch.rate:g}/s"
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in batch.cpu_s.items() if v >= 0.05)
    return (
        f"[{batch.label or batch.phase:>9} {batch.kind:<6}] {batch.rows}/{batch.count} rows "
        f"({batch.distinct} distinct), "
        f"offered {rate}, emit {batch.emit_s:.1f}s, {batch.throughput:.1f} events/s "
        f"(steady {batch.steady_rate:.1f}/s), latency p50 {lat['p50']:.0f} ms p95 {lat['p95']:.0f} ms "
        f"max {lat['max']:.0f} ms (emit->fired p50 {batch.emit_to_fired_ms.get('p50', float('nan')):.0f}, "
        f"fired->row p50 {batch.fired_to_row_ms.get('p50', float('nan')):.0f}); "
        + ("" if batch.position_stores is None else f"position stores {batch.position_stores}; ")
        + f"CPU s: {cpu}; "
        f"other processes {batch.others_before} -> {batch.others_during} cores; load {batch.loadavg_end}"
    )


# ====================================================================== main
def base_phase(config: str) -> str:
    """The phase a configuration runs (``ceiling-<n>+pad`` runs ``ceiling-<n>``)."""
    return config.removesuffix(PADDED)


def phase_count(phase: str) -> int:
    """How many assets ``phase`` watches."""
    phase = base_phase(phase)
    return 1 if phase == "ceiling" else int(phase.split("-", 1)[1])


def valid_phase(phase: str) -> bool:
    if phase == "ceiling":
        return True
    padded = phase.endswith(PADDED)
    kind, _, count = base_phase(phase).partition("-")
    if padded and kind != "ceiling":
        return False
    return kind in ("ceiling", "kafka") and count.isdigit() and 1 <= int(count) <= MAX_ASSETS


def phase_plan(
    config: str, label: str, events: int, rates: Sequence[float], paced_seconds: float
) -> list[Batch]:
    """The batches of a configuration: a warm-up, a burst of ``events``, one paced batch per rate."""
    phase = base_phase(config)
    pad = watcher_payload_pad(phase_count(phase)) if config.endswith(PADDED) else 0
    if pad:
        say(f"[phase]   {label}: each event padded with {pad} characters")
    plan = [
        Batch(phase, "warmup", max(20, len(phase_assets(phase))), None, label, pad=pad),
        Batch(phase, "burst", events, None, label, pad=pad),
    ]
    plan += [Batch(phase, f"paced-{r:g}", round(r * paced_seconds), r, label, pad=pad) for r in rates]
    return plan


def phase_resources(
    setup: Setup,
    phase: str,
    baseline: dict[str, float],
    quiet_cpu: tuple[float, float] | None,
    paced: list[Batch],
) -> dict[str, Any]:
    """The triggerers' memory, threads and Kafka clients now (after the phase's batches), and per watcher:
    memory above ``baseline`` (no watcher at all), CPU with no events (``quiet_cpu``: triggerer CPU
    seconds over wall seconds) and while paced."""
    count = phase_count(phase)
    now = triggerer_resources(setup)
    out: dict[str, Any] = {"watchers": count, "triggerers": now}
    out["rss_per_watcher_kib"] = round((now["all"]["rss_mib"] - baseline["rss_mib"]) * 1024 / count, 1)
    if quiet_cpu is not None:
        cpu_s, wall_s = quiet_cpu
        out["quiet_cpu_cores"] = round(cpu_s / wall_s, 3)
        out["quiet_cpu_ms_per_s_per_watcher"] = round(cpu_s / wall_s * 1000 / count, 3)
    for batch in paced:
        cores = batch.cpu_s.get("triggerer", 0.0) / batch.wall_s
        out[f"{batch.kind}_cpu_cores"] = round(cores, 3)
        out[f"{batch.kind}_cpu_ms_per_s_per_watcher"] = round(cores * 1000 / count, 3)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000, help="events of each burst (1000)")
    parser.add_argument(
        "--rates", default="20,100", help="offered events/s of the paced batches, comma-separated (20,100)"
    )
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="length of each paced batch (10)")
    parser.add_argument(
        "--configs",
        default="ceiling,kafka-1,kafka-10,kafka-100,ceiling",
        help="phases, in order; a phase may come again (ceiling,kafka-1,kafka-10,kafka-100,ceiling)",
    )
    parser.add_argument(
        "--max-others",
        type=float,
        default=0.3,
        help="before each measured batch, wait until processes not started by the benchmark use at "
        "most this many CPU cores (0.3)",
    )
    parser.add_argument(
        "--quiet-wait", type=float, default=60.0, help="longest wait for --max-others, then go on (60 s)"
    )
    parser.add_argument(
        "--gap",
        type=float,
        default=12.0,
        help="seconds from the end of one batch to the start of the next measured one (12: longer than "
        "a watcher's position store interval with 100 watchers, so that each batch starts with every "
        "store due, as a burst after a quiet spell does)",
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for a phase or batch")
    parser.add_argument(
        "--triggerers",
        type=int,
        default=1,
        help="triggerer processes on the stack, Airflow places the watchers (1)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        help="[triggerer] capacity of each triggerer (Airflow's default when absent: 1000)",
    )
    parser.add_argument(
        "--parse-interval",
        type=float,
        help="[dag_processor] min_file_process_interval: seconds between two parses of the DAG file, "
        "which has every asset of the run (the test stack's 5 when absent; Airflow's default is 30)",
    )
    parser.add_argument(
        "--database",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="metadata DB (postgres: a local server of its own; on SQLite Airflow itself fails at 1,000 "
        "watched assets, 'database is locked')",
    )
    parser.add_argument(
        "--namespace-levels",
        help="[logging] namespace_levels of the stack, e.g. 'airflow.jobs.triggerer_job_runner=warning' (no "
        "'Trigger fired event' line per event: no emit -> fired split then)",
    )
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    parser.add_argument(
        "--live-src", action="store_true", help="Airflow imports src/ of the working tree, not of HEAD"
    )
    args = parser.parse_args(argv)
    phases = [p.strip() for p in args.configs.split(",") if p.strip()]
    if not phases or not all(valid_phase(p) for p in phases):
        parser.error(f"--configs: ceiling, ceiling-<n>[+pad] or kafka-<n> (n from 1 to {MAX_ASSETS})")
    if args.triggerers < 1:
        parser.error("--triggerers: at least 1")
    counts = sorted({phase_count(p) for p in phases if p != "ceiling"})
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error("--rates: numbers, comma-separated")
    if args.events < 10 or any(r <= 0 or r * args.paced_seconds < 10 for r in rates):
        parser.error("--events and every paced batch (rate x --paced-seconds) must be >= 10 events")

    load_start = machine_at_start()
    started = time.monotonic()
    batches: list[Batch] = []
    switches: dict[str, float] = {}
    placements: dict[str, dict[str, int]] = {}
    resources: dict[str, Any] = {}
    with environment(
        keep_home=args.keep_home,
        live_src=args.live_src,
        counts=counts,
        triggerers=args.triggerers,
        capacity=args.capacity,
        parse_interval=args.parse_interval,
        database=args.database,
        namespace_levels=args.namespace_levels,
    ) as setup:
        load_asset_ids(setup)
        resources["no watcher"] = triggerer_resources(setup)
        baseline = resources["no watcher"]["all"]
        say(f"[memory]  triggerer(s) with no watcher: {baseline}")
        producer = RecordProducer(KafkaSettings({"bootstrap.servers": setup.bootstrap}).producer_config())
        try:
            for index, config in enumerate(phases):
                seen = phases[:index].count(config)
                label = config if not seen else f"{config}#{seen + 1}"
                phase = base_phase(config)
                took, placements[label] = switch_phase(setup, phase, args.timeout)
                switches[label] = round(took, 1)
                say(
                    f"[phase]   {label}: watchers registered and started in {switches[label]:.1f}s, "
                    f"triggers per triggerer job {placements[label]}"
                )
                plan = phase_plan(config, label, args.events, rates, args.paced_seconds)
                ended = time.monotonic()
                quiet_cpu: tuple[float, float] | None = None
                for batch in plan:
                    if batch.kind != "warmup":
                        quiet0 = cpu_snapshot(setup)["triggerer"], time.monotonic()
                        time.sleep(max(0.0, ended + args.gap - time.monotonic()))
                        batch.others_before = wait_for_quiet(args.max_others, args.quiet_wait)
                        if batch.kind == "burst":  # the triggerers with no events: the quiet gap
                            quiet_cpu = (
                                cpu_snapshot(setup)["triggerer"] - quiet0[0],
                                time.monotonic() - quiet0[1],
                            )
                    batches.append(run_batch(setup, producer, batch, args.timeout))
                    ended = time.monotonic()
                    say(describe(batch))
                paced = [b for b in plan if b.kind.startswith("paced-")]
                resources[label] = phase_resources(setup, phase, baseline, quiet_cpu, paced)
                say(f"[memory]  {label}: {json.dumps(resources[label])}")
        finally:
            producer.close()
        startup, code = setup.started_in, setup.code
    summary = summarize(batches)
    print_report(summary, rates, args.triggerers, args.database)
    print_resources(resources)
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}; benchmark took {time.monotonic() - started:.0f}s")
    if args.out:
        document = {
            "benchmark": "B8 asset events/s: Airflow ceiling vs Kafka watchers on 1 to 1,000 assets",
            "triggerers": args.triggerers,
            "capacity": args.capacity,
            "parse_interval": args.parse_interval,
            "namespace_levels": args.namespace_levels,
            "database": args.database,
            "events": args.events,
            "rates": rates,
            "paced_seconds": args.paced_seconds,
            "code": code,
            "stack_startup_s": round(startup, 1),
            "phase_switch_s": switches,
            "triggers_per_triggerer": placements,
            "triggerer_resources": resources,
            "summary": summary,
            "batches": [asdict(b) for b in batches],
        }
        write_results(args.out, document, load_start, load_end)
    return 0
