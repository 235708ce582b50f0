"""The "imports no Airflow" check: run code in a fresh interpreter; fail if an ``airflow`` module loaded.

The Airflow-free layers (codec, Kafka I/O, admission, the bridge, external emits) must stay
importable and usable without Airflow; a test states what it imports or does and calls
:func:`run_without_airflow`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

__all__ = ["NO_AIRFLOW_LOADED", "run_without_airflow"]

#: Appended to the code: fails the interpreter when an Airflow module was imported.
NO_AIRFLOW_LOADED = (
    "import sys as _sys\n"
    "_loaded = sorted(m for m in _sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
    "assert not _loaded, f'Airflow modules were imported: {_loaded}'\n"
)


def run_without_airflow(code: str, *, clean_env: bool = False, timeout: float = 120) -> str:
    """Run ``code`` (dedented) then :data:`NO_AIRFLOW_LOADED`; its stdout.  Asserts it succeeded.

    ``clean_env``: without the ``AIRFLOW*`` environment variables (a process outside Airflow).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} if clean_env else None
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + "\n" + NO_AIRFLOW_LOADED],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
