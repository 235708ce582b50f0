"""Structure of the local compose stack in ``docker/``.

No container engine is needed: the compose file and the Dockerfile are parsed and checked
for what the stack relies on (KRaft settings, topics, health checks, start-up order, the
shared Airflow configuration, the image build).

``docker compose config`` is not run: the test environment has no Compose client (the
``docker`` CLI here has no ``compose`` plugin).  What it would validate without an engine is
checked directly instead: the file is YAML whose anchors resolve, every ``${VAR}``
interpolation is well formed and has a default (the stack starts without an ``.env`` file),
``$$`` escapes the rest, ``depends_on`` targets exist and every named volume a service mounts
is declared.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
DOCKERFILE = DOCKER_DIR / "Dockerfile"

KAFKA_INTERNAL = "kafka:9092"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
LONG_RUNNING_AIRFLOW = tuple(s for s in AIRFLOW_SERVICES if s != "airflow-init")
# Services started by a plain ``docker compose up`` that must keep running.
LONG_RUNNING = ("kafka", "postgres", *LONG_RUNNING_AIRFLOW)
ONE_SHOT = ("airflow-init", "kafka-init")
REQUIRED_SERVICES = (*LONG_RUNNING, *ONE_SHOT)

EXPECTED_TOPICS = {
    "airflow.trigger-events": 3,
    "airflow.asset-events": 3,
    "airflow.kafka-events.dlq": 1,
    "airflow.kafka-events.watcher-stops": 3,
    "airflow.kafka-events.stream-index": 3,
}

COMMON_ENV = {
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://airflow:airflow@postgres/airflow",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://airflow-apiserver:8080/execution/",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
    "AIRFLOW__CORE__AUTH_MANAGER": (
        "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    ),
}
SHARED_SECRETS = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY")

AIRFLOW_COMMANDS = {
    "airflow-init": ["airflow", "db", "migrate"],
    "airflow-apiserver": ["airflow", "api-server"],
    "airflow-scheduler": ["airflow", "scheduler"],
    "airflow-dag-processor": ["airflow", "dag-processor"],
    "airflow-triggerer": ["airflow", "triggerer"],
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    with COMPOSE_FILE.open(encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data, dict), "compose.yaml must be a mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    svcs = compose.get("services")
    assert isinstance(svcs, dict) and svcs, "compose.yaml has no services"
    return svcs


@pytest.fixture(scope="module")
def dockerfile_instructions() -> list[tuple[str, str]]:
    return _dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with comments dropped and continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            keyword, _, args = full.partition(" ")
            instructions.append((keyword.upper(), args.strip()))
    if pending.strip():
        keyword, _, args = pending.strip().partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    return instructions


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) for item in env)
        return {k: v for k, v in pairs}
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def _as_argv(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def _healthcheck_test(service: dict[str, Any]) -> list[str]:
    test = (service.get("healthcheck") or {}).get("test")
    if isinstance(test, str):
        return ["CMD-SHELL", test]
    return [str(t) for t in test or []]


def _volume_targets(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source for every volume of a service (short or long syntax)."""
    targets: dict[str, str] = {}
    for vol in service.get("volumes") or []:
        if isinstance(vol, str):
            parts = vol.split(":")
            if len(parts) == 1:
                targets[parts[0]] = ""
            else:
                targets[parts[1]] = parts[0]
        else:
            targets[vol["target"]] = vol.get("source", "")
    return targets


