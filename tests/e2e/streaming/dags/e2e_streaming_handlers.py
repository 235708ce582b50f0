"""Batch handlers of the streaming e2e DAGs, importable by dotted path in the workers.

Every handler writes under the directory given as ``dir`` in the DAG run's conf.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The consumer of ``e2e_stream_live`` opens this gate once it handled this page.
GATE_AFTER_PAGE = 10


def run_dir(context: Any) -> Path:
    return Path((context["dag_run"].conf or {})["dir"])


def append_pages(path: Path, pages: list[int]) -> None:
    """One write per batch: a batch takes effect entirely or not at all."""
    with path.open("a", encoding="utf-8") as out:
        out.write("".join(f"{page}\n" for page in pages))


def record_and_open_gate(events: Any, context: Any) -> None:
    """Record the pages; once page ``GATE_AFTER_PAGE`` is handled, create the producer's gate file."""
    directory = run_dir(context)
    pages = [event.payload["page"] for event in events]
    append_pages(directory / "consumer.txt", pages)
    gate = directory / "gate"
    if pages[-1] >= GATE_AFTER_PAGE and not gate.exists():
        gate.write_text(f"{pages[-1]}\n", encoding="utf-8")
