"""Session-wide Kafka for the tests that need one, and topic helpers.

``kafka_bootstrap`` picks, in order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set (an already running broker);
2. a Testcontainers Kafka when a Docker daemon answers;
3. the project's own :class:`~airflow_kafka_events.local_broker.LocalKafkaBroker`, started once
   for the session in a temporary state dir and stopped (by pid) at the end.

``schema_registry_url`` is ``SCHEMA_REGISTRY_URL`` when set, else a local Apicurio Registry started
once for the session.  A broker or registry that cannot be obtained is a test *failure*, never a skip.
Every fixture is lazy: ``pytest -m unit`` starts no broker and no registry.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

_BROKER_START_TIMEOUT = float(os.environ.get("KAFKA_TEST_START_TIMEOUT", "240"))
_TOPIC_TIMEOUT = 30.0
_REGISTRY_START_TIMEOUT = float(os.environ.get("SCHEMA_REGISTRY_TEST_START_TIMEOUT", "180"))


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _no_broker(reason: str) -> None:
    where = "in CI " if _in_ci() else ""
    pytest.fail(
        f"no Kafka broker for the integration tests {where}({reason}). Set KAFKA_BOOTSTRAP_SERVERS, run a "
        "Docker daemon, or install Java 17+ and Maven so the local broker can start.",
        pytrace=False,
    )


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _testcontainers_kafka() -> Iterator[str]:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # older testcontainers
        from testcontainers.kafka import KafkaContainer  # type: ignore[no-redef]

    container = KafkaContainer().with_kraft().with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    with container:
        yield container.get_bootstrap_server()


def _local_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from airflow_kafka_events.errors import BrokerError
    from airflow_kafka_events.local_broker.broker import LocalKafkaBroker

    broker = LocalKafkaBroker(state_dir=tmp_path_factory.mktemp("kafka-session"), port=None)
    try:
        status = broker.start(timeout=_BROKER_START_TIMEOUT)
    except BrokerError as exc:
        _no_broker(f"the local broker did not start: {exc}")
        raise  # pragma: no cover - pytest.fail raised already
    try:
        assert status.bootstrap_servers is not None
        yield status.bootstrap_servers
    finally:
        from airflow_kafka_events.kafka.producer import close_all_producers

        close_all_producers(timeout=10)  # deliver what tests queued while the broker is still up
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``bootstrap.servers`` of a real Kafka broker for this test session."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if configured:
        yield configured
    elif _docker_answers():
        yield from _testcontainers_kafka()
    else:
        yield from _local_kafka(tmp_path_factory)


def _no_registry(reason: str) -> None:
    where = "in CI " if _in_ci() else ""
    pytest.fail(
        f"no schema registry for the integration tests {where}({reason}). Set SCHEMA_REGISTRY_URL to a "
        "Confluent-compatible registry's URL, or install Java 21+ and Maven so the local one can start.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Confluent-compatible schema registry for this test session.

    ``SCHEMA_REGISTRY_URL`` when set; otherwise the project's own
    :class:`~airflow_kafka_events.local_broker.registry.LocalSchemaRegistry` (Apicurio Registry,
    in-memory, on 127.0.0.1), started once for the session and stopped (by pid) at the end.
    """
    configured = os.environ.get("SCHEMA_REGISTRY_URL", "").strip()
    if configured:
        yield configured
        return
    from airflow_kafka_events.local_broker.registry import LocalSchemaRegistry, RegistryRuntimeError

    registry = LocalSchemaRegistry(tmp_path_factory.mktemp("registry-session"))
    try:
        status = registry.start(timeout=_REGISTRY_START_TIMEOUT)
    except RegistryRuntimeError as exc:
        _no_registry(f"the local schema registry did not start: {exc}")
        raise  # pragma: no cover - pytest.fail raised already
    try:
        assert status.url is not None
        yield status.url
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str):
    """A confluent-kafka ``AdminClient`` bound to :func:`kafka_bootstrap`."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def new_topic(kafka_admin) -> Iterator[Callable[..., str]]:
    """Factory ``new_topic(partitions=3, prefix="t", config=None) -> name`` of a fresh topic.

    Every topic it creates is deleted at teardown.
    """
    from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics

    created: list[str] = []

    def make(partitions: int = 3, prefix: str = "t", config: dict | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        spec = TopicSpec(name, partitions=partitions, config={k: str(v) for k, v in (config or {}).items()})
        created.append(name)
        ensure_topics(kafka_admin, [spec], timeout=_TOPIC_TIMEOUT)  # waits for a leader per partition
        return name

    yield make

    if created:
        futures = kafka_admin.delete_topics(created, operation_timeout=_TOPIC_TIMEOUT)
        for future in futures.values():
            try:
                future.result(timeout=_TOPIC_TIMEOUT)
            except Exception:  # already gone, or the broker is stopping: nothing to clean up
                pass


_KINDS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test says what it needs: exactly one of the unit / integration / e2e markers."""
    unmarked = [item.nodeid for item in items if not any(item.get_closest_marker(k) for k in _KINDS)]
    if unmarked:
        raise pytest.UsageError(
            "tests without a unit/integration/e2e marker:\n  " + "\n  ".join(unmarked[:20])
        )
