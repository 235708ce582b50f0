"""What the benchmarks share: the broker and its topics, an Airflow stack and SQL on its metadata DB,
the machine's load and the tail that writes a benchmark's results."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_kafka_events.kafka import KafkaSettings, TopicSpec, delete_topics, ensure_topics
from airflow_kafka_events.kafka.producer import close_all_producers
from airflow_kafka_events.kafka.topic_plan import TopicSettings, configured_topics, ensure_configured_topics
from airflow_kafka_events.local_broker import LocalKafkaBroker

REPO = Path(__file__).resolve().parents[1]
#: the benchmarks' DAGs, every Airflow benchmark's DAGs folder
DAGS_FOLDER = Path(__file__).resolve().parent / "dags"

#: Airflow's own heartbeat timeout and health-check thresholds (its defaults), not the test stack's quick
#: ones, and 30 s for a worker's Execution API request (Airflow's 5 s): under a benchmark's load a late
#: heartbeat or answer must not fail a component's job or a task and hand its work to another (with the
#: test stack's 15 s a scheduler marked its own job failed at 200 stream pairs, B13; a triggerer late
#: past its threshold loses its triggers to another triggerer)
AIRFLOW_DEFAULT_HEALTH: Mapping[str, str] = MappingProxyType(
    {
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "300",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "30",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "30",
    }
)


# ====================================================================== output and the machine
def say(msg: str) -> None:
    print(msg, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine_at_start() -> list[float]:
    """Print the CPUs and load average before a benchmark; return the load average."""
    load = loadavg()
    say(f"[machine] {os.cpu_count()} CPUs, load average {load}")
    return load


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def write_results(
    out: Path, document: dict[str, Any], load_start: Any, load_end: Any, **machine: Any
) -> None:
    """Write a benchmark's results as JSON to ``out``, with the machine it ran on (CPUs, load averages)."""
    document = {
        **document,
        "machine": {"cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": load_end, **machine},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    say(f"[results] written to {out}")


# ====================================================================== Kafka
@dataclass(frozen=True)
class Broker:
    """The broker a benchmark uses (``pid``: the local one it started; None: ``KAFKA_BOOTSTRAP_SERVERS``)."""

    bootstrap: str
    pid: int | None = None


@contextlib.contextmanager
def kafka_broker(state_dir: Path | None = None) -> Iterator[Broker]:
    """``KAFKA_BOOTSTRAP_SERVERS``, or a local broker started in ``state_dir`` (a temporary directory,
    removed after, when None) and stopped after.

    On the way out the process's cached producers close first, while the broker still answers (closed
    after it, each printed librdkafka ``Connection refused`` lines); a client of the benchmark's own must
    be closed inside the block.
    """
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "")
    if bootstrap:
        try:
            yield Broker(bootstrap)
        finally:
            close_all_producers()
        return
    scratch = Path(tempfile.mkdtemp(prefix="bench-kafka-")) if state_dir is None else None
    broker = LocalKafkaBroker(state_dir=scratch or state_dir)
    status = broker.start()
    say(f"[broker]  local Kafka {status.version} at {status.bootstrap_servers} (pid {status.pid})")
    try:
        yield Broker(str(status.bootstrap_servers), status.pid)
    finally:
        close_all_producers()
        broker.stop()
        say(f"[broker]  stopped (pid {status.pid})")
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def create_topics(bootstrap: str, specs: Sequence[TopicSpec]) -> None:
    """Create the topics of ``specs`` that do not exist yet, with an admin client of its own, gone when
    this returns."""
    ensure_topics(AdminClient(KafkaSettings({"bootstrap.servers": bootstrap}).admin_config()), specs)


def remove_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Delete the topics ``names``, with an admin client of its own, gone when this returns."""
    delete_topics(AdminClient(KafkaSettings({"bootstrap.servers": bootstrap}).admin_config()), names)


# ====================================================================== Airflow
def airflow_stack_class() -> Any:
    """``AirflowStack`` of the tests' harness (tests/harness/airflow_stack.py): a real deployment."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from harness.airflow_stack import AirflowStack

    return AirflowStack


