"""The documentation site: its generated reference covers what the code defines, its nav every page,
and the README stays a landing page whose links reach the site's pages."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "airflow_kafka_events"

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    """scripts/docs_reference.py, the hook mkdocs.yml runs (not a package: loaded from its path)."""
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py")))


def _options_the_code_reads() -> set[str]:
    """Every ``[kafka_events]`` option the package names or reads by a literal name."""
    text = _source_text()
    names = set(re.findall(r"\[kafka_events\]``? ``?([a-z][a-z_]+)", text))
    names |= set(re.findall(r"conf\.get\w*\(\s*\"kafka_events\",\s*\"([a-z_]+)\"", text))
    names |= set(re.findall(r"airflow_option\(\s*(?:SECTION|\"kafka_events\"),\s*\"([a-z_]+)\"", text))
    names |= set(re.findall(r"\b_config\(\"([a-z_]+)\"", text))  # assets/emit.py
    names |= set(re.findall(r"\bopt\(\"([a-z_]+)\"", text))  # plugin/settings.py
    view = (SRC / "ui" / "settings.py").read_text(encoding="utf-8")  # the names the view asks for
    names |= set(re.findall(r"^\s+\"([a-z_]+)\",$", view, re.MULTILINE))
    from airflow_kafka_events.kafka.topic_plan import TOPIC_OPTIONS
    from airflow_kafka_events.watcher.recheck import RECHECK_OPTION
    from airflow_kafka_events.watcher.stops import STOPS_OPTION

    names |= {option for _, option, _ in TOPIC_OPTIONS} | {RECHECK_OPTION, STOPS_OPTION}
    return names


def test_the_provider_declares_every_option_the_code_reads(reference: ModuleType) -> None:
    read = _options_the_code_reads()
    assert {"ui_window_minutes", "stream_outage_timeout", "asset_event_max_extra_bytes"} <= read
    declared = set(reference.config_options())
    assert read - declared == set(), "options the code reads but the provider does not declare"


def test_the_config_reference_has_a_section_per_option(reference: ModuleType) -> None:
    page = reference.airflow_config_page()
    for name, option in reference.config_options().items():
        assert f"\n## {name}\n" in page, name
        assert f"AIRFLOW__KAFKA_EVENTS__{name.upper()}" in page, name
        assert reference._md(option["description"]) in page, name


def test_the_metrics_reference_lists_every_name_with_its_description(reference: ModuleType) -> None:
    import airflow_kafka_events.metrics as metrics

    defined = {v for k, v in vars(metrics).items() if k.isupper() and str(v).startswith("kafka_events.")}
    assert len(defined) >= 16
    documented = reference.metric_definitions()
    assert {name for _, name, _ in documented} == defined
    page = reference.metrics_page()
    for _, name, comment in documented:
        assert comment.count("; ") >= 2, f"{name}: its #: comment must say 'type; tags; what'"
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}"))
        assert comment.split("; ", 2)[2].split()[0].replace("``", "`") in row, name


def test_the_cli_reference_has_every_commands_help(reference: ModuleType) -> None:
    from airflow_kafka_events.cli.main import build_parser

    page = reference.cli_page()
    commands = reference.cli_commands()
    paths = [path for path, _ in commands]
    assert len(paths) == len(set(paths))
    expected = {"airflow-kafka-events", "airflow-kafka-events emit", "airflow-kafka-events bridge"}
    expected |= {f"airflow-kafka-events kafka {c}" for c in ("start", "stop", "status", "fetch")}
    expected |= {f"airflow-kafka-events dlq {c}" for c in ("ls", "show", "replay")}
    expected |= {f"airflow-kafka-events streams {c}" for c in ("ls", "show", "tail")}
    expected |= {"airflow-kafka-events topics ensure", "airflow-kafka-events replay-assets"}
    assert expected <= set(paths)
    for path, parser in commands:
        assert f"\n## {path}\n" in page, path
        assert reference.cli_help(parser).rstrip() in page, path
    # every command the parser accepts is a leaf or a group the page walked into
    parser = build_parser()
    for path in paths[1:]:
        words = path.split()[1:]
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args([*words, "--help"])
        assert exit_info.value.code == 0, path


def test_the_settings_reference_lists_every_environment_variable(reference: ModuleType) -> None:
    read = set(re.findall(r"\"((?:AIRFLOW_KAFKA_EVENTS_|KAFKA_BOOTSTRAP_)[A-Z_]*[A-Z])\"", _source_text()))
    from airflow_kafka_events.bridge import config as bridge_config

    read |= {v for k, v in vars(bridge_config).items() if k.startswith("ENV_") and not v.endswith("_")}
    page = reference.settings_page()
    for variable in sorted(read):
        assert f"| `{variable}` |" in page, variable
    for variable, _module, meaning in reference.environment_variables():
        assert meaning, f"{variable}: its ENV_ constant needs a #: comment saying what it is"


def _nav_pages(nav: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_nav_lists_every_page_once(reference: ModuleType) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = _nav_pages(config["nav"])
    assert len(pages) == len(set(pages))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert set(pages) == on_disk | set(reference.PAGES)
    assert "Architecture" in {next(iter(e)) for e in config["nav"] if isinstance(e, dict)}
    assert config["hooks"] == ["scripts/docs_reference.py"]
    assert config["theme"]["font"] is False, "the build must not fetch web fonts"


def test_the_readme_is_a_landing_page_that_links_the_site() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    # the two commands stay the first lines
    assert lines[0] == "# airflow-kafka-events" and lines[2] == "```bash" and lines[5] == "```"
    assert lines[3].startswith("make demo   # sets everything up")
    assert lines[4].startswith("make test   # sets everything up and runs the whole test suite")
    text = "\n".join(lines)
    linked = set(re.findall(r"\]\(docs/([a-z0-9-]+\.md)\)", text))
    assert linked, "the README links the documentation's pages"
    for page in linked:
        assert (DOCS / page).is_file(), page
    feature_pages = {"streaming-triggers.md", "stream-consumers.md", "task-iteration.md", "asset-events.md"}
    assert feature_pages | {"security.md", "configuration.md", "changelog.md"} <= linked


def test_the_declared_defaults_are_the_ones_the_code_uses(reference: ModuleType) -> None:
    from airflow_kafka_events.assets.validation import DEFAULT_MAX_EXTRA_BYTES
    from airflow_kafka_events.kafka.topic_plan import TOPIC_OPTIONS, WATCHER_STOPS_TOPIC
    from airflow_kafka_events.streams.producing.outage import DEFAULT_OUTAGE_TIMEOUT
    from airflow_kafka_events.streams.producing.writer import DEFAULT_WRITE_WINDOW
    from airflow_kafka_events.ui.settings import ViewSettings

    options = {name: o["default"] for name, o in reference.config_options().items()}
    view = ViewSettings.from_options({})
    assert options["ui_kafka_config_id"] == view.kafka_config_id
    assert int(options["ui_window_minutes"]) == view.window.minutes
    assert int(options["ui_max_records"]) == view.window.max_records
    assert int(options["ui_stuck_after_seconds"]) == view.stuck_after_seconds
    assert options["ui_bridge_group_ids"] == ",".join(view.bridge_group_ids)
    assert (options["ui_freeze_heap"] == "true") is view.freeze_heap
    assert options["replay_extra_target_topics"] == ",".join(sorted(view.replay_extra_target_topics))
    assert int(options["asset_event_max_extra_bytes"]) == DEFAULT_MAX_EXTRA_BYTES
    assert options["watcher_stops_topic"] == WATCHER_STOPS_TOPIC
    assert float(options["stream_outage_timeout"]) == DEFAULT_OUTAGE_TIMEOUT
    assert int(options["stream_write_window"]) == DEFAULT_WRITE_WINDOW
    assert options["triggerer_freeze_heap"] == "true"
    for _, option, default in TOPIC_OPTIONS:
        assert options[option] == (default or options["trigger_events_topic"]), option
