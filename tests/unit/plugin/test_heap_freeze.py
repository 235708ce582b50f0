"""The view's app freezes the api-server's heap at its first request (``gc.freeze``), once.

Run in a subprocess: the collector's state is the process's, and pytest's own must stay as it is.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

CODE = """
import gc
from fastapi.testclient import TestClient
from airflow_kafka_events.plugin.app import create_app
from airflow_kafka_events.plugin.security import VIEW

app = create_app()
app.dependency_overrides[VIEW.dependency] = lambda: None
assert gc.get_freeze_count() == 0
client = TestClient(app)
assert client.get("/", follow_redirects=False).status_code == 307
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen  # everything alive at the first request
made_later = [[n] for n in range(50_000)]
assert client.get("/", follow_redirects=False).status_code == 307
# frozen objects may still die by reference count; nothing made later joins them
assert gc.get_freeze_count() <= frozen, "frozen again at a later request"
print("ok")
"""


def test_the_first_request_freezes_the_heap_once():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.splitlines()[-1:] == ["ok"], result.stderr[-3000:]
