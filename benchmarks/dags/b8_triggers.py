"""B8 trigger: Airflow's own asset-event ceiling, an ``AssetWatcher`` trigger that needs no Kafka.

Imported by dotted path (``b8_triggers.BurstTrigger``) in the triggerer: ``benchmarks/b8`` puts the
DAGs folder on ``PYTHONPATH`` of the Airflow stack it starts.

:class:`BurstTrigger` waits for ``<control_dir>/<name>.go`` (a JSON file written by the
benchmark: ``{"batch": str, "count": int, "rate": float | null, "first": int, "step": int}``),
claims it by renaming it (so a restarted trigger never fires one batch twice), then fires ``count``
``TriggerEvent``\\ s, ``{"b8": batch, "seq": first + i * step, "emitted_at": <ISO UTC>}`` (``first``
0 and ``step`` 1 when absent; one trigger of many numbers its events apart from the others'):
as fast as it can (``rate`` null: one
``asyncio.sleep(0)`` between events, so the triggerer's loop keeps running) or paced at ``rate``
events per second.  Every start of the trigger writes ``<control_dir>/<name>.ready``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

CLAIM_POLL_INTERVAL = 0.02


class BurstTrigger(BaseEventTrigger):
    """Fire batches of asset events on request, without any broker (see the module docstring)."""

    def __init__(self, control_dir: str, name: str) -> None:
        super().__init__()
        self.control_dir = control_dir
        self.name = name

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "b8_triggers.BurstTrigger", {"control_dir": self.control_dir, "name": self.name}

    def _claim(self) -> dict[str, Any] | None:
        go = Path(self.control_dir) / f"{self.name}.go"
        taken = go.with_name(f"{self.name}.taken-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(go, taken)
        except FileNotFoundError:
            return None
        return json.loads(taken.read_text())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        ready = Path(self.control_dir) / f"{self.name}.ready"
        ready.write_text(json.dumps({"pid": os.getpid(), "at": time.time()}))
        while True:
            spec = self._claim()
            if spec is None:
                await asyncio.sleep(CLAIM_POLL_INTERVAL)
                continue
            batch, count, rate = str(spec["batch"]), int(spec["count"]), spec.get("rate")
            first, step = int(spec.get("first", 0)), int(spec.get("step", 1))
            started = time.monotonic()
            for seq in range(count):
                if rate:
                    due = started + seq / float(rate)
                    if due > time.monotonic():
                        await asyncio.sleep(due - time.monotonic())
                else:
                    await asyncio.sleep(0)
                emitted_at = datetime.now(timezone.utc).isoformat(timespec="microseconds")
                yield TriggerEvent({"b8": batch, "seq": first + seq * step, "emitted_at": emitted_at})
