"""Pure logic of the local broker: rendering, jar cache, ports, pid handling, the CLI surface.

No JVM and no network: processes that stand in for the broker are short Python processes whose
command line looks like the broker's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from airflow_kafka_events import local_broker
from airflow_kafka_events.cli import main as cli
from airflow_kafka_events.errors import AirflowKafkaEventsError, BrokerError
from airflow_kafka_events.local_broker._common import (
    DEFAULT_KAFKA_VERSION,
    FIRST_PICKED_PORT,
    BrokerStatus,
    ephemeral_port_start,
    free_ports,
    new_cluster_id,
    port_is_free,
)
from airflow_kafka_events.local_broker.broker import LocalKafkaBroker
from airflow_kafka_events.local_broker.jars import render_pom
from airflow_kafka_events.local_broker.java import parse_java_version
from airflow_kafka_events.local_broker.properties import render_server_properties

pytestmark = pytest.mark.unit

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _props(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def _dependencies(pom: str) -> dict[str, str]:
    root = ET.fromstring(pom)
    return {
        f"{d.findtext('m:groupId', namespaces=POM_NS)}:{d.findtext('m:artifactId', namespaces=POM_NS)}": (
            d.findtext("m:version", namespaces=POM_NS) or ""
        )
        for d in root.iterfind("m:dependencies/m:dependency", POM_NS)
    }


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


# --------------------------------------------------------------------------- rendering
def test_server_properties_describe_a_single_node_kraft_broker(tmp_path: Path) -> None:
    props = _props(render_server_properties(state_dir=tmp_path, port=41001, controller_port=41002))

    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:41002"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:41001,CONTROLLER://127.0.0.1:41002"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:41001"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "default.replication.factor",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"
    assert props["num.partitions"] == "3"
    assert Path(props["log.dirs"]).parent == tmp_path


def test_pom_brings_kafka_and_routes_slf4j_to_log4j2() -> None:
    pom = render_pom("4.4.0")
    deps = _dependencies(pom)

    assert "@" not in pom.split("-->", 1)[1]  # every token filled in
    assert deps["org.apache.kafka:kafka_2.13"] == "4.4.0"
    assert deps["org.apache.logging.log4j:log4j-slf4j2-impl"] == "2.25.5"
    assert deps["org.slf4j:slf4j-api"].startswith("2.0.")


def test_pom_takes_the_log4j_version_that_was_actually_fetched() -> None:
    deps = _dependencies(render_pom("9.9.9", log4j_version="2.26.1"))

    assert deps["org.apache.kafka:kafka_2.13"] == "9.9.9"
    assert deps["org.apache.logging.log4j:log4j-slf4j2-impl"] == "2.26.1"


def test_cluster_id_is_a_base64_uuid() -> None:
    ids = {new_cluster_id() for _ in range(50)}

    assert len(ids) == 50
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "11.0.2" 2019-01-15', 11),
        ("no version here", None),
    ],
)
def test_java_version_parsing(output: str, major: int | None) -> None:
    assert parse_java_version(output) == major


def test_defaults_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIRFLOW_KAFKA_EVENTS_STATE", str(tmp_path / "s"))
    monkeypatch.setenv("AIRFLOW_KAFKA_EVENTS_CACHE", str(tmp_path / "c"))

    broker = LocalKafkaBroker()

    assert broker.state_dir == tmp_path / "s"
    assert broker.libs_dir == tmp_path / "c" / f"kafka-{DEFAULT_KAFKA_VERSION}" / "libs"


def test_bad_heap_is_refused(state_dir: Path) -> None:
    with pytest.raises(BrokerError, match="heap"):
        LocalKafkaBroker(state_dir=state_dir, heap="lots")._jvm_options()


# --------------------------------------------------------------------------- ports
def test_ports_are_recorded_and_reused(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "broker.json").write_text(json.dumps({"port": 41011, "controller_port": 41012}))

    broker = LocalKafkaBroker(state_dir=state_dir)

    assert (broker.port, broker.controller_port) == (41011, 41012)
    assert broker.bootstrap_servers == "127.0.0.1:41011"
    assert LocalKafkaBroker(state_dir=state_dir, port=41013).port == 41013


def test_a_new_state_dir_gets_two_distinct_free_ports(state_dir: Path) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)

    assert broker.port != broker.controller_port
    assert not (state_dir / "broker.json").exists()  # recorded on start only


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    # a port the kernel hands to outgoing connections could be taken before the broker binds it
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(FIRST_PICKED_PORT <= p < ephemeral_port_start() and port_is_free(p) for p in ports), ports


def test_port_and_controller_port_must_differ(state_dir: Path) -> None:
    with pytest.raises(BrokerError, match="differ"):
        LocalKafkaBroker(state_dir=state_dir, port=41021, controller_port=41021)


def test_a_busy_port_fails_before_any_jvm_or_fetch(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_a, **_k):
        raise AssertionError("must not get that far")

    monkeypatch.setattr(local_broker.java, "check_java", forbidden)
    monkeypatch.setattr(LocalKafkaBroker, "ensure_jars", forbidden)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        broker = LocalKafkaBroker(state_dir=state_dir, port=busy.getsockname()[1])
        with pytest.raises(BrokerError, match="already in use"):
            broker.start(timeout=5)


# --------------------------------------------------------------------------- java / mvn
def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_broker.java, "find_java", lambda: None)

    with pytest.raises(BrokerError, match=r"java not found.*17"):
        local_broker.java.check_java()


def test_old_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = _script(tmp_path / "java", "import sys; print('openjdk version \"11.0.2\"', file=sys.stderr)\n")
    monkeypatch.setattr(local_broker.java, "find_java", lambda: str(java))

    with pytest.raises(BrokerError, match=r"Java 11.*17 or newer"):
        local_broker.java.check_java()


FAKE_MVN = """\
import os, re, sys
from pathlib import Path

