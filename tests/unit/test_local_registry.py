"""Finding a Java new enough for the local schema registry (pure logic; the JVMs are stand-in scripts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_kafka_events.local_broker import registry
from airflow_kafka_events.local_broker.registry import (
    ENV_REGISTRY_JAVA_HOME,
    RegistryRuntimeError,
    find_registry_java,
    registry_app_dir,
    registry_complete,
)

pytestmark = pytest.mark.unit


def _fake_jdk(root: Path, name: str, version: str) -> Path:
    java = root / name / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-01-01' >&2\n")
    java.chmod(0o755)
    return java


@pytest.fixture
def no_system_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv(ENV_REGISTRY_JAVA_HOME, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.setattr(registry, "_JDK_GLOBS", (str(tmp_path / "jvm" / "*" / "bin" / "java"),))
    return tmp_path / "jvm"


def test_a_java_21_among_the_installed_jdks_is_chosen_over_an_older_java_home(
    no_system_java: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _fake_jdk(no_system_java, "openjdk-17", "17.0.15")
    new = _fake_jdk(no_system_java, "temurin-25", "25.0.1")
    monkeypatch.setenv("JAVA_HOME", str(old.parent.parent))
    assert find_registry_java() == str(new)


def test_the_registry_java_home_wins(no_system_java: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_jdk(no_system_java, "temurin-25", "25.0.1")
    chosen = _fake_jdk(no_system_java.parent / "elsewhere", "jdk-21", "21.0.4")
    monkeypatch.setenv(ENV_REGISTRY_JAVA_HOME, str(chosen.parent.parent))
    assert find_registry_java() == str(chosen)


def test_no_java_21_is_an_error_naming_what_was_found_and_the_fix(no_system_java: Path) -> None:
    old = _fake_jdk(no_system_java, "openjdk-17", "17.0.15")
    with pytest.raises(RegistryRuntimeError) as error:
        find_registry_java()
    message = str(error.value)
    assert f"{old} (Java 17)" in message
    assert "Java 21 or newer" in message
    assert ENV_REGISTRY_JAVA_HOME in message


def test_a_cache_without_its_marker_is_not_complete(tmp_path: Path) -> None:
    app = registry_app_dir(tmp_path, "3.3.3")
    app.mkdir(parents=True)
    (app / "quarkus-run.jar").write_bytes(b"")
    assert not registry_complete(app, "3.3.3")
    (app.parent / ".fetch-complete.json").write_text('{"version": "3.3.3"}')
    assert registry_complete(app, "3.3.3")
    assert not registry_complete(app, "3.3.4")
    assert os.fspath(app).endswith("apicurio-registry-3.3.3/app")
