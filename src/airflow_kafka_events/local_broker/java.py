"""Finding a Java runtime new enough for the broker."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from airflow_kafka_events.errors import BrokerError
from airflow_kafka_events.local_broker._common import DEFAULT_KAFKA_VERSION

MIN_JAVA_VERSION = 17


def parse_java_version(output: str) -> int | None:
    """Major version from ``java -version`` output (``"1.8.0_x"`` -> 8, ``"17.0.15"`` -> 17)."""
    match = re.search(r'version "([^"]+)"', output)
    if not match:
        return None
    parts = re.split(r"[._+-]", match.group(1))
    try:
        major = int(parts[0])
        if major == 1 and len(parts) > 1:
            major = int(parts[1])
    except ValueError:
        return None
    return major


def find_java() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def check_java() -> str:
    """Path of a ``java`` of version 17 or newer; :class:`BrokerError` otherwise."""
    java = find_java()
    if java is None:
        raise BrokerError(
            f"java not found: the local Kafka broker needs Java {MIN_JAVA_VERSION}+ "
            "(install a JDK/JRE 17 or newer, or set JAVA_HOME)"
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BrokerError(f"cannot run {java} -version: {exc}") from exc
    major = parse_java_version(out.stderr + out.stdout)
    if major is None:
        raise BrokerError(f"cannot tell the version of {java}: {(out.stderr or out.stdout).strip()[:200]}")
    if major < MIN_JAVA_VERSION:
        raise BrokerError(
            f"{java} is Java {major}; Kafka {DEFAULT_KAFKA_VERSION.split('.')[0]}.x needs Java "
            f"{MIN_JAVA_VERSION} or newer (set JAVA_HOME to a newer JDK)"
        )
    return java