here = Path(__file__).parent
with open(here / "mvn-calls", "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
pom = Path(sys.argv[sys.argv.index("-f") + 1]).read_text()
binding = re.search(r"log4j-slf4j2-impl</artifactId>\\s*<version>([^<]+)<", pom).group(1)
out = Path(next(a for a in sys.argv if a.startswith("-DoutputDirectory=")).split("=", 1)[1])
out.mkdir(parents=True, exist_ok=True)
core = os.environ.get("FAKE_LOG4J_CORE", binding)
for jar in ("kafka_2.13-4.4.0.jar", f"log4j-core-{core}.jar", f"log4j-slf4j2-impl-{binding}.jar"):
    (out / jar).write_bytes(b"PK")
"""


@pytest.fixture
def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "mvn", FAKE_MVN)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "mvn-calls"


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_jars_are_fetched_once(state_dir: Path, cache_dir: Path, fake_mvn: Path) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir, cache_dir=cache_dir)

    libs = broker.ensure_jars()
    assert broker.ensure_jars() == libs

    assert len(_calls(fake_mvn)) == 1
    call = _calls(fake_mvn)[0]
    assert "-q -B" in call and "dependency:copy-dependencies" in call and "-DincludeScope=runtime" in call
    assert (libs / "kafka_2.13-4.4.0.jar").is_file()
    marker = json.loads((libs.parent / ".fetch-complete.json").read_text())
    assert marker["jars"] == sorted(p.name for p in libs.glob("*.jar"))
    assert not list(libs.parent.glob("libs.partial-*"))


def test_a_partial_fetch_is_redone(state_dir: Path, cache_dir: Path, fake_mvn: Path) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir, cache_dir=cache_dir)
    broker.libs_dir.mkdir(parents=True)
    (broker.libs_dir / "half-written.jar").write_bytes(b"")  # no completion marker
    (broker.libs_dir.parent / "libs.partial-1").mkdir()  # an interrupted fetch

    libs = broker.ensure_jars()

    assert len(_calls(fake_mvn)) == 1
    assert not (libs / "half-written.jar").exists()
    assert not (libs.parent / "libs.partial-1").exists()


def test_a_fetch_with_a_missing_jar_is_redone(state_dir: Path, cache_dir: Path, fake_mvn: Path) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir, cache_dir=cache_dir)
    libs = broker.ensure_jars()
    (libs / "kafka_2.13-4.4.0.jar").unlink()

    broker.ensure_jars()

    assert len(_calls(fake_mvn)) == 2
    assert (libs / "kafka_2.13-4.4.0.jar").is_file()


def test_the_slf4j_binding_follows_the_fetched_log4j_core(
    state_dir: Path, cache_dir: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LOG4J_CORE", "2.26.1")

    libs = LocalKafkaBroker(state_dir=state_dir, cache_dir=cache_dir).ensure_jars()

    assert len(_calls(fake_mvn)) == 2
    assert (libs / "log4j-slf4j2-impl-2.26.1.jar").is_file()
    assert "2.26.1" in (libs.parent / "pom.xml").read_text()


def test_no_mvn_and_no_cached_jars_is_a_clear_error(
    state_dir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)

    with pytest.raises(BrokerError, match=r"mvn"):
        LocalKafkaBroker(state_dir=state_dir, cache_dir=cache_dir).ensure_jars()


def test_cached_jars_need_no_mvn(
    state_dir: Path, cache_dir: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir, cache_dir=cache_dir)
    broker.ensure_jars()
    monkeypatch.setattr(shutil, "which", lambda _name: None)

    assert broker.ensure_jars() == broker.libs_dir


# --------------------------------------------------------------------------- pid handling
LOOKALIKE = """\
import signal, sys, time
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def spawn(tmp_path: Path):
    """Start short-lived Python processes with a chosen command line; kill leftovers by pid."""
    script = tmp_path / "lookalike.py"
    script.write_text(LOOKALIKE)
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _write_pid(broker: LocalKafkaBroker, pid: int) -> None:
    broker.state_dir.mkdir(parents=True, exist_ok=True)
    broker.pid_file.write_text(f"{pid}\n")


@pytest.fixture
def no_signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    sent: list[tuple[int, int]] = []
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        if sig != 0:
            sent.append((pid, sig))
            return
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    return sent


def test_a_stale_pid_of_an_unrelated_process_is_never_signalled(
    state_dir: Path, spawn, no_signals: list[tuple[int, int]]
) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)
    unrelated = spawn()
    _write_pid(broker, unrelated.pid)

    assert broker.status() == BrokerStatus(
        running=False, pid=None, bootstrap_servers=None, state_dir=broker.state_dir, version="4.4.0"
    )
    broker.stop()

    assert no_signals == []
    assert unrelated.poll() is None
    assert not broker.pid_file.exists()  # the stale pid file is cleaned up


