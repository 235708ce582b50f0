"""B8 trigger: Airflow's own asset-event ceiling, an ``AssetWatcher`` trigger that needs no Kafka.

Imported by dotted path (``b8_triggers.BurstTrigger``) in the triggerer: ``benchmarks/b8`` puts the
DAGs folder on ``PYTHONPATH`` of the Airflow stack it starts.

:class:`BurstTrigger` looks for ``<control_dir>/<name>.go`` every ``poll_interval`` seconds (a JSON
file written by the benchmark: ``{"batch": str, "count": int, "rate": float | null, "first": int,
"step": int, "start_at": float | null}``), claims it by renaming it (so a restarted trigger never
fires one batch twice), waits until ``start_at`` (a UNIX time: every trigger of a phase starts its
share of a batch at the same moment, however late within its poll interval it saw the file), then
fires ``count`` ``TriggerEvent``\\ s, ``{"b8": batch, "seq": first + i * step, "emitted_at": <ISO
UTC>}`` (``first`` 0 and ``step`` 1 when absent; one trigger of many numbers its events apart from
the others'; with ``"pad": n`` in the request each event also carries ``"pad"``, ``n`` characters,
so Airflow persists an event as large as a Kafka watcher's, and logs it without them as a watcher's
event logs without its payload): as fast as it can (``rate`` null: one ``asyncio.sleep(0)`` between
events, so the triggerer's loop keeps running) or event ``seq`` at ``start_at + seq / rate``,
``rate`` being the batch's rate over all triggers sharing it (so the batch is paced as a whole
however many triggers share it). Every start of the trigger writes ``<control_dir>/<name>.ready``."""

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

DEFAULT_POLL_INTERVAL = 0.02


class BurstTrigger(BaseEventTrigger):
    """Fire batches of asset events on request, without any broker (see the module docstring)."""

    def __init__(self, control_dir: str, name: str, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        super().__init__()
        self.control_dir = control_dir
        self.name = name
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "b8_triggers.BurstTrigger", {
            "control_dir": self.control_dir,
            "name": self.name,
            "poll_interval": self.poll_interval,
        }

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
                await asyncio.sleep(self.poll_interval)
                continue
            batch, count, rate = str(spec["batch"]), int(spec["count"]), spec.get("rate")
            first, step = int(spec.get("first", 0)), int(spec.get("step", 1))
            start_at = float(spec.get("start_at") or time.time())
            pad = "x" * int(spec.get("pad") or 0)
            for i in range(count):
                seq = first + i * step
                due = start_at + seq / float(rate) if rate else start_at
                if due > time.time():
                    await asyncio.sleep(due - time.time())
                else:
                    await asyncio.sleep(0)
                emitted_at = datetime.now(timezone.utc).isoformat(timespec="microseconds")
                if pad:
                    yield PaddedEvent({"b8": batch, "seq": seq, "emitted_at": emitted_at, "pad": pad})
                else:
                    yield TriggerEvent({"b8": batch, "seq": seq, "emitted_at": emitted_at})


class PaddedEvent(TriggerEvent):
    """A padded ceiling event: persisted whole, logged without its padding (as a watcher's event is
    logged without its payload)."""

    def __repr__(self) -> str:
        shown = {key: value for key, value in self.payload.items() if key != "pad"}
        return f"TriggerEvent<{shown!r}>"
