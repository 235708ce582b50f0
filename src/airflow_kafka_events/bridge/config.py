"""Settings of the partition bridge: one validated, immutable :class:`BridgeConfig`.

Every setting comes from a command-line flag, else an environment variable, else a default
(:meth:`BridgeConfig.from_sources`).  Kafka settings use the package's usual sources
(``--bootstrap-servers`` / ``--properties`` / ``--property``, ``KAFKA_BOOTSTRAP_SERVERS``,
``AIRFLOW_KAFKA_EVENTS_PROPERTIES``).  The password never comes from a flag (flags are visible in
the process list): it comes from ``--password-file``, ``$AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE``
or ``$AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD``.  A password file holds the password, or a simple auth
manager passwords file (a JSON object ``{"<username>": "<password>", ...}``).

Authorization is the same as the asset watcher's (:mod:`airflow_kafka_events.assets.authz`):
``--allow`` rules (JSON objects restricting ``source_kinds`` / ``dag_ids`` / ``producers``; an
event must match one) and HMAC-SHA256 signatures checked with the keys of ``--signing-key-file``
(one key per line, the current key first; every listed key is accepted, for rotation).

This module imports no Airflow module.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_kafka_events.assets.admission import DEFAULT_MAX_RECORD_BYTES, AdmissionConfig
from airflow_kafka_events.assets.airflow_api import API_PAGE_LIMIT
from airflow_kafka_events.assets.authz import Allowlist
from airflow_kafka_events.assets.validation import DEFAULT_MAX_EXTRA_BYTES
from airflow_kafka_events.errors import ConfigurationError, ValidationError
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.retry import RetryPolicy

__all__ = [
    "DEFAULT_DLQ_TOPIC",
    "DEFAULT_GROUP",
    "DEFAULT_TOPIC",
    "ENV_ALLOW",
    "ENV_API_URL",
    "ENV_ASSETS",
    "ENV_DLQ_TOPIC",
    "ENV_FAULT",
    "ENV_GROUP",
    "ENV_MAX_EXTRA_BYTES",
    "ENV_MAX_RECORD_BYTES",
    "ENV_PASSWORD",
    "ENV_PASSWORD_FILE",
    "ENV_SIGNING_KEY_FILES",
    "ENV_TOPIC",
    "ENV_USERNAME",
    "FAULT_EXIT_AFTER_POST",
    "BridgeConfig",
    "parse_allow_rules",
    "read_password_file",
    "read_signing_keys",
]

ENV_PREFIX = "AIRFLOW_KAFKA_EVENTS_BRIDGE_"
#: The Airflow api-server's base URL, as ``--api-url``.
ENV_API_URL = ENV_PREFIX + "API_URL"
#: The Airflow user the bridge signs in as, as ``--username``.
ENV_USERNAME = ENV_PREFIX + "USERNAME"
#: That user's password (never a flag); ``_PASSWORD_FILE`` is read first.
ENV_PASSWORD = ENV_PREFIX + "PASSWORD"
#: A file holding that user's password, as ``--password-file``.
ENV_PASSWORD_FILE = ENV_PREFIX + "PASSWORD_FILE"
#: The asset events topic the bridge consumes, as ``--topic``.
ENV_TOPIC = ENV_PREFIX + "TOPIC"
#: The bridge's consumer group, as ``--group``.
ENV_GROUP = ENV_PREFIX + "GROUP"
#: The dead-letter topic, as ``--dlq-topic``.
ENV_DLQ_TOPIC = ENV_PREFIX + "DLQ_TOPIC"
#: Comma-separated asset patterns (as ``--asset``).
ENV_ASSETS = ENV_PREFIX + "ASSETS"
#: Allowlist in its JSON form: a list of rule objects (as ``--allow``, one rule each).
ENV_ALLOW = ENV_PREFIX + "ALLOW"
#: Files of signing keys, separated by ``os.pathsep`` (as ``--signing-key-file``).
ENV_SIGNING_KEY_FILES = ENV_PREFIX + "SIGNING_KEY_FILES"
#: Size limit of a record (value, key and headers, bytes), as ``BridgeConfig.max_record_bytes``.
ENV_MAX_RECORD_BYTES = ENV_PREFIX + "MAX_RECORD_BYTES"
#: Size limit of an envelope's ``extra`` (compact JSON, bytes), as ``BridgeConfig.max_extra_bytes``.
ENV_MAX_EXTRA_BYTES = ENV_PREFIX + "MAX_EXTRA_BYTES"
#: Fault injection for tests: ``exit-after-post`` or ``exit-after-post:<partition key>``.
ENV_FAULT = ENV_PREFIX + "FAULT"
#: The provider's topic option, read as a fallback for the topic (as ``emit`` does).
ENV_ASSET_EVENTS_TOPIC = "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC"

DEFAULT_TOPIC = "airflow.asset-events"
DEFAULT_GROUP = "airflow-kafka-events.bridge"
DEFAULT_DLQ_TOPIC = "airflow.kafka-events.dlq"
FAULT_EXIT_AFTER_POST = "exit-after-post"

#: Default bound on an event's causation chain (the asset watcher's default too).
DEFAULT_MAX_CAUSATION_DEPTH = 8


# --------------------------------------------------------------------------- helpers
def read_password_file(path: str | os.PathLike[str], username: str) -> str:
    """The password in ``path``: the file's text, or ``{username: password}`` of a JSON object file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the password file {p}: {exc.strerror or exc}") from None
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            users = json.loads(stripped)
        except ValueError:
            users = None
        if isinstance(users, dict):
            value = users.get(username)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(
                    f"the password file {p} is a JSON object without a password for user {username!r}"
                )
            return value
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigurationError(f"the password file {p} is empty")
    return password


