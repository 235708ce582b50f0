"""``[core] hostname_callable`` of the production topology's Celery workers.

Both workers run on one machine, so the default (the machine's FQDN) would give every task instance
the same ``hostname``.  Each worker's environment names it (``AIRFLOW_E2E_WORKER_HOSTNAME``, e.g.
``w1``); its task instances record ``w1@<fqdn>``, the worker's Celery node name.
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return f"{os.environ['AIRFLOW_E2E_WORKER_HOSTNAME']}@{socket.getfqdn()}"
