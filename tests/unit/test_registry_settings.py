"""Schema registry settings: read from a connection's extras, kept away from librdkafka, never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC, EnvelopeCodecs
from airflow_kafka_events.envelopes.registry import (
    RegistrySettings,
    record_subject_name_strategy,
    topic_subject_name_strategy,
)
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.settings import ENV_SCHEMA_REGISTRY_URL, KafkaSettings
from airflow_kafka_events.ui.inspection.redact import redact

pytestmark = pytest.mark.unit

URL = "https://registry.example:8081"
SECRET = "s3cr3t-value"


def _config(**registry: object) -> dict[str, object]:
    return {"bootstrap.servers": "b:9092", **{f"schema.registry.{k}": v for k, v in registry.items()}}


def test_no_registry_keys_no_registry_and_the_shared_codecs() -> None:
    settings = KafkaSettings({"bootstrap.servers": "b:9092"})
    assert settings.registry is None
    assert settings.codecs == EnvelopeCodecs(TRIGGER_EVENT_CODEC, ASSET_EVENT_CODEC)


def test_every_setting_is_read_and_none_reaches_librdkafka() -> None:
    config = _config(
        **{
            "url": URL,
            "basic.auth.user.info": f"svc:{SECRET}",
            "ssl.ca.location": "/etc/ca.pem",
            "subject.name.strategy": "RecordNameStrategy",
            "auto.register.schemas": "false",
            "timeout.ms": "5000",
        }
    )
    settings = KafkaSettings({**config, "group.id": "g"})
    registry = settings.registry
    assert registry is not None
    assert (registry.url, registry.subject_name_strategy, registry.auto_register) == (
        URL,
        "RecordNameStrategy",
        False,
    )
    assert registry.strategy is record_subject_name_strategy
    assert registry.client_config() == {
        "url": URL,
        "ssl.ca.location": "/etc/ca.pem",
        "basic.auth.user.info": f"svc:{SECRET}",
        "timeout": 5,
    }
    for config in (settings.producer_config(), settings.consumer_config(), settings.admin_config()):
        assert not [k for k in config if k.startswith("schema.registry.")]


def test_codecs_write_the_registry_framing_with_the_connections_strategy() -> None:
    settings = KafkaSettings(_config(url=URL, **{"auto.register.schemas": "false"}))
    codecs = settings.codecs
    assert codecs.registry == settings.registry
    assert codecs.trigger.registry_client is codecs.asset.registry_client is not None
    assert settings.codecs is codecs  # built once per settings


def test_a_bearer_token_is_sent_as_a_static_token() -> None:
    registry = RegistrySettings.from_config(_config(url=URL, **{"bearer.auth.token": SECRET}))
    assert registry is not None and registry.strategy is topic_subject_name_strategy
    config = registry.client_config()
    assert config["bearer.auth.credentials.source"] == "STATIC_TOKEN"
    assert config["bearer.auth.token"] == SECRET
    assert registry.new_client() is not None  # confluent-kafka accepts the configuration


def test_secrets_are_never_in_repr_describe_or_redacted_config() -> None:
    for key in ("basic.auth.user.info", "bearer.auth.token"):
        value = f"svc:{SECRET}" if key.startswith("basic") else SECRET
        settings = KafkaSettings(_config(url=URL, **{key: value}))
        registry = settings.registry
        assert registry is not None
        assert SECRET not in repr(registry)
        assert SECRET not in str(registry.describe())
        assert SECRET not in str(redact(dict(settings.config)))


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ({"url": ""}, "schema registry settings without schema.registry.url"),
        ({"basic.auth.user.info": "a:b"}, "without schema.registry.url"),
        ({"url": "registry:8081"}, "must be an http:// or https:// URL"),
        ({"url": URL, "subject.name.strategy": "TopicRecordNameStrategy"}, "is not one of"),
        ({"url": URL, "auto.register.schemas": "perhaps"}, "must be true or false"),
        ({"url": URL, "basic.auth.user.info": "a:b", "bearer.auth.token": "t"}, "not both"),
        ({"url": URL, "basic.auth.user.info": "no-colon"}, "must be user:password"),
        ({"url": URL, "user.info": "x"}, "unknown schema registry setting(s) schema.registry.user.info"),
        ({"url": URL, "timeout.ms": "soon"}, "timeout.ms must be an integer"),
    ],
)
def test_a_misconfigured_registry_fails_when_the_settings_are_built(
    registry: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KafkaSettings(_config(**registry))


def test_outside_airflow_the_url_comes_from_the_environment_a_file_or_a_flag(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(f"bootstrap.servers=b:9092\nschema.registry.url={URL}\n", "utf-8")
    assert KafkaSettings.from_sources(properties_file=props, environ={}).registry is not None
    from_env = KafkaSettings.from_sources(bootstrap_servers="b:9092", environ={ENV_SCHEMA_REGISTRY_URL: URL})
    assert from_env.registry is not None and from_env.registry.url == URL
    flagged = KafkaSettings.from_sources(
        bootstrap_servers="b:9092", overrides={"schema.registry.url": URL}, environ={}
    )
    assert flagged.registry is not None
