"""The view's committed JavaScript bundle is what ``ui/src`` builds to, and renders no raw HTML."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_kafka_events.ui.views.bundle import BUNDLE

pytestmark = pytest.mark.unit

UI = Path(__file__).resolve().parents[3] / "ui"


def test_the_committed_bundle_matches_a_fresh_build():
    if not (UI / "node_modules" / "esbuild").is_dir() or shutil.which("node") is None:
        if os.environ.get("CI"):
            pytest.fail("ui/node_modules is missing: scripts/bootstrap.sh runs npm ci in ui/ (node 18+)")
        pytest.skip("no node or ui/node_modules (make setup installs them when npm is available)")
    result = subprocess.run(
        ["node", "build.mjs", "--check"], cwd=UI, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr or result.stdout


def test_the_bundle_takes_react_router_and_chakra_from_airflow_and_sets_no_raw_html():
    text = BUNDLE.read_text(encoding="utf-8")
    for name in ("React", "ReactJSXRuntime", "ReactRouterDOM", "ChakraUI"):
        assert f'globalThis["{name}"]' in text, name
    assert "globalThis.AirflowPlugin = " in text
    # Kafka data is rendered as text only (React escapes it)
    assert "dangerouslySetInnerHTML" not in text and "innerHTML" not in text
    for src in (UI / "src").rglob("*.js*"):
        assert "dangerouslySetInnerHTML" not in src.read_text(encoding="utf-8"), src