def test_a_kafka_process_of_another_state_dir_is_not_ours(
    state_dir: Path, tmp_path: Path, spawn, no_signals: list[tuple[int, int]]
) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)
    other = spawn("kafka.Kafka", str(tmp_path / "elsewhere" / "server.properties"))
    _write_pid(broker, other.pid)

    assert not broker.status().running
    broker.stop()

    assert no_signals == []
    assert other.poll() is None


@pytest.mark.parametrize("content", ["", "garbage", "-5", "0", "99999999"])
def test_unusable_pid_files_mean_not_running(state_dir: Path, content: str) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)
    state_dir.mkdir()
    broker.pid_file.write_text(content)

    assert not broker.status().running
    broker.stop()  # no-op


def test_stop_signals_our_broker_by_pid(state_dir: Path, spawn) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)
    ours = spawn("kafka.Kafka", str(broker.properties_file))
    _write_pid(broker, ours.pid)

    status = broker.status()
    assert status.running and status.pid == ours.pid
    assert status.bootstrap_servers == broker.bootstrap_servers

    broker.stop(timeout=10)

    assert ours.wait(timeout=10) == -signal.SIGTERM
    assert not broker.status().running
    assert not broker.pid_file.exists()


def test_stop_kills_a_broker_that_ignores_sigterm(state_dir: Path, spawn) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)
    stubborn = spawn("kafka.Kafka", str(broker.properties_file), "--ignore-term")
    _write_pid(broker, stubborn.pid)

    broker.stop(timeout=0.5)

    assert stubborn.wait(timeout=10) == -signal.SIGKILL
    assert not broker.status().running


