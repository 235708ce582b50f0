"""Airflow's configuration read without importing Airflow (for the CLI, the bridge and their metrics).

An option is looked up like Airflow does for its two most common sources: the environment variable
``AIRFLOW__<SECTION>__<KEY>`` first, then ``airflow.cfg`` (``$AIRFLOW_CONFIG``, else
``$AIRFLOW_HOME/airflow.cfg``, else ``~/airflow/airflow.cfg``).  Secrets backends, ``_CMD`` and
``_SECRET`` variants are Airflow's own and are not read here.  Nothing is read at import time.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path

_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})


def airflow_cfg_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where Airflow reads its ``airflow.cfg`` from."""
    env = os.environ if environ is None else environ
    if env.get("AIRFLOW_CONFIG"):
        return Path(env["AIRFLOW_CONFIG"]).expanduser()
    home = env.get("AIRFLOW_HOME") or "~/airflow"
    return Path(home).expanduser() / "airflow.cfg"


def _from_file(path: Path, section: str, key: str) -> str | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error):
        return None
    return parser.get(section, key, fallback=None)


def airflow_option(
    section: str, key: str, default: str | None = None, *, environ: Mapping[str, str] | None = None
) -> str | None:
    """``[section] key`` from ``AIRFLOW__SECTION__KEY``, else airflow.cfg, else ``default``."""
    env = os.environ if environ is None else environ
    value = env.get(f"AIRFLOW__{section.upper()}__{key.upper()}")
    if value is not None:
        return value
    value = _from_file(airflow_cfg_path(env), section, key)
    return default if value is None else value


def as_bool(value: str | None, default: bool = False) -> bool:
    """Airflow's spelling of booleans (``True``, ``false``, ``1``, ...); ``default`` when unset."""
    if value is None:
        return default
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return default
