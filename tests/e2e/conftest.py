"""Fixtures for end-to-end tests against a real Airflow deployment.

* ``airflow_dag_dirs`` -- every ``dags`` directory below ``tests/e2e`` (``tests/e2e/dags``,
  ``tests/e2e/<feature>/dags``, ...). Their files are copied into one session DAGs folder.
* ``airflow_dags_folder`` -- that session DAGs folder.
* ``airflow_extra_env`` -- extra environment for every Airflow component (Kafka connections, ...;
  ``kafka_registry``, through the session's schema registry, when a selected e2e test uses it).
* ``e2e_topology`` -- the topology of the shared stack: ``production`` (PostgreSQL, CeleryExecutor
  on Redis with two workers, two triggerers; docs/production-topology.md) unless the environment
  variable ``AIRFLOW_KAFKA_EVENTS_E2E_TOPOLOGY`` says ``embedded`` (SQLite, LocalExecutor).
* ``statsd`` -- a StatsD server (a UDP socket read by a thread) that every component reports to.
* ``migrated_airflow_home`` -- an :class:`AirflowStack` whose metadata DB is migrated but whose
  components are not running; use ``.cli(...)``, ``.env`` and ``.home`` (discovery tests).
* ``airflow_stack`` -- the same :class:`AirflowStack`, started: api-server, scheduler, triggerer(s),
  dag-processor (and Celery workers), healthy. One per session; stopped at session end.
* ``stack`` -- ``airflow_stack`` with the default trigger events topic created;
* ``run_dir`` -- a directory a DAG run's task processes write their files into.

Order: the e2e tests that do not use the shared stack (the suites with a stack of their own:
``slots``, ``faults``, ``ui``, ``secured``) run before those that do, so that two stacks never run
side by side on the machine, and the shared stack is stopped right after the last test that uses
it instead of idling through the rest of the test run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS_DIR = Path(__file__).resolve().parents[1]
if str(_TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(_TESTS_DIR))

from harness.airflow_stack import TOPOLOGIES, AirflowStack, AirflowStackError  # noqa: E402
from harness.statsd_server import StatsdServer  # noqa: E402

E2E_DIR = Path(__file__).resolve().parent
TOPOLOGY_ENV = "AIRFLOW_KAFKA_EVENTS_E2E_TOPOLOGY"
#: the fixtures of the shared stack (``migrated_airflow_home`` is its metadata DB, PostgreSQL included)
SHARED_STACK_FIXTURES = ("airflow_stack", "migrated_airflow_home")
_LAST_SHARED = pytest.StashKey[str]()


def _uses_shared_stack(item: pytest.Item) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in SHARED_STACK_FIXTURES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The e2e tests that do not use the shared stack first (in their order), then those that do;
    other tests keep their places."""
    places = [i for i, item in enumerate(items) if item.get_closest_marker("e2e")]
    e2e = [items[i] for i in places]
    ordered = [it for it in e2e if not _uses_shared_stack(it)] + [it for it in e2e if _uses_shared_stack(it)]
    for place, item in zip(places, ordered, strict=True):
        items[place] = item


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember the last selected test that uses the shared stack (after ``-m`` / ``-k`` deselection)."""
    shared = [item for item in session.items if _uses_shared_stack(item)]
    if shared:
        session.config.stash[_LAST_SHARED] = shared[-1].nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test that uses the shared stack, stop it (its fixtures' teardown at the end of
    the test run finds it stopped)."""
    result = yield
    if item.nodeid == item.config.stash.get(_LAST_SHARED, None):
        funcargs = getattr(item, "funcargs", None) or {}
        for name in SHARED_STACK_FIXTURES:
            stack = funcargs.get(name)
            if isinstance(stack, AirflowStack):
                stack.stop()
                break
    return result


def _copy_dag_dir(source: Path, target: Path, origin: dict[Path, Path]) -> None:
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if "__pycache__" in rel.parts or path.is_dir():
            continue
        if rel in origin:
            raise pytest.UsageError(f"DAG file {rel} exists in both {origin[rel]} and {source}")
        origin[rel] = source
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / rel)


@pytest.fixture(scope="session")
def airflow_dag_dirs() -> list[Path]:
    """Directories whose files make up the session DAGs folder: every ``dags`` dir below tests/e2e."""
    return sorted(p for p in E2E_DIR.rglob("dags") if p.is_dir() and "__pycache__" not in p.parts)


@pytest.fixture(scope="session")
def airflow_dags_folder(tmp_path_factory: pytest.TempPathFactory, airflow_dag_dirs: list[Path]) -> Path:
    folder = tmp_path_factory.mktemp("e2e-dags")
    origin: dict[Path, Path] = {}
    for source in airflow_dag_dirs:
        _copy_dag_dir(source, folder, origin)
    return folder