def json_text(database: str, column: str, keys: Sequence[str]) -> str:
    """SQL for the text at ``keys`` inside JSON column ``column`` on ``database`` (``sqlite`` or
    ``postgres``), e.g. ``extra`` at ``("payload", "b8")``."""
    if database == "postgres":
        return f"CAST({column} AS json) #>> '{{{','.join(keys)}}}'"
    return f"json_extract({column}, '$.{'.'.join(keys)}')"


def parse_db_time(value: Any) -> datetime:
    """A timestamp as the metadata DB returns it (SQLite: text, naive = UTC; PostgreSQL: a datetime) ->
    aware UTC datetime."""
    if isinstance(value, datetime):
        parsed = value
    else:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


# ====================================================================== a benchmark's files and stack
@contextlib.contextmanager
def scratch_dir(prefix: str, *, keep: bool = False) -> Iterator[Path]:
    """A temporary directory for a benchmark's files (broker state, Airflow home): removed after, unless
    ``keep`` or the block raised (then its path is printed)."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    failed = False
    try:
        yield scratch
    except BaseException:
        failed = True
        raise
    finally:
        if keep or failed:
            say(f"[files]   kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def running_stack(
    stack: Any, dag_ids: Sequence[str], *, since: float, timeout: float | None = None
) -> Iterator[float]:
    """Start ``stack`` (an ``AirflowStack``) and wait until ``dag_ids`` are parsed; yield the seconds from
    ``since`` (a :func:`time.monotonic` reading) until then; stop the stack after."""
    try:
        if timeout is None:
            stack.start(dag_ids=list(dag_ids))
        else:
            stack.start(dag_ids=list(dag_ids), timeout=timeout)
        started_in = time.monotonic() - since
        pids = {name: stack.pid(name) for name in ("api-server", "scheduler", "dag-processor", "triggerer")}
        pids.update({name: stack.pid(name) for name in stack.topology_components})
        say(f"[airflow] stack healthy, DAGs parsed in {started_in:.1f}s (home {stack.home}; pids {pids})")
        yield started_in
    finally:
        stack.stop()
        say("[airflow] stopped")


@dataclass
class Environment:
    """A running broker (ours or ``KAFKA_BOOTSTRAP_SERVERS``) and a running Airflow stack."""

    stack: Any  # harness.airflow_stack.AirflowStack
    settings: KafkaSettings
    bootstrap: str
    home: Path
    started_in: float
    broker_pid: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def airflow_environment(
    dag_ids: Sequence[str],
    *,
    prefix: str,
    keep_home: bool = False,
    topology: str = "embedded",
    extra_env: Mapping[str, str] | None = None,
    connection_extra: Mapping[str, Any] | None = None,
) -> Iterator[Environment]:
    """Start the broker (unless ``KAFKA_BOOTSTRAP_SERVERS``) with every topic the default configuration
    names, and the Airflow stack (of ``topology``, see tests/harness/airflow_stack.py, with ``extra_env``
    in its environment and ``connection_extra`` in its ``kafka_default`` connection's extra) on
    ``benchmarks/dags``; stop both after.

    Both are stopped through their own APIs, by the pids they started.  The Airflow home (logs,
    metadata DB) is a temporary directory, removed afterwards unless ``keep_home`` or the body
    raised (then its path is printed).
    """
    t0 = time.monotonic()
    with scratch_dir(prefix, keep=keep_home) as scratch, kafka_broker(scratch / "kafka") as broker:
        settings = KafkaSettings({"bootstrap.servers": broker.bootstrap})
        # every topic the (default) configuration names, as `airflow-kafka-events topics ensure` makes
        # them: without the stream index topic each streaming task would report it missing
        wanted = configured_topics(environ={"AIRFLOW_HOME": str(scratch / "airflow")})
        ensure_configured_topics(AdminClient(settings.admin_config()), wanted, TopicSettings(partitions=3))
        conn = {
            "conn_type": "kafka",
            "extra": {"bootstrap.servers": broker.bootstrap, **(connection_extra or {})},
        }
        stack = airflow_stack_class()(
            scratch / "airflow",
            DAGS_FOLDER,
            {"AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(conn), **(extra_env or {})},
            topology=topology,
        )
        with running_stack(stack, dag_ids, since=t0) as started_in:
            yield Environment(stack, settings, broker.bootstrap, stack.home, started_in, broker.pid)