def _default_of(value: str) -> str:
    """Resolve ``${VAR:-default}`` interpolations to their defaults."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}", r"\1", value)


def _kafka_init_script(services: dict[str, dict[str, Any]]) -> str:
    svc = services["kafka-init"]
    parts = _as_argv(svc.get("entrypoint")) + _as_argv(svc.get("command"))
    return "\n".join(parts).replace("$$", "$")


# --------------------------------------------------------------------------------------------
# Services, health checks, start-up order
# --------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_required_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = [name for name in REQUIRED_SERVICES if name not in services]
    assert not missing, f"missing services: {missing}"


@pytest.mark.unit
@pytest.mark.parametrize("name", LONG_RUNNING)
def test_long_running_service_has_healthcheck(services: dict[str, dict[str, Any]], name: str) -> None:
    test = _healthcheck_test(services[name])
    assert len(test) >= 2, f"{name}: healthcheck.test is missing or empty"
    assert test[0] in {"CMD", "CMD-SHELL"}, f"{name}: healthcheck.test must start with CMD or CMD-SHELL"
    assert services[name].get("restart") not in (None, "no"), f"{name}: should restart"
    assert "profiles" not in services[name], f"{name}: must start with a plain `docker compose up`"


@pytest.mark.unit
@pytest.mark.parametrize("name", ONE_SHOT)
def test_one_shot_services_do_not_restart(services: dict[str, dict[str, Any]], name: str) -> None:
    assert services[name].get("restart") == "no", f'{name}: a one-shot service needs restart: "no"'


@pytest.mark.unit
def test_kafka_healthcheck_exercises_the_broker(services: dict[str, dict[str, Any]]) -> None:
    test = " ".join(_healthcheck_test(services["kafka"]))
    assert "/opt/kafka/bin/kafka-" in test, "kafka healthcheck must run a Kafka client tool"
    assert "--bootstrap-server" in test, "kafka healthcheck must talk to the broker"


@pytest.mark.unit
def test_postgres_healthcheck_uses_pg_isready(services: dict[str, dict[str, Any]]) -> None:
    # the major version the e2e tests run on (Debian's postgresql 15, tests/harness/postgres.py)
    assert services["postgres"]["image"].split(":")[1].split(".")[0] == "15"
    assert "pg_isready" in " ".join(_healthcheck_test(services["postgres"]))


@pytest.mark.unit
def test_apiserver_healthcheck_and_port(services: dict[str, dict[str, Any]]) -> None:
    api = services["airflow-apiserver"]
    assert "/api/v2/monitor/health" in " ".join(_healthcheck_test(api))
    published = [_default_of(str(p)) for p in api.get("ports") or []]
    assert any(p.split(":")[-1] == "8080" for p in published), f"port 8080 not published: {published}"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "job_type"),
    [("airflow-dag-processor", "DagProcessorJob"), ("airflow-triggerer", "TriggererJob")],
)
def test_job_healthchecks(services: dict[str, dict[str, Any]], name: str, job_type: str) -> None:
    test = " ".join(_healthcheck_test(services[name]))
    assert "airflow jobs check" in test and f"--job-type {job_type}" in test


@pytest.mark.unit
@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_services_wait_for_healthy_kafka_and_postgres(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    deps = _depends_on(services[name])
    assert deps.get("postgres") == "service_healthy", f"{name}: {deps}"
    assert deps.get("kafka") == "service_healthy", f"{name}: {deps}"


@pytest.mark.unit
@pytest.mark.parametrize("name", LONG_RUNNING_AIRFLOW)
def test_airflow_services_wait_for_init(services: dict[str, dict[str, Any]], name: str) -> None:
    deps = _depends_on(services[name])
    assert deps.get("airflow-init") == "service_completed_successfully", f"{name}: {deps}"
    # Topic auto-creation is off, so producers need the topics before anything runs.
    assert deps.get("kafka-init") == "service_completed_successfully", f"{name}: {deps}"


@pytest.mark.unit
def test_kafka_init_waits_for_healthy_kafka(services: dict[str, dict[str, Any]]) -> None:
    assert _depends_on(services["kafka-init"]).get("kafka") == "service_healthy"


@pytest.mark.unit
def test_depends_on_targets_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for dep in _depends_on(svc):
            assert dep in services, f"{name} depends on unknown service {dep!r}"


# --------------------------------------------------------------------------------------------
# Airflow configuration
# --------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_airflow_common_anchor(compose: dict[str, Any]) -> None:
    common = compose.get("x-airflow-common")
    assert isinstance(common, dict), "x-airflow-common extension is missing"
    env = _env(common)
    for key, value in COMMON_ENV.items():
        assert env.get(key) == value, f"x-airflow-common: {key}={env.get(key)!r}, expected {value!r}"
    users = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "")
    pairs = dict(u.split(":", 1) for u in users.split(",") if u)
    assert pairs.get("admin") == "admin", users
    assert "bridge" in pairs, users
    for key in SHARED_SECRETS:
        assert _default_of(env.get(key, "")), f"{key} needs a value (or a default) in x-airflow-common"


@pytest.mark.unit
@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_services_share_common_env(
    compose: dict[str, Any], services: dict[str, dict[str, Any]], name: str
) -> None:
    common_env = _env(compose["x-airflow-common"])
    env = _env(services[name])
    differing = {k for k, v in common_env.items() if env.get(k) != v}
    assert not differing, f"{name} does not share the common settings for: {sorted(differing)}"
    assert services[name].get("image") == compose["x-airflow-common"].get("image"), name


@pytest.mark.unit
def test_kafka_connection_points_at_internal_listener(compose: dict[str, Any]) -> None:
    raw = _env(compose["x-airflow-common"]).get("AIRFLOW_CONN_KAFKA_DEFAULT")
    assert raw, "AIRFLOW_CONN_KAFKA_DEFAULT is not set"
    conn = json.loads(raw)
    assert conn["conn_type"] == "kafka"
    extra = conn["extra"]
    if isinstance(extra, str):
        extra = json.loads(extra)
    assert extra["bootstrap.servers"] == KAFKA_INTERNAL


@pytest.mark.unit
@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_example_dags_are_mounted(services: dict[str, dict[str, Any]], name: str) -> None:
    targets = _volume_targets(services[name])
    assert "/opt/airflow/dags" in targets, f"{name}: DAG folder not mounted"
    source = (COMPOSE_FILE.parent / targets["/opt/airflow/dags"]).resolve()
    assert source == REPO_ROOT / "examples" / "dags"


@pytest.mark.unit
@pytest.mark.parametrize("name", AIRFLOW_SERVICES)
def test_airflow_service_commands(services: dict[str, dict[str, Any]], name: str) -> None:
    assert _as_argv(services[name].get("command")) == AIRFLOW_COMMANDS[name]


# --------------------------------------------------------------------------------------------
# Airflow image
# --------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_image_is_built_from_the_repository_root(compose: dict[str, Any]) -> None:
    build = compose["x-airflow-common"].get("build")
    assert isinstance(build, dict), "x-airflow-common must build the image"
    context = (COMPOSE_FILE.parent / build["context"]).resolve()
    assert context == REPO_ROOT
    assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE


@pytest.mark.unit
def test_dockerfile_is_based_on_airflow_3_3(dockerfile_instructions: list[tuple[str, str]]) -> None:
    froms = [args for keyword, args in dockerfile_instructions if keyword == "FROM"]
    assert len(froms) == 1, f"expected one FROM, got {froms}"
    assert re.fullmatch(r"apache/airflow:3\.3\.\d+(-python3\.\d+)?", froms[0]), froms[0]


@pytest.mark.unit
def test_dockerfile_installs_the_package(dockerfile_instructions: list[tuple[str, str]]) -> None:
    copied: set[str] = set()
    destinations: list[str] = []
    for keyword, args in dockerfile_instructions:
        if keyword != "COPY":
            continue
        argv = [a for a in shlex.split(args) if not a.startswith("--")]
        copied.update(a.rstrip("/") for a in argv[:-1])
        destinations.append(argv[-1].rstrip("/"))
    for needed in ("pyproject.toml", "README.md", "src"):
        assert needed in copied, f"Dockerfile does not copy {needed}"
        assert (REPO_ROOT / needed).exists(), f"{needed} is missing from the build context"

    runs = [args for keyword, args in dockerfile_instructions if keyword == "RUN"]
    installs = [r for r in runs if re.search(r"\bpip install\b", r)]
    assert installs, "Dockerfile never runs pip install"
    project_dir = min(destinations, key=len)
    assert any(project_dir in r.split() for r in installs), f"pip install does not install {project_dir}"


@pytest.mark.unit
def test_dockerignore_keeps_the_copied_files() -> None:
    ignore = DOCKER_DIR / "Dockerfile.dockerignore"
    assert ignore.exists(), "docker/Dockerfile.dockerignore keeps the build context small"
    lines = [ln.strip() for ln in ignore.read_text(encoding="utf-8").splitlines()]
    patterns = [ln for ln in lines if ln and not ln.startswith("#")]
    if "*" in patterns:
        for needed in ("pyproject.toml", "README.md", "src"):
            assert f"!{needed}" in patterns, f"{needed} is excluded from the build context"


# --------------------------------------------------------------------------------------------
# Kafka
# --------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_kafka_runs_kraft_single_node(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    kafka = services["kafka"]
    image = _default_of(kafka["image"])
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", image), image

    env = _env(kafka)
    assert env["KAFKA_PROCESS_ROLES"].replace(" ", "") == "broker,controller"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    node_id = env["KAFKA_NODE_ID"]
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node_id}@kafka:")
    assert f"{controller}://" in env["KAFKA_LISTENERS"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].rsplit(":", 1)[1] in env["KAFKA_LISTENERS"]

    advertised = _default_of(env["KAFKA_ADVERTISED_LISTENERS"]).split(",")
    assert any(a.endswith(f"://{KAFKA_INTERNAL}") for a in advertised), advertised
    assert any("://localhost:" in a for a in advertised), f"no listener for the host: {advertised}"
    protocol_map = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    for listener in [*advertised, *env["KAFKA_LISTENERS"].split(",")]:
        assert listener.split("://")[0] in protocol_map, listener

    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key

    data_dir = env.get("KAFKA_LOG_DIRS", "")
    volume = _volume_targets(kafka).get(data_dir)
    assert volume, f"no volume mounted at the log dir {data_dir!r}"
    assert volume in (compose.get("volumes") or {}), f"{volume!r} is not a named volume"


@pytest.mark.unit
def test_kafka_init_creates_every_project_topic(services: dict[str, dict[str, Any]]) -> None:
    script = _kafka_init_script(services)
    created: dict[str, int] = {}
    for line in script.splitlines():
        if "--topic" not in line:
            continue
        assert "kafka-topics" in line or "$topics" in line, line
        assert "--create" in line and "--if-not-exists" in line, line
        assert f"--bootstrap-server {KAFKA_INTERNAL}" in line, line
        topic = re.search(r"--topic\s+(\S+)", line)
        partitions = re.search(r"--partitions\s+(\d+)", line)
        assert topic and partitions, line
        created[topic.group(1)] = int(partitions.group(1))
    assert created == EXPECTED_TOPICS
    (index,) = [line for line in script.splitlines() if "--topic airflow.kafka-events.stream-index" in line]
    assert "--config cleanup.policy=compact,delete" in index and "--config retention.ms=604800000" in index


@pytest.mark.unit
def test_provider_default_topics_are_created(services: dict[str, dict[str, Any]]) -> None:
    from airflow_kafka_events.provider import get_provider_info

    options = get_provider_info()["config"]["kafka_events"]["options"]
    defaults = {o["default"] for name, o in options.items() if name.endswith("_topic")}
    script = _kafka_init_script(services)
    created = set(re.findall(r"--topic\s+(\S+)", script))
    assert defaults <= created, f"default topics not created by kafka-init: {sorted(defaults - created)}"


@pytest.mark.unit
def test_asset_bridge_is_opt_in(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    bridge = services.get("asset-bridge")
    assert bridge is not None, "the compose stack ships the asset-bridge service (profile 'bridge')"
    assert "bridge" in bridge.get("profiles", [])
    assert _as_argv(bridge.get("command")) == ["airflow-kafka-events", "bridge"]
    # The image's /entrypoint would run the command as `airflow airflow-kafka-events ...`.
    assert "/entrypoint" not in _as_argv(bridge.get("entrypoint")), "bridge must bypass /entrypoint"
    assert bridge.get("image") == compose["x-airflow-common"].get("image")


@pytest.mark.unit
def test_asset_bridge_reaches_the_api_with_the_op_users_password_file(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    env = services["asset-bridge"]["environment"]
    assert env["AIRFLOW_KAFKA_EVENTS_BRIDGE_API_URL"] == "http://airflow-apiserver:8080"
    assert env["AIRFLOW_KAFKA_EVENTS_BRIDGE_USERNAME"] == "bridge"
    assert "bridge:op" in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    # the api-server writes the generated passwords where the bridge reads them: one shared volume
    passwords = env["AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE"]
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == passwords
    for name in ("asset-bridge", "airflow-apiserver"):
        mounts = [str(v) for v in services[name].get("volumes", [])]
        assert any(m.startswith("airflow-auth:") and passwords.startswith(m.split(":")[1]) for m in mounts)
    assert "airflow-auth" in compose["volumes"]


# --------------------------------------------------------------------------------------------
# What ``docker compose config`` would validate (no Compose client here; see the module doc)
# --------------------------------------------------------------------------------------------
_INTERPOLATION = re.compile(r"\$\$|\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@pytest.mark.unit
def test_every_interpolation_is_well_formed_and_has_a_default() -> None:
    text = COMPOSE_FILE.read_text()
    found = []
    for match in _INTERPOLATION.finditer(text):
        if match.group(0) == "$$":
            continue  # an escaped dollar, passed to the container's shell
        assert match.group(2) is None, f"bare ${match.group(2)}: write ${{{match.group(2)}:-default}}"
        parts = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?-)?(.*)", match.group(1), re.DOTALL)
        assert parts is not None, f"${{{match.group(1)}}} is not a variable name"
        name, sep, _default = parts.groups()
        assert sep, f"${{{match.group(1)}}} has no default: the stack must start without an .env file"
        found.append(name)
    assert "KAFKA_HOST_PORT" in found and "AIRFLOW_API_PORT" in found


@pytest.mark.unit
def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for source in _volume_targets(service).values():
            is_path = source.startswith((".", "/", "~", "$")) or not source
            assert is_path or source in declared, f"{name}: volume {source!r} is not declared"
