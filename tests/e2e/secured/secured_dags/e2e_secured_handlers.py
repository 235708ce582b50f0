"""Handler of ``e2e_secured_streaming`` (importable by dotted path: the DAGs folder is on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def record_pages(events: Any, context: Any) -> None:
    """Append each handled page's sequence index to ``<dir>/handled.jsonl``; one write per batch."""
    out = Path(context["dag_run"].conf["dir"]) / "handled.jsonl"
    lines = "".join(f"{json.dumps({'seq': e.sequence_index, 'page': e.payload['page']})}\n" for e in events)
    with out.open("a", encoding="utf-8") as f:
        f.write(lines)
