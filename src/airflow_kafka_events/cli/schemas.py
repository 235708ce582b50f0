"""``airflow-kafka-events schemas``: the envelopes' schemas in a Confluent-compatible schema registry.

``register`` sets each envelope subject's compatibility level and registers the current schema;
``check`` asks the registry whether the current schema (or ``--schema-file``) passes the subject's
compatibility check (exit 1 when one does not); ``show`` prints what the registry holds.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from airflow_kafka_events.cli.topics import add_kafka_connection_args

EXIT_INCOMPATIBLE = 1
_ROLES = {"trigger_event_envelope": "trigger-events", "asset_event_envelope": "asset-events"}


def _registry(args: argparse.Namespace) -> Any:
    from airflow_kafka_events.envelopes.registry import RegistrySettings
    from airflow_kafka_events.errors import ConfigurationError
    from airflow_kafka_events.kafka.settings import (
        ENV_PROPERTIES_FILE,
        ENV_SCHEMA_REGISTRY_URL,
        load_properties,
    )

    if args.conn_id:
        from airflow_kafka_events.provider.hook import KafkaEventsHook

        registry = KafkaEventsHook(kafka_config_id=args.conn_id).get_settings().registry
        where = f"the Airflow connection {args.conn_id!r}"
    else:
        config: dict[str, Any] = {}
        props = args.properties or os.environ.get(ENV_PROPERTIES_FILE)
        if props:
            config.update(load_properties(props))
        if os.environ.get(ENV_SCHEMA_REGISTRY_URL):
            config["schema.registry.url"] = os.environ[ENV_SCHEMA_REGISTRY_URL]
        config.update(dict(args.property or []))
        registry = RegistrySettings.from_config(config)
        where = f"--schema-registry-url, --properties, --property or {ENV_SCHEMA_REGISTRY_URL}"
    if registry is None:
        raise ConfigurationError(f"no schema registry: set schema.registry.url ({where})")
    return registry


def _topic(role: str, args: argparse.Namespace) -> str:
    from airflow_kafka_events.kafka.topic_plan import TOPIC_OPTIONS, configured_topic

    given = getattr(args, role.replace("-", "_") + "_topic", None)
    if given:
        return str(given)
    option, default = next((o, d) for r, o, d in TOPIC_OPTIONS if r == role)
    assert default is not None
    return configured_topic(option, default)


def _candidates(args: argparse.Namespace) -> dict[str, Any]:
    """Schema name -> the registry ``Schema`` to register or check (the code's, or ``--schema-file``)."""
    from airflow_kafka_events.envelopes.registry import registry_schema, schema_from_text
    from airflow_kafka_events.errors import ConfigurationError

    names = [args.schema] if args.schema else list(_ROLES)
    files = dict(getattr(args, "schema_files", None) or [])
    unknown = sorted(set(files) - set(_ROLES))
    if unknown:
        raise ConfigurationError(f"--schema-file names {', '.join(unknown)}: use {' or '.join(_ROLES)}")
    result: dict[str, Any] = {}
    for name in names:
        path = files.get(name)
        if path is None:
            result[name] = registry_schema(name)
            continue
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read --schema-file {path}: {exc}") from exc
        result[name] = schema_from_text(text, str(path))
    return result


def _reports(args: argparse.Namespace, registry: Any, *, register: bool) -> list[Any]:
    from airflow_kafka_events.envelopes.registry import envelope_subject, register_schema, subject_report

    client = registry.new_client()
    reports = []
    for name, schema in _candidates(args).items():
        subject = envelope_subject(registry, name, _topic(_ROLES[name], args))
        if register:
            reports.append(register_schema(client, name, subject, schema, args.compatibility))
        else:
            reports.append(subject_report(client, name, subject, schema))
    return reports


def _print(reports: list[Any], args: argparse.Namespace) -> None:
    if args.json:
        from dataclasses import asdict

        print(json.dumps([asdict(r) for r in reports], indent=2, sort_keys=True))
    else:
        for report in reports:
            print(report.line())


def _register(args: argparse.Namespace) -> int:
    _print(_reports(args, _registry(args), register=True), args)
    return 0


def _check(args: argparse.Namespace) -> int:
    reports = _reports(args, _registry(args), register=False)
    _print(reports, args)
    return EXIT_INCOMPATIBLE if any(r.compatible is False for r in reports) else 0


def _show(args: argparse.Namespace) -> int:
    registry = _registry(args)
    if not args.json:
        print(f"registry: {json.dumps(registry.describe(), sort_keys=True)}")
    _print(_reports(args, registry, register=False), args)  # the code's schemas: show has no --schema-file
    return 0


def _schema_file(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name.strip(), path.strip()


def add_schemas_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from airflow_kafka_events.envelopes.registry import COMPATIBILITY_LEVELS, DEFAULT_COMPATIBILITY

    group = subparsers.add_parser(
        "schemas",
        help="the envelopes' schemas in a Confluent-compatible schema registry (register, check, show)",
        description="Register, check and show the envelopes' Avro schemas in a schema registry "
        "(schema.registry.* settings: --schema-registry-url, --properties, --property, or --conn-id).",
    )
    commands = group.add_subparsers(title="commands", dest="schemas_command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    registry = common.add_argument_group("schema registry")
    add_kafka_connection_args(registry)
    registry.add_argument(
        "--conn-id",
        default=None,
        help="read the registry settings from this Airflow Kafka connection's extras",
    )
    common.add_argument("--schema", choices=sorted(_ROLES), default=None, help="one envelope (default: both)")
    common.add_argument(
        "--trigger-events-topic", default=None, help="default: [kafka_events] trigger_events_topic"
    )
    common.add_argument(
        "--asset-events-topic", default=None, help="default: [kafka_events] asset_events_topic"
    )
    common.add_argument("--json", action="store_true", help="print the reports as JSON")
    candidate = argparse.ArgumentParser(add_help=False)
    candidate.add_argument(
        "--schema-file",
        dest="schema_files",
        type=_schema_file,
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="use this .avsc for envelope NAME instead of the code's current schema (repeat)",
    )

    register = commands.add_parser(
        "register",
        parents=[common, candidate],
        help="set the subjects' compatibility level and register the current schemas",
    )
    register.add_argument(
        "--compatibility",
        choices=COMPATIBILITY_LEVELS,
        default=DEFAULT_COMPATIBILITY,
        help="the subjects' compatibility level (%(default)s: every kept version reads every other's bytes)",
    )
    register.set_defaults(handler=_register, group_parser=register)
    check = commands.add_parser(
        "check",
        parents=[common, candidate],
        help="exit 1 when a current schema fails its subject's compatibility check",
    )
    check.set_defaults(handler=_check, group_parser=check)
    show = commands.add_parser("show", parents=[common], help="the registry's subjects, versions and levels")
    show.set_defaults(handler=_show, group_parser=show)
    group.set_defaults(handler=None, group_parser=group)


__all__ = ["add_schemas_group"]
