"""operators of airflow-kafka-events (filled in by the streaming features)."""

from __future__ import annotations