def read_signing_keys(paths: Iterable[str | os.PathLike[str]]) -> tuple[bytes, ...]:
    """The HMAC keys in ``paths``: every non-blank line (without its line break), UTF-8, in order."""
    keys: list[bytes] = []
    for path in paths:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read the signing key file {p}: {exc.strerror or exc}") from None
        found = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
        if not found:
            raise ConfigurationError(f"the signing key file {p} holds no key")
        keys.extend(key.encode("utf-8") for key in found)
    return tuple(keys)


def parse_allow_rules(values: Iterable[Any]) -> Allowlist | None:
    """An :class:`Allowlist` from rules given as JSON text (an object, or a list of objects) or dicts."""
    rules: list[Any] = []
    for value in values:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ConfigurationError(f"an allow rule is not valid JSON: {exc}") from None
        rules.extend(value if isinstance(value, list) else [value])
    if not rules:
        return None
    try:
        return Allowlist.from_config(rules)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid allow rule: {exc}") from None


def _check_api_url(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ConfigurationError(f"the Airflow API URL must be http(s)://host[:port][/prefix], got {url!r}")
    if parsed.username or parsed.password:
        raise ConfigurationError(
            "the Airflow API URL must not hold credentials; use --username/--password-file"
        )
    if parsed.query or parsed.fragment:
        raise ConfigurationError(f"the Airflow API URL must have no query or fragment, got {url!r}")
    return url.rstrip("/")


def _positive(name: str, value: Any, *, integer: bool = False, allow_zero: bool = False) -> None:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    bad_type = isinstance(value, bool) or not isinstance(value, kinds)
    if bad_type or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigurationError(f"{name} must be {'an int' if integer else 'a number'}, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigurationError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _split_patterns(values: Iterable[str]) -> tuple[str, ...]:
    patterns: list[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if part and part not in patterns:
                patterns.append(part)
    return tuple(patterns)


def _size_options(env: Mapping[str, str], options: dict[str, Any]) -> None:
    """``max_record_bytes`` / ``max_extra_bytes`` from the environment unless given."""
    for name, variable in (
        ("max_record_bytes", ENV_MAX_RECORD_BYTES),
        ("max_extra_bytes", ENV_MAX_EXTRA_BYTES),
    ):
        text = env.get(variable, "").strip()
        if name in options or not text:
            continue
        try:
            options[name] = int(text)
        except ValueError:
            raise ConfigurationError(f"{variable} must be a number of bytes, got {text!r}") from None


def _parse_fault(value: str | None) -> tuple[bool, str | None]:
    if not value:
        return False, None
    kind, sep, key = value.partition(":")
    if kind != FAULT_EXIT_AFTER_POST or (sep and not key):
        raise ConfigurationError(
            f"{ENV_FAULT} must be {FAULT_EXIT_AFTER_POST!r} or '{FAULT_EXIT_AFTER_POST}:<partition key>', "
            f"got {value!r}"
        )
    return True, key or None


# --------------------------------------------------------------------------- config
@dataclass(frozen=True)
class BridgeConfig:
    """Everything the bridge needs; validated on construction (:class:`ConfigurationError`).

    ``assets`` holds ``fnmatch`` patterns matched against an event's asset URI and name; when it is
    not empty, events of other assets are skipped (left to other consumers).  ``allowlist`` and
    ``signing_keys`` (when not empty, events must be signed with one of them) refuse events to the
    dead-letter topic, as do events with more than ``max_causation_depth`` ancestors, records
    over ``max_record_bytes`` (value, key and headers) and envelopes whose ``extra`` is over
    ``max_extra_bytes`` of compact JSON (``too-large``).
    ``recheck_records`` is how
    many records of a newly assigned partition are first looked up among the asset's
    ``recent_events_limit`` most recent Airflow asset events (the window a previous owner may have
    posted without committing).  ``fault_after_post`` (tests only) makes the process exit between
    the POST of an event (optionally only of ``fault_partition_key``) and its offset commit.
    """

    kafka: KafkaSettings
    api_url: str
    username: str
    password: str = field(repr=False)
    topic: str = DEFAULT_TOPIC
    group_id: str = DEFAULT_GROUP
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    assets: tuple[str, ...] = ()
    allowlist: Allowlist | None = None
    signing_keys: tuple[bytes, ...] = field(default=(), repr=False)
    max_causation_depth: int = DEFAULT_MAX_CAUSATION_DEPTH
    skip_unpartitioned: bool = False
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_extra_bytes: int = DEFAULT_MAX_EXTRA_BYTES
    request_timeout: float = 10.0
    retry: RetryPolicy = RetryPolicy()
    token_renew_margin: float = 60.0
    recheck_records: int = 20
    recent_events_limit: int = API_PAGE_LIMIT
    seen_keys_max: int = 100_000
    seen_keys_ttl: float = 24 * 3600.0
    batch_size: int = 50
    poll_timeout: float = 1.0
    fault_after_post: bool = False
    fault_partition_key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kafka, KafkaSettings):
            raise ConfigurationError(f"kafka must be KafkaSettings, got {type(self.kafka).__qualname__}")
        object.__setattr__(self, "api_url", _check_api_url(self.api_url))
        for name in ("username", "password", "topic", "group_id", "dlq_topic"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigurationError(f"{name} must be a non-empty str")
        if self.dlq_topic == self.topic:
            raise ConfigurationError("the dead-letter topic must differ from the topic the bridge consumes")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError("retry must be a RetryPolicy")
        object.__setattr__(self, "assets", _split_patterns(self.assets))
        if self.allowlist is not None and not isinstance(self.allowlist, Allowlist):
            raise ConfigurationError("allowlist must be an Allowlist or None")
        keys = tuple(self.signing_keys)
        if any(not isinstance(key, bytes) or not key for key in keys):
            raise ConfigurationError("signing keys must be non-empty bytes")
        object.__setattr__(self, "signing_keys", keys)
        _positive("max_causation_depth", self.max_causation_depth, integer=True, allow_zero=True)
        _positive("max_record_bytes", self.max_record_bytes, integer=True)
        _positive("max_extra_bytes", self.max_extra_bytes, integer=True)
        _positive("request_timeout", self.request_timeout)
        _positive("token_renew_margin", self.token_renew_margin, allow_zero=True)
        _positive("recheck_records", self.recheck_records, integer=True, allow_zero=True)
        _positive("recent_events_limit", self.recent_events_limit, integer=True)
        _positive("seen_keys_max", self.seen_keys_max, integer=True)
        _positive("seen_keys_ttl", self.seen_keys_ttl)
        _positive("batch_size", self.batch_size, integer=True)
        _positive("poll_timeout", self.poll_timeout)
        if self.fault_partition_key is not None and not self.fault_after_post:
            raise ConfigurationError("fault_partition_key needs fault_after_post")

    def handles(self, uri: str, name: str) -> bool:
        """Whether events of the asset (``uri``, ``name``) are this bridge's (``assets``)."""
        if not self.assets:
            return True
        return any(fnmatch.fnmatchcase(uri, p) or fnmatch.fnmatchcase(name, p) for p in self.assets)

    def select(self, envelope: Any) -> str | None:
        """The bridge's own admission stage: ``None`` for its events, else why it skips one."""
        asset = envelope.asset
        if not self.handles(asset.uri, asset.name):
            return f"for asset {asset.uri!r}, not one of --asset"
        if self.skip_unpartitioned and envelope.partition_key is None:
            return "has no partition key and --skip-unpartitioned is set"
        return None

    def admission_config(self) -> AdmissionConfig:
        """The admission pipeline's settings for the bridge (partition keys checked, remembered after 2xx)."""
        return AdmissionConfig(
            max_record_bytes=self.max_record_bytes,
            max_extra_bytes=self.max_extra_bytes,
            signing_keys=self.signing_keys or None,
            allowlist=self.allowlist,
            max_causation_depth=self.max_causation_depth,
            check_partition_key=True,
            select=self.select,
            remember_on_accept=False,
        )

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka consumer settings: the bridge's group, manual commits, earliest reset."""
        return self.kafka.consumer_config(self.group_id)

    def describe(self) -> dict[str, Any]:
        """The settings worth logging (no password, no Kafka secrets)."""
        return {
            "bootstrap_servers": self.kafka.bootstrap_servers,
            "topic": self.topic,
            "group_id": self.group_id,
            "dlq_topic": self.dlq_topic,
            "api_url": self.api_url,
            "username": self.username,
            "assets": list(self.assets),
            "allow": None if self.allowlist is None else self.allowlist.to_config(),
            "signed_events_only": bool(self.signing_keys),
            "max_causation_depth": self.max_causation_depth,
            "skip_unpartitioned": self.skip_unpartitioned,
            "max_record_bytes": self.max_record_bytes,
            "max_extra_bytes": self.max_extra_bytes,
            "max_attempts": self.retry.max_attempts,
            "recheck_records": self.recheck_records,
            "recent_events_limit": self.recent_events_limit,
        }

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_sources(
        cls,
        *,
        api_url: str | None = None,
        username: str | None = None,
        password_file: str | os.PathLike[str] | None = None,
        topic: str | None = None,
        group_id: str | None = None,
        dlq_topic: str | None = None,
        assets: Iterable[str] = (),
        allow: Iterable[Any] = (),
        signing_key_files: Iterable[str | os.PathLike[str]] = (),
        bootstrap_servers: str | None = None,
        properties_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> BridgeConfig:
        """Flags (the arguments) win over the environment, which wins over the defaults.

        ``options`` are further :class:`BridgeConfig` fields (``request_timeout``, ``retry`` ...).
        """
        env = os.environ if environ is None else environ
        given = _from_arguments(
            api_url=api_url,
            username=username,
            password_file=password_file,
            topic=topic,
            group_id=group_id,
            dlq_topic=dlq_topic,
            assets=assets,
            allow=allow,
            signing_key_files=signing_key_files,
        )
        fields = _read_secrets({**_from_environ(env), **given, **options})  # the bridge's own first
        kafka = KafkaSettings.from_sources(
            bootstrap_servers=bootstrap_servers,
            properties_file=properties_file,
            overrides=overrides,
            environ=env,
        )
        return cls(kafka=kafka, **fields)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **fixed: Any) -> BridgeConfig:
        """The config of a command's parsed flags (the ones it has), then the environment.

        ``fixed``: arguments of :meth:`from_sources` the command decides itself (e.g. ``topic``).
        """
        given = vars(args)
        arguments: dict[str, Any] = {
            _RENAMED_FLAGS.get(flag, flag): given[flag] for flag in _FLAGS if given.get(flag) is not None
        }
        if given.get("property"):
            arguments["overrides"] = dict(given["property"])
        retry = {name: given[flag] for flag, name in _RETRY_FLAGS.items() if given.get(flag) is not None}
        if retry:
            arguments["retry"] = RetryPolicy(**retry)
        return cls.from_sources(**{**arguments, **fixed})


#: ``argparse`` destinations of the bridge's flags: :meth:`BridgeConfig.from_sources` arguments of
#: the same name, but for those :data:`_RENAMED_FLAGS` maps.
_FLAGS = (
    *("api_url", "username", "password_file", "topic", "group_id", "dlq_topic", "assets", "allow"),
    *("signing_key_files", "max_causation_depth", "bootstrap_servers", "properties"),
    *("skip_unpartitioned", "request_timeout", "recheck_records", "recent_events_limit", "batch_size"),
)
_RENAMED_FLAGS = {"properties": "properties_file"}
#: ``argparse`` destinations of the retry flags -> :class:`RetryPolicy` fields.
_RETRY_FLAGS = {
    "max_attempts": "max_attempts",
    "backoff_initial": "initial_backoff",
    "backoff_max": "max_backoff",
}


def _from_environ(env: Mapping[str, str]) -> dict[str, Any]:
    """What the environment sets (the raw values: file names, rules, patterns)."""
    fault, fault_key = _parse_fault(env.get(ENV_FAULT))
    found: dict[str, Any] = {
        "api_url": env.get(ENV_API_URL),
        "username": env.get(ENV_USERNAME),
        "password_file": env.get(ENV_PASSWORD_FILE),
        "password": env.get(ENV_PASSWORD),
        "topic": env.get(ENV_TOPIC) or env.get(ENV_ASSET_EVENTS_TOPIC),
        "group_id": env.get(ENV_GROUP),
        "dlq_topic": env.get(ENV_DLQ_TOPIC),
        "assets": [env[ENV_ASSETS]] if env.get(ENV_ASSETS) else None,
        "allow": [env[ENV_ALLOW]] if env.get(ENV_ALLOW) else None,
        "signing_key_files": [p for p in env.get(ENV_SIGNING_KEY_FILES, "").split(os.pathsep) if p.strip()],
        "fault_after_post": fault,
        "fault_partition_key": fault_key,
    }
    _size_options(env, found)
    return {name: value for name, value in found.items() if value not in (None, "", [])}


def _from_arguments(**arguments: Any) -> dict[str, Any]:
    """The arguments given (``None`` and empty lists are not given)."""
    given: dict[str, Any] = {}
    for name, value in arguments.items():
        if isinstance(value, Iterable) and not isinstance(value, str):
            value = list(value)
        if value not in (None, "", []):
            given[name] = value
    return given


def _read_secrets(merged: dict[str, Any]) -> dict[str, Any]:
    """``merged`` as :class:`BridgeConfig` fields: the required ones checked, files read, rules parsed."""
    fields = dict(merged)
    if not fields.get("api_url"):
        raise ConfigurationError(f"the bridge needs the Airflow API URL: pass --api-url or set {ENV_API_URL}")
    if not fields.get("username"):
        raise ConfigurationError(f"the bridge needs a username: pass --username or set {ENV_USERNAME}")
    file = fields.pop("password_file", None)
    if file:
        fields["password"] = read_password_file(file, fields["username"])
    elif not fields.get("password"):
        raise ConfigurationError(
            f"the bridge needs a password: pass --password-file or set {ENV_PASSWORD_FILE} or {ENV_PASSWORD}"
        )
    fields["assets"] = tuple(fields.get("assets", ()))
    fields["allowlist"] = parse_allow_rules(fields.pop("allow", []))
    fields["signing_keys"] = read_signing_keys(fields.pop("signing_key_files", []))
    return fields