@pytest.fixture(scope="session")
def e2e_topology() -> str:
    """``production`` unless the environment variable ``TOPOLOGY_ENV`` names another topology."""
    topology = os.environ.get("AIRFLOW_KAFKA_EVENTS_E2E_TOPOLOGY") or "production"
    if topology not in TOPOLOGIES:
        raise pytest.UsageError(
            f"AIRFLOW_KAFKA_EVENTS_E2E_TOPOLOGY must be one of {TOPOLOGIES}, not {topology!r}"
        )
    return topology


@pytest.fixture(scope="session")
def statsd() -> Iterator[StatsdServer]:
    """The StatsD server the shared stack's components report to (``[metrics] statsd_on``)."""
    server = StatsdServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def airflow_extra_env(request: pytest.FixtureRequest, statsd: StatsdServer) -> dict[str, str]:
    """Environment added to every Airflow component: StatsD on (``statsd``), influxdb-style tags,
    and ``kafka_default`` when a broker fixture exists."""
    env: dict[str, str] = {**statsd.env(), "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}
    try:
        bootstrap = request.getfixturevalue("kafka_bootstrap")
    except pytest.FixtureLookupError:
        bootstrap = None
    if bootstrap:
        env["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
        )
        # Asset watchers (tests/e2e/assets_watcher): a connection of their own; its group.id is
        # only a starting point for new watchers (they join no group); names carry a suffix.
        import uuid

        watcher_run = uuid.uuid4().hex[:8]
        env["AIRFLOW_KAFKA_EVENTS_E2E_WATCHER_RUN"] = watcher_run
        env["AIRFLOW_CONN_KAFKA_WATCHER"] = json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"e2e-asset-watchers-{watcher_run}",
                    "enable.auto.commit": "false",
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": "10000",
                    "topic.metadata.refresh.interval.ms": "2000",
                },
            }
        )
        if _registry_selected(request.session):
            # tests/e2e/registry: the same broker through the session's schema registry (its DAGs
            # exist only when this connection does)
            env["AIRFLOW_CONN_KAFKA_REGISTRY"] = json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": {
                        "bootstrap.servers": bootstrap,
                        "group.id": f"e2e-registry-watchers-{watcher_run}",
                        "enable.auto.commit": "false",
                        "auto.offset.reset": "earliest",
                        "topic.metadata.refresh.interval.ms": "2000",
                        "schema.registry.url": request.getfixturevalue("schema_registry_url"),
                    },
                }
            )
    return env


def _registry_selected(session: pytest.Session) -> bool:
    """Whether a selected e2e test uses the schema registry (only then does the stack get one: its
    start costs about 12 s when no integration test started it already)."""
    return any(
        item.get_closest_marker("e2e") and "schema_registry_url" in getattr(item, "fixturenames", ())
        for item in session.items
    )


@pytest.fixture(scope="session")
def migrated_airflow_home(
    tmp_path_factory: pytest.TempPathFactory, airflow_dags_folder: Path, e2e_topology: str
) -> Iterator[AirflowStack]:
    """An AirflowStack (not started, of ``e2e_topology``) whose metadata DB is migrated."""
    home = tmp_path_factory.mktemp("airflow-home")
    stack = AirflowStack(home=home, dags_folder=airflow_dags_folder, topology=e2e_topology)
    try:
        stack.migrate()
    except AirflowStackError as exc:
        pytest.fail(f"airflow db migrate failed:\n{exc}", pytrace=False)
    yield stack
    stack.stop()


@pytest.fixture(scope="session")
def airflow_stack(
    migrated_airflow_home: AirflowStack, airflow_extra_env: dict[str, str]
) -> Iterator[AirflowStack]:
    """The running Airflow deployment shared by all e2e tests of the session."""
    stack = migrated_airflow_home
    stack.extra_env.update(airflow_extra_env)
    try:
        stack.start(timeout=300.0)
    except AirflowStackError as exc:
        pytest.fail(f"Airflow stack failed to start:\n{exc}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def trigger_events_topic(kafka_admin) -> str:
    """The default trigger events topic, created once (the test brokers do not auto-create topics)."""
    from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
    from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC

    ensure_topics(kafka_admin, [TopicSpec(DEFAULT_TOPIC, partitions=3)])
    return DEFAULT_TOPIC


@pytest.fixture
def stack(airflow_stack: AirflowStack, trigger_events_topic: str) -> AirflowStack:
    """The shared Airflow deployment, with the default trigger events topic created."""
    return airflow_stack


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A directory the DAG run's task processes write their files into (any user may write)."""
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    return directory
