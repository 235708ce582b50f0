"""Every example DAG file parses and serializes without network access or running services."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dags"


def test_every_example_dag_parses_and_serializes():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert {"demo_streaming", "demo_iteration", "ingest_batches", "investigate_failure"} <= set(bag.dag_ids)
    for dag_id, dag in bag.dags.items():
        assert DagSerialization.from_dict(DagSerialization.to_dict(dag)).dag_id == dag_id
