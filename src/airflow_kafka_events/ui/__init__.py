"""What people see: the Airflow view (``ui.plugin``) and the inspection it shares with the CLI."""

from __future__ import annotations
