"""The documentation site's reference pages, generated from the code at build time (an MkDocs hook).

``mkdocs.yml`` names this file under ``hooks``: :func:`on_files` adds the pages of :data:`PAGES` to the
site, each rendered from the code that defines it, so the reference cannot drift from the package:

* ``reference/airflow-config.md``: the ``[kafka_events]`` options of the provider's configuration
  (``provider.get_provider_info()["config"]``);
* ``reference/settings.md``: the environment variables the package reads (every ``ENV_*`` constant of
  its modules, with its ``#:`` comment) and the partition bridge's settings (``BridgeConfig``'s fields);
* ``reference/metrics.md``: the metric names of ``metrics.py`` with their ``#:`` comments;
* ``reference/cli.md``: ``--help`` of every command of the ``airflow-kafka-events`` entry point.

``python scripts/docs_reference.py DIR`` writes the same pages into ``DIR`` (to read them without a build).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import os
import sys
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "src" / "airflow_kafka_events"
CLI_COLUMNS = "100"
GENERATED_NOTE = "Generated from the code when the site is built (`scripts/docs_reference.py`)."


# --------------------------------------------------------------------------- helpers
def _md(text: str) -> str:
    """reStructuredText inline literals (````x````) as Markdown ones, on one line, table-safe."""
    return " ".join(text.replace("``", "`").split()).replace("|", "\\|")


def doc_comments(source: str) -> dict[int, str]:
    """The ``#:`` comment block ending on each line number (joined), keyed by the line after it."""
    blocks: dict[int, str] = {}
    pending: list[str] = []
    last = -1
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and token.string.startswith("#:"):
            row = token.start[0]
            if row != last + 1:
                pending = []
            pending.append(token.string[2:].strip())
            last = row
            blocks[row + 1] = " ".join(pending)
    return blocks


