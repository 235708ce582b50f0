"""The ``airflow-kafka-events`` command line (entry point: ``cli.main:main``)."""

from __future__ import annotations