def test_start_returns_the_running_broker_without_launching_another(
    state_dir: Path, spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = LocalKafkaBroker(state_dir=state_dir)
    ours = spawn("kafka.Kafka", str(broker.properties_file))
    _write_pid(broker, ours.pid)
    monkeypatch.setattr(LocalKafkaBroker, "launch", lambda *_a: pytest.fail("launched twice"))

    assert broker.start(timeout=5).pid == ours.pid


# --------------------------------------------------------------------------- CLI
def test_cli_status_of_a_stopped_broker_exits_3(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["kafka", "status", "--state-dir", str(state_dir)]) == 3
    assert capsys.readouterr().out.startswith("stopped")


def test_cli_stop_of_a_stopped_broker_exits_0(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["kafka", "stop", "--state-dir", str(state_dir)]) == 0
    assert capsys.readouterr().out.strip() == "not running"


def test_cli_fetch_only_fetches(
    state_dir: Path, cache_dir: Path, fake_mvn: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["kafka", "fetch", "--state-dir", str(state_dir), "--cache-dir", str(cache_dir)]

    assert cli.main(argv) == 0
    assert cli.main(argv) == 0

    assert capsys.readouterr().out.splitlines() == [f"libs={cache_dir / 'kafka-4.4.0' / 'libs'}"] * 2
    assert len(_calls(fake_mvn)) == 1
    assert not state_dir.exists()


def test_cli_errors_are_one_line_without_traceback(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = cli.main(["kafka", "start", "--state-dir", str(state_dir), "--port", str(port)])

    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "already in use" in err and "Traceback" not in err


def test_cli_without_a_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert cli.main(["kafka"]) == 2
    assert "start" in capsys.readouterr().err


def test_broker_errors_belong_to_the_package_hierarchy() -> None:
    assert issubclass(BrokerError, AirflowKafkaEventsError)


def test_the_cli_and_the_broker_import_no_airflow_module() -> None:
    code = (
        "import sys, airflow_kafka_events.cli.main, airflow_kafka_events.local_broker; "
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.unit
def test_format_command_passes_a_leading_dash_cluster_id_safely(tmp_path, monkeypatch):
    import subprocess as sp

    from airflow_kafka_events import local_broker as lb

    seen: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return sp.CompletedProcess(cmd, 0, "", "")

    broker = lb.LocalKafkaBroker(state_dir=tmp_path / "s")
    monkeypatch.setattr(sp, "run", fake_run)
    broker.cluster_id = "-abcdefghijklmnopqrstu"
    broker._format_storage("java", tmp_path)
    (cmd,) = seen
    assert "--cluster-id=-abcdefghijklmnopqrstu" in cmd


# --------------------------------------------------------------------------- cluster mode, SASL_SSL
def test_cluster_nodes_replicate_internal_topics_and_share_a_quorum(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:41102,2@127.0.0.1:41104,3@127.0.0.1:41106"
    props = _props(
        render_server_properties(
            state_dir=tmp_path, port=41103, controller_port=41104, node_id=2, voters=voters, brokers=3
        )
    )

    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:41103,CONTROLLER://127.0.0.1:41104"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "share.coordinator.state.topic.replication.factor",
        "default.replication.factor",
    ):
        assert props[key] == "3", key
    for key in (
        "min.insync.replicas",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.min.isr",
    ):
        assert props[key] == "2", key
    assert props["unclean.leader.election.enable"] == "false"


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))])
def test_replication_follows_the_cluster_size(brokers: int, expected: tuple[int, int]) -> None:
    assert local_broker.replication_for(brokers) == expected


