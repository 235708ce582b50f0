"""The e2e harness's topologies, its Redis server and its StatsD server's sender attribution.

The Airflow side of the production topology is exercised by every e2e test on the shared stack; these
check what those tests rely on without starting Airflow: the configuration each topology gives its
components, that two stacks never share a database or a broker, the order in which a stack stops its
components, a real ``redis-server`` started and stopped, and that a StatsD line is attributed to the
process (and parents) that sent it.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.airflow_stack import CELERY_WORKERS, AirflowStack
from harness.redis_server import LocalRedis
from harness.statsd_server import StatsdServer

pytestmark = pytest.mark.unit


def test_the_embedded_topology_is_still_the_default(tmp_path: Path) -> None:
    stack = AirflowStack(tmp_path / "home", tmp_path / "dags")
    env = stack.env
    assert (stack.topology, stack.database) == ("embedded", "sqlite")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite:///")
    assert not any(key.startswith("AIRFLOW__CELERY__") for key in env)
    assert set(stack.components) == {"api-server", "scheduler", "triggerer", "dag-processor"}


def test_the_production_topology_runs_celery_on_redis_and_postgres_with_two_workers_and_triggerers(
    tmp_path: Path,
) -> None:
    stack = AirflowStack(tmp_path / "home", tmp_path / "dags", topology="production", worker_concurrency=3)
    env = stack.env
    assert (stack.topology, stack.database) == ("production", "postgres")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://")
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://127.0.0.1:")
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == f"db+{env['AIRFLOW__DATABASE__SQL_ALCHEMY_CONN']}"
    assert env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] == "3"
    assert stack.topology_components == [*CELERY_WORKERS, "triggerer-2"]
    queues, hostnames, log_ports = set(), set(), set()
    for name, (hostname, queue) in CELERY_WORKERS.items():
        comp = stack.components[name]
        argv = comp.argv
        assert argv[:2] == ["celery", "worker"]
        assert argv[argv.index("--queues") + 1] == f"default,{queue}"
        assert argv[argv.index("--celery-hostname") + 1] == f"{hostname}@%h"
        queues.add(queue)
        hostnames.add(comp.env["AIRFLOW_E2E_WORKER_HOSTNAME"])
        log_ports.add(comp.env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])
    assert len(queues) == len(hostnames) == len(log_ports) == 2
    assert stack.components["triggerer-2"].argv == ["triggerer"]


def test_two_production_stacks_share_neither_database_nor_broker(tmp_path: Path) -> None:
    first, second = (AirflowStack(tmp_path / n, tmp_path / "dags", topology="production") for n in "ab")
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__BROKER_URL"):
        assert first.env[key] != second.env[key], key


def test_unknown_topologies_and_sqlite_in_production_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="topology must be one of"):
        AirflowStack(tmp_path, tmp_path, topology="cluster")
    with pytest.raises(ValueError, match="PostgreSQL"):
        AirflowStack(tmp_path, tmp_path, topology="production", database="sqlite")


def test_stop_terminates_the_components_of_a_round_side_by_side_and_the_api_server_last(
    tmp_path: Path,
) -> None:
    """Each stand-in component notes when it got SIGTERM and takes 1.5 s to exit."""
    stack = AirflowStack(tmp_path / "home", tmp_path / "dags", topology="production")
    stack.log_dir.mkdir(parents=True)
    noted = tmp_path / "sigterm.txt"
    for name, comp in stack.components.items():
        comp.log_fh = comp.log_path.open("ab")
        on_term = f"echo {name} $(date +%s.%N) >> {noted}; sleep 1.5; exit 0"
        comp.proc = subprocess.Popen(
            ["bash", "-c", f"trap '{on_term}' TERM; sleep 60 & wait"], start_new_session=True
        )
    time.sleep(0.5)  # every trap is set before the first signal
    assert all(comp.running for comp in stack.components.values())
    stack.stop()
    assert not any(comp.running for comp in stack.components.values())
    term = {name: float(at) for name, at in (line.split() for line in noted.read_text().splitlines())}
    assert set(term) == set(stack.components)
    rounds = [[*CELERY_WORKERS, "triggerer-2"], ["scheduler", "triggerer", "dag-processor"], ["api-server"]]
    for earlier, later in itertools.pairwise(rounds):
        # a round starts once the previous one exited (each takes 1.5 s after its signal) ...
        assert min(term[n] for n in later) >= max(term[n] for n in earlier) + 1.4, term
    for names in rounds:
        # ... and signals its components together, not one after another's exit
        assert max(term[n] for n in names) - min(term[n] for n in names) < 1.2, term


def test_a_local_redis_answers_on_its_own_port_and_is_gone_after_stop() -> None:
    redis = LocalRedis()
    redis.start()
    data_dir = redis.data_dir
    try:
        with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(64).startswith(b"+PONG")
    finally:
        redis.stop()
    assert data_dir is not None and not data_dir.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", redis.port), timeout=2):
        pass


def test_a_statsd_line_is_attributed_to_the_process_that_sent_it_and_its_parents() -> None:
    server = StatsdServer()
    try:
        code = (
            "import socket, sys, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.sendto(b'airflow.kafka_events.test.child:1|c', ('127.0.0.1', int(sys.argv[1]))); "
            "sys.stdin.read()"  # alive until the parent closes stdin
        )
        with subprocess.Popen([sys.executable, "-c", code, str(server.port)], stdin=subprocess.PIPE) as child:
            server.wait_for(r"airflow\.kafka_events\.test\.child:1\|c", timeout=30)
            child.stdin.close()  # type: ignore[union-attr]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"airflow.kafka_events.test.self:1|c\nairflow.other:1|c", ("127.0.0.1", server.port))
            server.wait_for(r"airflow\.other:1\|c", timeout=30)
        (from_child,) = server.senders(r"airflow\.kafka_events\.test\.child:1\|c")
        assert from_child[:2] == (child.pid, os.getpid()), from_child
        assert server.senders(r"airflow\.kafka_events\.test\.self:1\|c") == {tuple(from_child[1:])}
        assert server.senders(r"airflow\.other:1\|c") == {()}  # not ours: not looked up
        ours = r"airflow\.kafka_events\.test\..*"
        assert server.reporters(ours, lambda pids: "child" * (child.pid in pids)) == {"child", ""}
    finally:
        server.close()
