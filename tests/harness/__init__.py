"""Test harness that runs real Airflow components (api-server, scheduler, triggerer, dag-processor)."""

from __future__ import annotations

from .airflow_stack import COMPONENTS, AirflowStack, AirflowStackError

__all__ = ["COMPONENTS", "AirflowStack", "AirflowStackError"]