def test_sasl_ssl_material_is_made_once_with_private_files(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from airflow_kafka_events.local_broker.security import ensure_security

    material = ensure_security(tmp_path / "security")
    again = ensure_security(tmp_path / "security")

    assert again.client == material.client and again.broker == material.broker
    assert material.client.password != material.broker.password and len(material.client.password) >= 32
    assert stat.S_IMODE((tmp_path / "security").stat().st_mode) == 0o700
    for name in ("credentials.json", "server.pem"):
        assert stat.S_IMODE((tmp_path / "security" / name).stat().st_mode) == 0o600, name
    pem = material.server_pem.read_text()
    assert "-----BEGIN PRIVATE KEY-----" in pem  # PKCS#8, as the broker's PEM keystore reads it
    load_pem_private_key(pem.encode(), password=None)
    cert = x509.load_pem_x509_certificate(pem[pem.index("-----BEGIN CERTIFICATE") :].encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    ca = x509.load_pem_x509_certificate(material.ca_file.read_bytes())
    cert.verify_directly_issued_by(ca)


def test_sasl_ssl_server_properties_keep_the_controller_plaintext(tmp_path: Path) -> None:
    from airflow_kafka_events.local_broker.security import ensure_security

    material = ensure_security(tmp_path / "security")
    text = render_server_properties(
        state_dir=tmp_path, port=41201, controller_port=41202, brokers=3, security=material
    )
    props = _props(text)

    assert props["listeners"] == "SASL_SSL://127.0.0.1:41201,CONTROLLER://127.0.0.1:41202"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["ssl.keystore.type"] == "PEM" and props["ssl.truststore.type"] == "PEM"
    assert props["ssl.keystore.location"] == str(material.server_pem)
    assert (
        f'username="{material.broker.name}"' in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    )


def test_scram_users_are_formatted_salted_never_with_the_password() -> None:
    from airflow_kafka_events.local_broker.security import ScramUser

    user = ScramUser("airflow", "pencil")
    argument = user.format_argument(salt=b"0123456789abcdef")

    assert "pencil" not in argument
    expected = hashlib.pbkdf2_hmac("sha512", b"pencil", b"0123456789abcdef", 4096)
    assert argument == (
        'SCRAM-SHA-512=[name=airflow,iterations=4096,salt="MDEyMzQ1Njc4OWFiY2RlZg==",'
        f'saltedpassword="{base64.b64encode(expected).decode()}"]'
    )


def _recorded_cluster(state_dir: Path, security: str = "sasl_ssl") -> None:
    state_dir.mkdir(parents=True)
    nodes = [{"id": i, "port": 41300 + 2 * i, "controller_port": 41301 + 2 * i} for i in (1, 2, 3)]
    cluster = {"brokers": 3, "security": security, "cluster_id": "AAAAAAAAAAAAAAAAAAAAAA", "nodes": nodes}
    (state_dir / "cluster.json").write_text(json.dumps(cluster))


def test_a_recorded_cluster_keeps_its_size_and_security(state_dir: Path) -> None:
    _recorded_cluster(state_dir)

    cluster = local_broker.LocalKafkaCluster(state_dir=state_dir)

    assert (cluster.brokers, cluster.security) == (3, "sasl_ssl")
    assert cluster.bootstrap_servers == "127.0.0.1:41302,127.0.0.1:41304,127.0.0.1:41306"
    assert cluster.voters == "1@127.0.0.1:41303,2@127.0.0.1:41305,3@127.0.0.1:41307"
    with pytest.raises(BrokerError, match="brokers=3, not 2"):
        local_broker.LocalKafkaCluster(state_dir=state_dir, brokers=2)
    with pytest.raises(BrokerError, match="security=sasl_ssl, not plaintext"):
        local_broker.LocalKafkaCluster(state_dir=state_dir, security="plaintext")


def test_a_single_node_state_dir_is_not_taken_for_a_cluster(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "broker.json").write_text(json.dumps({"port": 41011, "controller_port": 41012}))

    assert not local_broker.wants_cluster(state_dir, None, None)
    with pytest.raises(BrokerError, match="single-node broker"):
        local_broker.LocalKafkaCluster(state_dir=state_dir, brokers=3)


def test_cluster_ports_are_distinct(state_dir: Path) -> None:
    cluster = local_broker.LocalKafkaCluster(state_dir=state_dir, brokers=3)

    ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    assert [n.state_dir.name for n in cluster.nodes] == ["node-1", "node-2", "node-3"]


def test_cli_status_of_a_stopped_cluster_lists_every_node_and_masks_the_password(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_kafka_events.local_broker.security import ensure_security

    _recorded_cluster(state_dir)
    material = ensure_security(state_dir / "security")

    assert cli.main(["kafka", "status", "--state-dir", str(state_dir), "--conn-id", "kafka_secure"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("stopped brokers=3 security=sasl_ssl")
    assert len([line for line in out.splitlines() if line.startswith("node ")]) == 3
    assert material.client.password not in out
    line = next(line for line in out.splitlines() if line.startswith("AIRFLOW_CONN_KAFKA_SECURE="))
    extra = json.loads(line.split("=", 1)[1].strip("'"))["extra"]
    assert extra == {
        "bootstrap.servers": "127.0.0.1:41302,127.0.0.1:41304,127.0.0.1:41306",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "airflow",
        "sasl.password": "********",
        "ssl.ca.location": str(state_dir / "security" / "ca.pem"),
    }

    assert cli.main(["kafka", "status", "--state-dir", str(state_dir), "--show-password"]) == 3
    assert material.client.password in capsys.readouterr().out


def test_cli_stop_of_a_stopped_cluster(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _recorded_cluster(state_dir, security="plaintext")

    assert cli.main(["kafka", "stop", "--state-dir", str(state_dir)]) == 0
    assert capsys.readouterr().out.strip() == "not running"


def test_cluster_stop_signals_every_node_by_pid_and_nothing_else(state_dir: Path, spawn) -> None:
    _recorded_cluster(state_dir, security="plaintext")
    cluster = local_broker.LocalKafkaCluster(state_dir=state_dir)
    procs = []
    for node in cluster.nodes:
        proc = spawn("kafka.Kafka", str(node.properties_file))
        _write_pid(node, proc.pid)
        procs.append(proc)
    unrelated = spawn()
    _write_pid(cluster.nodes[1], unrelated.pid)  # a stale pid: never signalled

    assert [n.running for n in cluster.status().nodes] == [True, False, True]
    assert cluster.stop(timeout=10) == [procs[0].pid, procs[2].pid]

    assert procs[0].wait(timeout=10) == -signal.SIGTERM and procs[2].wait(timeout=10) == -signal.SIGTERM
    assert unrelated.poll() is None
    procs[1].kill()


def test_state_paths_are_read_only_below_state_dir_and_the_descriptor_on_the_class(tmp_path: Path) -> None:
    from unittest import mock

    from airflow_kafka_events.local_broker.broker import StatePath

    broker = LocalKafkaBroker(state_dir=tmp_path)
    assert broker.pid_file == tmp_path / "kafka.pid"
    assert isinstance(LocalKafkaBroker.pid_file, StatePath) and hasattr(LocalKafkaBroker, "log_file")
    with pytest.raises(AttributeError, match=r"LocalKafkaBroker\.pid_file is read-only: .*state_dir"):
        broker.pid_file = tmp_path / "elsewhere.pid"  # type: ignore[misc]
    assert broker.pid_file == tmp_path / "kafka.pid"
    with mock.patch.object(LocalKafkaBroker, "pid_file", tmp_path / "patched.pid"):
        assert broker.pid_file == tmp_path / "patched.pid"
    assert broker.pid_file == tmp_path / "kafka.pid"  # the descriptor is back
