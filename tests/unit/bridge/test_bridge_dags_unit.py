"""The bridge's example DAGs and e2e DAGs parse, serialize, and schedule on the right asset."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
FILES = {
    "ingest_batches": ROOT / "examples" / "dags" / "ingest_batches.py",
    "process_batch_partitioned": ROOT / "examples" / "dags" / "process_batch_partitioned.py",
    "e2e_bridge_ingest": ROOT / "tests" / "e2e" / "bridge" / "dags" / "e2e_bridge_ingest.py",
    "e2e_bridge_process_batch": ROOT / "tests" / "e2e" / "bridge" / "dags" / "e2e_bridge_process_batch.py",
}


def test_dag_files_parse_and_serialize(tmp_path: Path):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    for path in FILES.values():
        shutil.copy(path, tmp_path / path.name)
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == sorted(FILES)
    for dag_id in FILES:
        serialized = DagSerialization.from_dict(DagSerialization.to_dict(bag.dags[dag_id]))
        if dag_id.startswith(("process", "e2e_bridge_process")):
            assert serialized.timetable.partitioned is True, dag_id
            assets = [key.name for key, _ in serialized.timetable.asset_condition.iter_assets()]
            assert assets == (["orders_batches"] if dag_id.startswith("process") else ["e2e_bridge_batches"])
