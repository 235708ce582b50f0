"""BridgeConfig: sources and precedence, password files, validation; RetryPolicy; the CLI group."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kafka_events.bridge.config import (
    DEFAULT_DLQ_TOPIC,
    DEFAULT_GROUP,
    DEFAULT_TOPIC,
    BridgeConfig,
    parse_allow_rules,
    read_password_file,
    read_signing_keys,
)
from airflow_kafka_events.cli.main import build_parser
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.retry import RetryPolicy

pytestmark = pytest.mark.unit

BASE_ENV = {
    "KAFKA_BOOTSTRAP_SERVERS": "env-kafka:9092",
    "AIRFLOW_KAFKA_EVENTS_BRIDGE_API_URL": "http://env-airflow:8080/",
    "AIRFLOW_KAFKA_EVENTS_BRIDGE_USERNAME": "env-user",
    "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD": "env-password",
}


def test_environment_only_with_defaults():
    config = BridgeConfig.from_sources(environ=BASE_ENV)
    assert config.kafka.bootstrap_servers == "env-kafka:9092"
    assert config.api_url == "http://env-airflow:8080"
    assert (config.username, config.password) == ("env-user", "env-password")
    assert (config.topic, config.group_id, config.dlq_topic) == (
        DEFAULT_TOPIC,
        DEFAULT_GROUP,
        DEFAULT_DLQ_TOPIC,
    )
    assert config.assets == () and config.allowlist is None and config.signing_keys == ()
    assert config.max_causation_depth == 8
    assert not config.fault_after_post


def test_flags_win_over_the_environment(tmp_path: Path):
    secret = tmp_path / "pw"
    secret.write_text("file-password\n")
    env = {
        **BASE_ENV,
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_TOPIC": "env-topic",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_GROUP": "env-group",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_DLQ_TOPIC": "env-dlq",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_ASSETS": "env-*",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_ALLOW": '[{"source_kinds": ["external"]}]',
    }
    config = BridgeConfig.from_sources(
        api_url="https://flag-airflow/prefix",
        username="flag-user",
        password_file=secret,
        topic="flag-topic",
        group_id="flag-group",
        dlq_topic="flag-dlq",
        assets=["s3://a/*", "b,c"],
        allow=['{"source_kinds": ["task"], "dag_ids": ["etl_*"]}', '[{"producers": ["ci"]}]'],
        bootstrap_servers="flag-kafka:9092",
        environ=env,
    )
    assert config.api_url == "https://flag-airflow/prefix"
    assert (config.username, config.password) == ("flag-user", "file-password")
    assert (config.topic, config.group_id, config.dlq_topic) == ("flag-topic", "flag-group", "flag-dlq")
    assert config.assets == ("s3://a/*", "b", "c")
    assert config.allowlist is not None
    assert config.allowlist.to_config() == [
        {"source_kinds": ["task"], "dag_ids": ["etl_*"]},
        {"producers": ["ci"]},
    ]
    assert config.kafka.bootstrap_servers == "flag-kafka:9092"
    env_only = BridgeConfig.from_sources(environ=env)
    assert (env_only.topic, env_only.group_id, env_only.dlq_topic) == ("env-topic", "env-group", "env-dlq")
    assert env_only.assets == ("env-*",)
    assert env_only.allowlist is not None
    assert env_only.allowlist.to_config() == [{"source_kinds": ["external"]}]


def test_topic_falls_back_to_the_providers_topic_option():
    env = {**BASE_ENV, "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC": "provider-topic"}
    assert BridgeConfig.from_sources(environ=env).topic == "provider-topic"


def test_password_file_from_the_environment_wins_over_the_password_variable(tmp_path: Path):
    secret = tmp_path / "pw"
    secret.write_text("from-file")
    env = {**BASE_ENV, "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE": str(secret)}
    assert BridgeConfig.from_sources(environ=env).password == "from-file"


def test_password_file_forms(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.write_text("  spaces kept  \r\n")
    assert read_password_file(plain, "bridge") == "  spaces kept  "
    users = tmp_path / "simple_auth_manager_passwords.json"
    users.write_text(json.dumps({"admin": "a-pw", "bridge": "b-pw"}))
    assert read_password_file(users, "bridge") == "b-pw"
    with pytest.raises(ConfigurationError, match="without a password for user 'nobody'"):
        read_password_file(users, "nobody")
    brace = tmp_path / "brace"
    brace.write_text("{not-json")
    assert read_password_file(brace, "bridge") == "{not-json"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigurationError, match="empty"):
        read_password_file(empty, "bridge")
    with pytest.raises(ConfigurationError, match="cannot read"):
        read_password_file(tmp_path / "missing", "bridge")


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("AIRFLOW_KAFKA_EVENTS_BRIDGE_API_URL", "--api-url"),
        ("AIRFLOW_KAFKA_EVENTS_BRIDGE_USERNAME", "--username"),
        ("AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD", "--password-file"),
        ("KAFKA_BOOTSTRAP_SERVERS", "bootstrap.servers"),
    ],
)
def test_required_settings(missing, message):
    env = {k: v for k, v in BASE_ENV.items() if k != missing}
    with pytest.raises(ConfigurationError, match=message):
        BridgeConfig.from_sources(environ=env)


@pytest.mark.parametrize(
    "url",
    ["ftp://x", "airflow:8080", "http://", "http://user:pw@host", "http://host/?a=1", "http://host/#f"],
)
def test_bad_api_urls(url):
    with pytest.raises(ConfigurationError):
        BridgeConfig.from_sources(api_url=url, environ=BASE_ENV)


def test_bad_api_url_message_does_not_show_credentials():
    with pytest.raises(ConfigurationError) as info:
        BridgeConfig.from_sources(api_url="http://user:hunter2@host", environ=BASE_ENV)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "options",
    [
        {"request_timeout": 0},
        {"request_timeout": float("inf")},
        {"recheck_records": -1},
        {"recheck_records": 1.5},
        {"recent_events_limit": 0},
        {"batch_size": 0},
        {"batch_size": True},
        {"seen_keys_max": 0},
        {"poll_timeout": -1},
        {"dlq_topic": DEFAULT_TOPIC},
        {"max_causation_depth": -1},
        {"signing_keys": (b"",)},
        {"allowlist": [{"source_kinds": ["task"]}]},
        {"group_id": " "},
        {"retry": "fast"},
    ],
)
def test_invalid_values(options):
    valid = BridgeConfig.from_sources(environ=BASE_ENV)
    with pytest.raises(ConfigurationError):
        dataclasses.replace(valid, **options)


def test_password_is_not_in_repr_or_description():
    config = BridgeConfig.from_sources(environ=BASE_ENV)
    assert "env-password" not in repr(config)
    assert "env-password" not in json.dumps(config.describe())


def test_consumer_config_disables_auto_commit_and_uses_the_group():
    config = BridgeConfig.from_sources(environ=BASE_ENV, group_id="g")
    consumer = config.consumer_config()
    assert consumer["group.id"] == "g"
    assert consumer["enable.auto.commit"] is False
    assert consumer["auto.offset.reset"] == "earliest"


def test_auto_commit_is_refused():
    config = BridgeConfig.from_sources(environ=BASE_ENV, overrides={"enable.auto.commit": "true"})
    with pytest.raises(ConfigurationError, match=r"auto\.commit"):
        config.consumer_config()


def test_asset_patterns_match_uri_or_name():
    config = BridgeConfig.from_sources(environ=BASE_ENV, assets=["s3://lake/*", "orders_*"])
    assert config.handles("s3://lake/orders", "x")
    assert config.handles("file://x", "orders_daily")
    assert not config.handles("s3://other/orders", "customers")
    assert BridgeConfig.from_sources(environ=BASE_ENV).handles("anything", "at all")


@pytest.mark.parametrize(
    "rule",
    ["not json", '{"source_kinds": ["robot"]}', '{"colour": ["red"]}', "{}", '"task"'],
)
def test_invalid_allow_rules(rule):
    with pytest.raises(ConfigurationError):
        BridgeConfig.from_sources(environ=BASE_ENV, allow=[rule])


def test_allow_rules_parse():
    allowlist = parse_allow_rules([{"source_kinds": ["dag_callback"]}, '{"producers": ["a*"]}'])
    assert allowlist is not None and len(allowlist.rules) == 2
    assert parse_allow_rules([]) is None


def test_signing_keys_from_files(tmp_path: Path):
    current = tmp_path / "current"
    current.write_text("key-2026\n\nkey-2025\r\n")
    extra = tmp_path / "extra"
    extra.write_text("  spaced key  ")
    assert read_signing_keys([current, extra]) == (b"key-2026", b"key-2025", b"  spaced key  ")
    env = {**BASE_ENV, "AIRFLOW_KAFKA_EVENTS_BRIDGE_SIGNING_KEY_FILES": f"{current}{os.pathsep}{extra}"}
    config = BridgeConfig.from_sources(environ=env)
    assert config.signing_keys == (b"key-2026", b"key-2025", b"  spaced key  ")
    assert "key-2026" not in repr(config)
    assert BridgeConfig.from_sources(environ=env, signing_key_files=[extra]).signing_keys == (
        b"  spaced key  ",
    )
    blank = tmp_path / "blank"
    blank.write_text("\n \n")
    with pytest.raises(ConfigurationError, match="holds no key"):
        read_signing_keys([blank])
    with pytest.raises(ConfigurationError, match="cannot read"):
        read_signing_keys([tmp_path / "missing"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("exit-after-post", (True, None)),
        ("exit-after-post:batch-42", (True, "batch-42")),
    ],
)
def test_fault_hook_from_the_environment(value, expected):
    config = BridgeConfig.from_sources(environ={**BASE_ENV, "AIRFLOW_KAFKA_EVENTS_BRIDGE_FAULT": value})
    assert (config.fault_after_post, config.fault_partition_key) == expected


@pytest.mark.parametrize("value", ["crash", "exit-after-post:", "exit-before-post"])
def test_bad_fault_values(value):
    with pytest.raises(ConfigurationError, match="FAULT"):
        BridgeConfig.from_sources(environ={**BASE_ENV, "AIRFLOW_KAFKA_EVENTS_BRIDGE_FAULT": value})


# --------------------------------------------------------------------------- retry policy
def test_backoff_grows_exponentially_and_is_capped():
    policy = RetryPolicy(max_attempts=10, initial_backoff=0.5, max_backoff=5, multiplier=2, jitter=0)
    assert [policy.delay(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 5, 5, 5]
    assert policy.delay(10_000) == 5  # no overflow


def test_jitter_only_shortens_the_delay():
    policy = RetryPolicy(initial_backoff=4, max_backoff=4, jitter=0.25)
    assert policy.delay(1, rand=lambda: 0.0) == 4
    assert policy.delay(1, rand=lambda: 0.999999) == pytest.approx(3.0, abs=1e-5)


def test_retry_after_raises_the_delay_but_not_past_the_cap():
    policy = RetryPolicy(initial_backoff=0.5, max_backoff=10, jitter=0)
    assert policy.delay(1, retry_after=3) == 3
    assert policy.delay(1, retry_after=60) == 10
    assert policy.delay(3, retry_after=0.1) == 2


def test_the_default_policy_gives_up_before_the_consumer_leaves_its_group():
    policy = RetryPolicy(jitter=0)
    assert sum(policy.delay(n) for n in range(1, policy.max_attempts)) < 300  # max.poll.interval.ms


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": 2.0},
        {"initial_backoff": -1},
        {"initial_backoff": 5, "max_backoff": 1},
        {"multiplier": 0.5},
        {"jitter": 1},
        {"max_backoff": float("nan")},
    ],
)
def test_invalid_retry_policies(kwargs):
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)


def test_delay_needs_a_failure():
    with pytest.raises(ValueError):
        RetryPolicy().delay(0)


# --------------------------------------------------------------------------- CLI
def test_cli_bridge_flags_parse():
    args = build_parser().parse_args(
        [
            "bridge",
            "--bootstrap-servers",
            "k:9092",
            "--topic",
            "airflow.asset-events",
            "--group",
            "airflow-kafka-events.bridge",
            "--api-url",
            "http://127.0.0.1:8080",
            "--username",
            "bridge",
            "--password-file",
            "/run/secrets/pw",
            "--dlq-topic",
            "dlq",
            "--asset",
            "s3://a/*",
            "--asset",
            "b",
            "--allow",
            '{"source_kinds": ["task"]}',
            "--signing-key-file",
            "/run/secrets/hmac",
            "--max-causation-depth",
            "4",
            "--skip-unpartitioned",
            "--max-attempts",
            "3",
            "--log-level",
            "debug",
        ]
    )
    assert args.group == "bridge"
    assert args.group_id == "airflow-kafka-events.bridge"
    assert args.handler.__name__ == "_bridge"
    assert args.assets == ["s3://a/*", "b"]
    assert args.allow == ['{"source_kinds": ["task"]}']
    assert args.signing_key_files == [Path("/run/secrets/hmac")]
    assert args.max_causation_depth == 4
    assert args.password_file == Path("/run/secrets/pw")
    assert args.skip_unpartitioned and args.max_attempts == 3 and args.log_level == "DEBUG"


@pytest.mark.parametrize("argv", [["--password", "hunter2"], ["--password=hunter2"], ["--password"]])
def test_cli_bridge_refuses_a_password_flag_without_echoing_it(argv, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["bridge", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--password-file" in err
    assert "hunter2" not in err


def test_cli_bridge_flags_are_not_abbreviated(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bridge", "--password-f", "/x"])


def test_cli_bridge_configuration_error_exits_1_without_the_password(tmp_path: Path):
    env = {"PATH": "", "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD": "do-not-print-me"}
    result = subprocess.run(
        [sys.executable, "-m", "airflow_kafka_events.cli.main", "bridge", "--api-url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "--username" in result.stderr
    assert "do-not-print-me" not in result.stderr + result.stdout


def test_bridge_package_imports_no_airflow():
    code = (
        "import sys, airflow_kafka_events.bridge, airflow_kafka_events.bridge.service\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_from_args_takes_the_flags_a_command_has_and_the_environment_for_the_rest(monkeypatch):
    for name, value in BASE_ENV.items():
        monkeypatch.setenv(name, value)
    bridge = build_parser().parse_args(
        [
            "bridge",
            "--api-url",
            "http://flag:8080",
            "--max-attempts",
            "3",
            "--backoff-max",
            "7",
            "--batch-size",
            "9",
        ]
    )
    config = BridgeConfig.from_args(bridge)
    assert (config.api_url, config.username, config.password) == (
        "http://flag:8080",
        "env-user",
        "env-password",
    )
    assert (config.retry.max_attempts, config.retry.max_backoff, config.batch_size) == (3, 7.0, 9)
    replay = build_parser().parse_args(
        ["replay-assets", "--from", "2026-01-01T00:00:00Z", "--allow-any-source"]
    )
    config = BridgeConfig.from_args(replay, topic="chosen")
    assert (config.topic, config.api_url, config.retry.max_attempts) == (
        "chosen",
        "http://env-airflow:8080",
        8,
    )