def _constant_value(node: ast.expr, names: dict[str, str]) -> str | None:
    """A module-level string built of literals, earlier constants and ``+``; else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant_value(node.left, names), _constant_value(node.right, names)
        return None if left is None or right is None else left + right
    return None


def module_constants(path: Path) -> Iterator[tuple[str, str, str]]:
    """(name, value, ``#:`` comment) of each module-level string constant of ``path``."""
    source = path.read_text(encoding="utf-8")
    comments = doc_comments(source)
    names: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _constant_value(node.value, names)
            if value is not None:
                names[node.targets[0].id] = value
                yield node.targets[0].id, value, comments.get(node.lineno, "")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# --------------------------------------------------------------------------- [kafka_events]
def config_options() -> dict[str, dict[str, Any]]:
    """The provider's ``[kafka_events]`` options, as Airflow reads them."""
    from airflow_kafka_events.provider import get_provider_info

    return dict(get_provider_info()["config"]["kafka_events"]["options"])


def airflow_config_page() -> str:
    lines = [
        "# `[kafka_events]` options",
        "",
        GENERATED_NOTE + " Source: the provider's configuration (`provider.py`), which Airflow reads "
        "through the `apache_airflow_provider` entry point: `airflow config list` shows them.",
        "",
        "Each option is read from `AIRFLOW__KAFKA_EVENTS__<OPTION>` or airflow.cfg. The CLI and the "
        "bridge import no Airflow: they read the environment variable and airflow.cfg "
        "(`$AIRFLOW_CONFIG`, else `$AIRFLOW_HOME/airflow.cfg`) as a file.",
        "",
        "| option | type | default |",
        "|---|---|---|",
    ]
    options = config_options()
    for name, option in options.items():
        default = option.get("default")
        shown = "unset" if default is None else ("empty" if default == "" else f"`{default}`")
        lines.append(f"| [`{name}`](#{name}) | {option.get('type', 'string')} | {shown} |")
    for name, option in options.items():
        lines += ["", f"## {name}", "", _md(option.get("description", "")), ""]
        lines.append(f"- environment: `AIRFLOW__KAFKA_EVENTS__{name.upper()}`")
        default = option.get("default")
        lines.append(f"- default: {'unset' if default is None else repr(default)}")
        if option.get("example"):
            lines.append(f"- example: `{option['example']}`")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- settings
def environment_variables() -> list[tuple[str, str, str]]:
    """(variable, module, comment) of every ``ENV_*`` constant naming a variable the package reads."""
    found: dict[str, tuple[str, str, str]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for name, value, comment in module_constants(path):
            if name.startswith("ENV_") and not value.endswith("_") and value not in found:
                found[value] = (value, _module_name(path), comment)
    return sorted(found.values())


def _default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return f"`{type(value).__name__}()`"
    return f"`{value!r}`"


def settings_page() -> str:
    from airflow_kafka_events.bridge.config import BridgeConfig

    lines = [
        "# Settings and environment variables",
        "",
        GENERATED_NOTE + " How the settings fit together: [Configuration](../configuration.md).",
        "",
        "## Environment variables",
        "",
        "Every environment variable the package reads (besides Airflow's own `AIRFLOW__*` options, "
        "listed in [`[kafka_events]` options](airflow-config.md)).",
        "",
        "| variable | read in | meaning |",
        "|---|---|---|",
    ]
    for variable, module, comment in environment_variables():
        lines.append(f"| `{variable}` | `{module}` | {_md(comment)} |")
    lines += [
        "",
        "## The partition bridge's settings",
        "",
        "`airflow_kafka_events.bridge.config.BridgeConfig`, validated on construction; the `bridge` "
        "command fills it from its flags and the `AIRFLOW_KAFKA_EVENTS_BRIDGE_*` variables above "
        "([CLI reference](cli.md#airflow-kafka-events-bridge)).",
        "",
        _md(inspect.getdoc(BridgeConfig) or ""),
        "",
        "| field | type | default |",
        "|---|---|---|",
    ]
    for field in dataclasses.fields(BridgeConfig):
        lines.append(f"| `{field.name}` | `{_md(str(field.type))}` | {_default_text(field)} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- metrics
METRIC_PREFIX = "kafka_events."


def metric_definitions() -> list[tuple[str, str, str]]:
    """(constant, metric name, ``#:`` comment) of every metric name ``metrics.py`` defines."""
    import airflow_kafka_events.metrics as metrics

    path = Path(metrics.__file__)
    return [(c, v, doc) for c, v, doc in module_constants(path) if v.startswith(METRIC_PREFIX)]


def metrics_page() -> str:
    lines = [
        "# Metric names",
        "",
        GENERATED_NOTE + " Source: the names and their `#:` comments in `metrics.py`. Every name "
        "comes after Airflow's `statsd_prefix` (default `airflow.`); how to receive them: "
        "[Metrics](../metrics.md).",
        "",
        "| name | type | tags | what |",
        "|---|---|---|---|",
    ]
    for _constant, name, comment in metric_definitions():
        kind, tags, what = ([*comment.split("; ", 2), "", ""])[:3]
        kind, _, suffix = kind.partition(", ")
        # a suffix (``.<cause>``, ``.complete`` / ``.failed``) continues the name's literal
        shown = f"`{name}" + (_md(suffix)[1:] if suffix.startswith("``") else "`")
        lines.append(f"| {shown} | {_md(kind)} | {_md(tags)} | {_md(what)} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI
def cli_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command path, parser) of the entry point and every command below it, in help order."""
    from airflow_kafka_events.cli.main import build_parser

    found: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(parser: argparse.ArgumentParser) -> None:
        found.append((parser.prog, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)

    walk(build_parser())
    return found


def cli_help(parser: argparse.ArgumentParser) -> str:
    """``parser``'s ``--help`` at a fixed width (the terminal's would change the page)."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = CLI_COLUMNS
    try:
        return parser.format_help()
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def cli_page() -> str:
    lines = [
        "# CLI reference",
        "",
        GENERATED_NOTE + " Each section is the command's `--help`; how to use them: "
        "[The operator CLI](../cli.md), [Topics](../topics.md), [Kafka](../kafka-broker.md), "
        "[Emitting asset events](../asset-events.md), [The partition bridge](../asset-bridge.md).",
    ]
    for path, parser in cli_commands():
        lines += ["", f"## {path}", "", "```text", cli_help(parser).rstrip(), "```"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the hook
#: Generated page (path under the docs directory) -> its renderer.
PAGES: dict[str, Callable[[], str]] = {
    "reference/airflow-config.md": airflow_config_page,
    "reference/settings.md": settings_page,
    "reference/metrics.md": metrics_page,
    "reference/cli.md": cli_page,
}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated reference pages to the site's files."""
    from mkdocs.structure.files import File

    for uri, render in PAGES.items():
        files.append(File.generated(config, uri, content=render()))
    return files


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/docs_reference.py DIR", file=sys.stderr)
        return 2
    for uri, render in PAGES.items():
        target = Path(argv[0]) / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(), encoding="utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
