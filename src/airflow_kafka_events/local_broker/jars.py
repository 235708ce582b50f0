"""The broker's runtime classpath, fetched once from Maven Central and cached."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker._common import (
    DEFAULT_KAFKA_VERSION,
    LOG_TAIL_LINES,
    file_lock,
    package_file,
    read_state_file,
    write_atomic,
    write_state_file,
)

log = logging.getLogger(__name__)

SCALA_BINARY_VERSION = "2.13"
SLF4J_VERSION = "2.0.17"
DEPENDENCY_PLUGIN_VERSION = "3.8.1"
#: log4j version that arrives with each known Kafka release; the SLF4J binding must match it.
#: For other releases the version actually fetched is detected and the fetch is redone once.
KNOWN_LOG4J_VERSIONS: Mapping[str, str] = {"4.4.0": "2.25.5"}
FALLBACK_LOG4J_VERSION = "2.25.5"
FETCH_MARKER = ".fetch-complete.json"
_FETCH_TIMEOUT = 1800.0


def render_pom(
    version: str = DEFAULT_KAFKA_VERSION,
    *,
    log4j_version: str | None = None,
    slf4j_version: str = SLF4J_VERSION,
) -> str:
    """The POM whose runtime dependencies are the broker's classpath (plus the SLF4J binding)."""
    tokens = {
        "@kafka.version@": version,
        "@scala.binary.version@": SCALA_BINARY_VERSION,
        "@log4j.version@": log4j_version or KNOWN_LOG4J_VERSIONS.get(version, FALLBACK_LOG4J_VERSION),
        "@slf4j.version@": slf4j_version,
        "@dependency.plugin.version@": DEPENDENCY_PLUGIN_VERSION,
    }
    text = package_file("pom.xml")
    for token, value in tokens.items():
        text = text.replace(token, value)
    return text


def _jar_version(libs: Path, artifact: str) -> str | None:
    for jar in libs.glob(f"{artifact}-*.jar"):
        rest = jar.name[len(artifact) + 1 : -len(".jar")]
        if re.fullmatch(r"\d[\w.\-]*", rest):
            return rest
    return None


def jars_complete(libs_dir: Path, version: str) -> bool:
    data = read_state_file(libs_dir.parent / FETCH_MARKER)
    jars = data.get("jars")
    if data.get("version") != version or not isinstance(jars, list) or not jars:
        return False
    return all((libs_dir / str(name)).is_file() for name in jars)


def ensure_jars(libs_dir: Path, version: str) -> Path:
    """Fetch Kafka ``version``'s jars into ``libs_dir`` once (under a lock); return ``libs_dir``."""
    version_dir = libs_dir.parent
    with file_lock(version_dir / ".lock"):
        if jars_complete(libs_dir, version):
            return libs_dir
        mvn = clear_for_fetch(version_dir, libs_dir, f"the Kafka {version} jars", BrokerError)
        started = time.monotonic()
        log4j_version = KNOWN_LOG4J_VERSIONS.get(version, FALLBACK_LOG4J_VERSION)
        for _attempt in range(2):
            tmp = version_dir / f"libs.partial-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            _run_mvn(mvn, version, version_dir, tmp, log4j_version)
            core = _jar_version(tmp, "log4j-core")
            if core is None or core == log4j_version:
                break
            log.info("Kafka %s brings log4j-core %s; fetching the matching binding", version, core)
            log4j_version = core
        main_jar = tmp / f"kafka_{SCALA_BINARY_VERSION}-{version}.jar"
        if not main_jar.is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise BrokerError(f"the fetch of Kafka {version} did not bring {main_jar.name}")
        os.replace(tmp, libs_dir)
        jars = sorted(p.name for p in libs_dir.glob("*.jar"))
        marker = {"version": version, "log4j_version": log4j_version, "jars": jars}
        write_state_file(version_dir / FETCH_MARKER, marker)
        log.info("fetched %d jars of Kafka %s in %.1fs", len(jars), version, time.monotonic() - started)
        return libs_dir


def _run_mvn(mvn: str, version: str, version_dir: Path, output: Path, log4j_version: str) -> None:
    pom = version_dir / "pom.xml"
    write_atomic(pom, render_pom(version, log4j_version=log4j_version))
    args = [
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={output}",
    ]
    run_mvn(mvn, args, version_dir, output, f"the Kafka {version} jars", BrokerError)


def clear_for_fetch(version_dir: Path, target: Path, what: str, error: type[BrokerError]) -> str:
    """Maven's ``mvn``, once what an earlier fetch of ``what`` into ``target`` left is removed;
    ``error`` when Maven is not installed."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise error(
            f"{what} is not cached in {target} and mvn (Apache Maven) is not installed: "
            "install Maven, or copy a fetched cache there"
        )
    (version_dir / FETCH_MARKER).unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    for leftover in version_dir.glob("*.partial-*"):  # from an interrupted fetch
        shutil.rmtree(leftover, ignore_errors=True)
    return mvn


def run_mvn(mvn: str, args: list[str], cwd: Path, output: Path, what: str, error: type[BrokerError]) -> None:
    """Fetch ``what`` into ``output`` with Maven (``mvn -q -B`` and ``args``, in ``cwd``); ``error``
    when it fails, with the end of Maven's output."""
    log.info("fetching %s with Maven into %s", what, output)
    try:
        proc = subprocess.run(
            [mvn, "-q", "-B", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_FETCH_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise error(f"fetching {what} took over {_FETCH_TIMEOUT:.0f}s") from exc
    except OSError as exc:
        raise error(f"cannot run {mvn}: {exc}") from exc
    if proc.returncode != 0:
        shutil.rmtree(output, ignore_errors=True)
        detail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
        raise error(f"fetching {what} with Maven failed\n{detail}")
