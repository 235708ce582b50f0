"""B5: asset event emit -> AssetEvent persisted in Airflow, watcher path vs bridge path, side by side.

One broker and one Airflow deployment (api-server, scheduler, triggerer, dag-processor on SQLite;
``tests/harness/airflow_stack.py``) with ``benchmarks/dags`` as the DAGs folder, and one
``airflow-kafka-events bridge`` subprocess (user ``bridge``, role ``op``).  Then ``--events`` events
per path, the paths alternating, each emitted with ``external.emit`` and waited for before the next
one (so every event is on its own, nothing is batched or coalesced):

* ``watcher``: an event for ``bench://b5/watched`` (``kafka_watched_asset``, DAG
  ``b5_watcher_consumer``) on its own topic; the triggerer's ``KafkaAssetEventTrigger`` makes the
  AssetEvent (found by ``extra.payload.event_id``);
* ``bridge``: a partitioned event (key ``b5-<n>``) for ``bench://b5/bridged``
  (``PartitionedAssetTimetable`` DAG ``b5_bridge_consumer``) on another topic; the bridge posts it
  to ``POST /api/v2/assets/events`` (found by ``extra.airflow_kafka_events.event_id``).

Latency = the AssetEvent row's ``timestamp`` (metadata DB, read-only) - the moment ``emit`` returned
its receipt (same machine clock), also reported from the record's Kafka timestamp.  The watcher
uses its default ``poll_timeout`` (1 s) and the stack sets
``[triggerer] shared_stream_cohort_grace_period`` = 5 s as the e2e tests do.  One warm-up event per
path is not counted.  The pause between events is ``--gap`` plus a random 0..``--jitter`` s (seeded
by ``--seed``), so that emits do not fall in step with the consumers' ~1 s poll cycles (with a
fixed pause the latencies drift as a saw-tooth through that cycle).  Uses
``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_kafka_events.assets.publish import emit
from airflow_kafka_events.kafka import TopicSpec
from benchmarks.harness import (
    DAGS_FOLDER,
    airflow_stack_class,
    create_topics,
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

DAG_IDS = ("b5_watcher_consumer", "b5_bridge_consumer")
WATCHED = ("b5_watched", "bench://b5/watched")
BRIDGED = ("b5_bridged", "bench://b5/bridged")
PATHS = ("watcher", "bridge")


# ====================================================================== environment
@dataclass
class Setup:
    stack: Any  # harness.airflow_stack.AirflowStack
    bootstrap: str
    run: str
    watcher_topic: str
    bridge_topic: str
    bridge_dlq: str
    scratch: Path
    started_in: float


@contextlib.contextmanager
def environment(*, keep_home: bool) -> Iterator[Setup]:
    """Broker (unless ``KAFKA_BOOTSTRAP_SERVERS``), topics, the Airflow stack; all stopped after."""
    t0 = time.monotonic()
    run = uuid.uuid4().hex[:8]
    with scratch_dir("bench-b5-", keep=keep_home) as scratch, kafka_broker(scratch / "kafka") as broker:
        bootstrap = broker.bootstrap
        names = {
            "watcher": f"bench.b5.watcher.{run}",
            "watcher_dlq": f"bench.b5.watcher-dlq.{run}",
            "bridge": f"bench.b5.bridge.{run}",
            "bridge_dlq": f"bench.b5.bridge-dlq.{run}",
        }
        create_topics(
            bootstrap,
            [
                TopicSpec(names["watcher"], partitions=3),
                TopicSpec(names["watcher_dlq"], partitions=1),
                TopicSpec(names["bridge"], partitions=3),
                TopicSpec(names["bridge_dlq"], partitions=1),
            ],
        )
        extra_env = {
            "AIRFLOW_KAFKA_EVENTS_B5_RUN": run,
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
            ),
            "AIRFLOW_CONN_KAFKA_WATCHER": json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": {
                        "bootstrap.servers": bootstrap,
                        "group.id": f"bench-b5-watchers-{run}",
                        "enable.auto.commit": "false",
                        "auto.offset.reset": "earliest",
                        "session.timeout.ms": "10000",
                        "topic.metadata.refresh.interval.ms": "2000",
                    },
                }
            ),
            "AIRFLOW__TRIGGERER__SHARED_STREAM_COHORT_GRACE_PERIOD": "5",
        }
        stack = airflow_stack_class()(scratch / "airflow", DAGS_FOLDER, extra_env)
        with running_stack(stack, DAG_IDS, since=t0) as started_in:
            yield Setup(
                stack,
                bootstrap,
                run,
                names["watcher"],
                names["bridge"],
                names["bridge_dlq"],
                scratch,
                started_in,
            )


class Bridge:
    """The ``airflow-kafka-events bridge`` subprocess; output in ``log_path``; stopped by its pid."""

    def __init__(self, setup: Setup, log_path: Path, batch_size: int | None = None) -> None:
        self.log_path = log_path
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
        environ["AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE"] = str(setup.stack.passwords_file)
        environ["PYTHONUNBUFFERED"] = "1"
        self._log = log_path.open("ab")
        argv = [
            sys.executable,
            "-m",
            "airflow_kafka_events.cli.main",
            "bridge",
            "--bootstrap-servers",
            setup.bootstrap,
            "--topic",
            setup.bridge_topic,
            "--group",
            f"bench-b5-bridge-{setup.run}",
            "--dlq-topic",
            setup.bridge_dlq,
            "--api-url",
            setup.stack.base_url,
            "--username",
            "bridge",
            "--asset",
            "bench://b5/*",
        ]
        if batch_size is not None:
            argv += ["--batch-size", str(batch_size)]
        self.proc = subprocess.Popen(
            argv,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        say(f"[bridge]  pid {self.proc.pid}, log {log_path}")

    def tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def retries(self) -> int:
        """POSTs the bridge had to retry (5xx/408/425/429/connection errors), from its log."""
        return self.log_path.read_text(errors="replace").count(" failed (attempt ")

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the bridge exited with {self.proc.returncode}:\n{self.tail()}")

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()
        return self.proc.returncode


def settle(stack: Any, timeout: float = 300.0) -> None:
    """Wait until the runs the warm-up events created are finished (their first task launches are
    the slowest, and SQLite serializes their writes with the measured ones)."""
    marks = ",".join("?" * len(DAG_IDS))

    def idle() -> bool:
        rows = stack.query(
            f"SELECT COUNT(*) AS n FROM dag_run WHERE dag_id IN ({marks}) "
            "AND state NOT IN ('success', 'failed')",
            DAG_IDS,
        )
        return int(rows[0]["n"]) == 0

    stack.wait_for(idle, timeout, "the warm-up DAG runs to finish", ("scheduler",))


# ====================================================================== one event
@dataclass
class Sample:
    path: str
    index: int
    event_id: str
    partition_key: str | None
    emit_ms: float  # the emit call itself
    latency_ms: float  # AssetEvent.timestamp - emit returned
    latency_from_record_ms: float | None  # AssetEvent.timestamp - Kafka record timestamp
    seen_after_ms: float  # when this benchmark's poll first saw the row (upper bound)
    asset_event_id: int


def find_row(stack: Any, path: str, event_id: str) -> dict[str, Any] | None:
    name, uri = WATCHED if path == "watcher" else BRIDGED
    # Only the newest few rows: every event is waited for before the next one is emitted.
    rows = stack.query(
        "SELECT ae.id, ae.timestamp, ae.extra FROM asset_event ae JOIN asset a ON a.id = ae.asset_id "
        "WHERE a.name = ? AND a.uri = ? ORDER BY ae.id DESC LIMIT 5",
        (name, uri),
    )
    for row in rows:
        extra = json.loads(row["extra"]) if isinstance(row["extra"], str) else (row["extra"] or {})
        if path == "watcher":
            found = ((extra.get("payload") or {}) if extra.get("from_trigger") else {}).get("event_id")
        else:
            found = (extra.get("airflow_kafka_events") or {}).get("event_id")
        if found == event_id:
            return row
    return None


def one_event(setup: Setup, bridge: Bridge, path: str, index: int, timeout: float, poll: float) -> Sample:
    key = None
    if path == "watcher":
        asset, topic = WATCHED, setup.watcher_topic
    else:
        asset, topic, key = BRIDGED, setup.bridge_topic, f"b5-{setup.run}-{index}"
    t0 = time.perf_counter()
    receipt = emit(
        asset[1],
        name=asset[0],
        partition_key=key,
        extra={"bench": "b5", "path": path, "seq": index},
        idempotency_key=f"b5-{setup.run}-{path}-{index}",
        topic=topic,
        producer="b5-bench",
        bootstrap_servers=setup.bootstrap,
    )
    returned = datetime.now(timezone.utc)
    emit_ms = (time.perf_counter() - t0) * 1000
    deadline = time.monotonic() + timeout
    while True:
        row = find_row(setup.stack, path, receipt.event_id)
        if row is not None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{path} event {receipt.event_id} (#{index}) not in asset_event after {timeout:.0f}s\n"
                f"--- triggerer ---\n{setup.stack.log_tail('triggerer', 30)}\n"
                f"--- bridge ---\n{bridge.tail(2000)}"
            )
        if path == "bridge":
            bridge.check()
        time.sleep(poll)
    seen_ms = (datetime.now(timezone.utc) - returned).total_seconds() * 1000
    stored = parse_db_time(row["timestamp"])
    from_record = None
    if receipt.timestamp is not None:
        from_record = (stored - receipt.timestamp).total_seconds() * 1000
    return Sample(
        path=path,
        index=index,
        event_id=receipt.event_id,
        partition_key=key,
        emit_ms=round(emit_ms, 2),
        latency_ms=round((stored - returned).total_seconds() * 1000, 1),
        latency_from_record_ms=None if from_record is None else round(from_record, 1),
        seen_after_ms=round(seen_ms, 1),
        asset_event_id=int(row["id"]),
    )


# ====================================================================== report
def stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 1),
        "p99": round(percentile(values, 99), 1),
        "max": round(max(values), 1),
        "min": round(min(values), 1),
        "mean": round(statistics.fmean(values), 1),
    }


def summarize(samples: list[Sample]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in PATHS:
        mine = [s for s in samples if s.path == path]
        if not mine:
            continue
        out[path] = {
            "n": len(mine),
            "latency_ms": stats([s.latency_ms for s in mine]),
            "latency_from_record_ms": stats(
                [s.latency_from_record_ms for s in mine if s.latency_from_record_ms is not None]
            ),
            "emit_ms": stats([s.emit_ms for s in mine]),
        }
    return out


def print_report(summary: dict[str, Any], events: int) -> None:
    say("")
    say(f"B5 emit -> AssetEvent row, {events} events per path (one at a time):")
    say(
        f"{'path':<8} {'n':>3} {'p50':>9} {'p99':>9} {'max':>9} {'min':>9}   "
        f"{'p50 from record ts':>18}   {'emit p50':>8}"
    )
    for path in PATHS:
        if path not in summary:
            continue
        s = summary[path]
        lat, rec = s["latency_ms"], s["latency_from_record_ms"]
        say(
            f"{path:<8} {s['n']:>3} {lat['p50']:>7.0f}ms {lat['p99']:>7.0f}ms {lat['max']:>7.0f}ms "
            f"{lat['min']:>7.0f}ms   {rec['p50']:>16.0f}ms   {s['emit_ms']['p50']:>6.1f}ms"
        )
    say(f"bridge POSTs retried (5xx etc., then posted): {summary.get('bridge_post_retries')}")


# ====================================================================== main
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20, help="events per path (20)")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between events once one landed (1.0)")
    parser.add_argument("--jitter", type=float, default=1.0, help="random extra pause, 0..J seconds (1.0)")
    parser.add_argument("--seed", type=int, default=5, help="seed of the pauses (5)")
    parser.add_argument(
        "--bridge-batch-size", type=int, default=None, help="bridge --batch-size (default: the bridge's, 50)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for one event (120)")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between metadata DB polls (0.1)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    args = parser.parse_args(argv)
    if args.events < 1:
        parser.error("--events must be >= 1")

    load_start = machine_at_start()
    started = time.monotonic()
    samples: list[Sample] = []
    loads: list[list[float]] = []
    with environment(keep_home=args.keep_home) as setup:
        rng = random.Random(args.seed)
        bridge = Bridge(setup, setup.scratch / "bridge.log", args.bridge_batch_size)
        try:
            for path in PATHS:  # the first event of each path starts its consumer: not counted
                warm = one_event(setup, bridge, path, -1, timeout=300.0, poll=args.poll)
                say(f"[warmup]  {path}: {warm.latency_ms:.0f} ms (not counted)")
            settle(setup.stack)
            time.sleep(args.gap)
            for i in range(args.events):
                for path in PATHS:
                    sample = one_event(setup, bridge, path, i, timeout=args.timeout, poll=args.poll)
                    samples.append(sample)
                    time.sleep(args.gap + rng.uniform(0, args.jitter))
                loads.append(loadavg())
                last = samples[-2:]
                say(
                    f"[{i + 1:>3}/{args.events}] "
                    + "  ".join(f"{s.path}={s.latency_ms:.0f}ms" for s in last)
                    + f"  load={loads[-1]}"
                )
        finally:
            code = bridge.stop()
            bridge_retries = bridge.retries()
            say(f"[bridge]  stopped (exit {code}); POST retries: {bridge_retries}")
        startup = setup.started_in
    summary = summarize(samples)
    summary["bridge_post_retries"] = bridge_retries
    print_report(summary, args.events)
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}; benchmark took {time.monotonic() - started:.0f}s")
    if args.out:
        document = {
            "benchmark": "B5 emit -> AssetEvent, watcher vs bridge",
            "events_per_path": args.events,
            "gap_s": args.gap,
            "jitter_s": args.jitter,
            "seed": args.seed,
            "bridge_batch_size": args.bridge_batch_size,
            "stack_startup_s": round(startup, 1),
            "summary": summary,
            "samples": [asdict(s) for s in samples],
        }
        write_results(args.out, document, load_start, load_end, loadavg_per_round=loads)
    return 0
