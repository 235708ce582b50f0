"""Handlers of the demo DAGs (importable by dotted path in the workers: the DAGs folder is on sys.path)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def record_pages(events: Any, context: Any) -> None:
    """Append each handled page with the time it was handled; one write per batch."""
    out = Path((context["dag_run"].conf or {})["dir"]) / "handled.jsonl"
    now = time.time()
    lines = (json.dumps({"seq": e.sequence_index, "page": e.payload["page"], "at": now}) for e in events)
    with out.open("a", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines))
