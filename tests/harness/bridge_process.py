"""``airflow-kafka-events bridge`` as a subprocess against an :class:`AirflowStack`.

It posts to the stack's REST API as the simple-auth-manager user ``bridge`` (role ``op``), reading
its password from the stack's passwords file.  Used by the e2e tests and the demo.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.airflow_stack import AirflowStack


class BridgeProcess:
    """One bridge subprocess; its output goes to ``log_path``.

    ``assets`` and ``allow`` become ``--asset`` / ``--allow`` flags; ``extra_args`` are appended.
    ``session.timeout.ms`` is lowered so that a crashed bridge's partitions move on quickly
    (Kafka's default is 45 s).
    """

    def __init__(
        self,
        stack: AirflowStack,
        bootstrap: str,
        *,
        topic: str,
        dlq: str,
        group: str,
        log_path: Path,
        assets: Sequence[str] = (),
        allow: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.log_path = log_path
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
        environ.update(
            {
                "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE": str(stack.passwords_file),
                "PYTHONUNBUFFERED": "1",
                **(env or {}),
            }
        )
        argv = [
            sys.executable,
            "-m",
            "airflow_kafka_events.cli.main",
            "bridge",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--dlq-topic",
            dlq,
            "--api-url",
            stack.base_url,
            "--username",
            "bridge",
            "--property",
            "session.timeout.ms=6000",
        ]
        for pattern in assets:
            argv += ["--asset", pattern]
        for rule in allow:
            argv += ["--allow", rule]
        argv += list(extra_args)
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            argv,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the bridge did not exit within {timeout}s:\n{self.log()[-4000:]}"
            ) from None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM: the bridge finishes and commits the event in flight, then exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()
        return self.proc.returncode
