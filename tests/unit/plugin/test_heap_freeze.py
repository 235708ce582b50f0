"""The view's app freezes the api-server's heap at its first request (``gc.freeze``), once, after
collecting its garbage; ``[kafka_events] ui_freeze_heap = false`` leaves the collector alone.

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
from airflow_kafka_events.ui.app import create_app
from airflow_kafka_events.ui.security import VIEW

class Cycle:
    def __init__(self):
        self.me = self


app = create_app()
app.dependency_overrides[VIEW.dependency] = lambda: None
assert gc.get_freeze_count() == 0
client = TestClient(app)
gc.disable()  # no automatic collection: only the app's own can reclaim this cycle before the freeze
Cycle()  # garbage in a reference cycle when the first request comes
assert client.get("/", follow_redirects=False).status_code == 307
gc.enable()
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen  # everything alive at the first request
made_later = [[n] for n in range(50_000)]
assert client.get("/", follow_redirects=False).status_code == 307
# frozen objects may still die by reference count; nothing made later joins them
assert gc.get_freeze_count() <= frozen, "frozen again at a later request"
gc.unfreeze()  # what was frozen is seen again (get_objects skips the frozen)
assert not any(isinstance(o, Cycle) for o in gc.get_objects()), "garbage was frozen"
print("ok")
"""


OFF = """
import gc
from fastapi.testclient import TestClient
from airflow_kafka_events.ui.app import create_app
from airflow_kafka_events.ui.security import VIEW

app = create_app()
app.dependency_overrides[VIEW.dependency] = lambda: None
client = TestClient(app)
assert client.get("/", follow_redirects=False).status_code == 307
assert gc.get_freeze_count() == 0, gc.get_freeze_count()
print("ok")
"""


def _run(code: str, **env: str) -> None:
    import os

    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert result.returncode == 0 and result.stdout.splitlines()[-1:] == ["ok"], result.stderr[-3000:]


def test_the_first_request_collects_then_freezes_the_heap_once():
    _run(CODE)


def test_ui_freeze_heap_false_leaves_the_collector_alone():
    _run(OFF, AIRFLOW__KAFKA_EVENTS__UI_FREEZE_HEAP="false")
