"""An in-memory stand-in for Airflow's task state store (what a stream consumer keeps its
checkpoint in)."""

from __future__ import annotations

import json
from typing import Any


class DictStore:
    """Keeps JSON text, as Airflow's task state store keeps JSON values; records every write."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.writes: list[tuple[str, Any]] = []

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.data[key]) if key in self.data else default

    def set(self, key: str, value: Any) -> None:
        self.data[key] = json.dumps(value)
        self.writes.append((key, json.loads(self.data[key])))
