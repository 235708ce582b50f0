"""The demo's last part: the Kafka Events view in the Airflow UI, and keeping the demo open for a look.

:func:`ui_demo` asks every page of the view on the demo's Airflow (as the ``admin`` user, through
the api-server, as the UI's frame does) and prints, per page, its address in the Airflow UI and
what it shows; :func:`stay_open` keeps everything running until Ctrl-C (``make demo KEEP=1``,
``examples/demo.py --keep-running``), after which the caller stops Airflow and the broker as usual.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.airflow_stack import AirflowStack

#: The view's pages: (title, path of the view's app, what the demo checks is on it).
PAGES = (
    ("Streams", "streams", 'class="stream"'),
    ("Asset events", "asset-events", 'class="asset-event"'),
    ("Dead letters", "dead-letters", 'class="dead-letter"'),
    ("Health", "health", 'id="watchers"'),
)
#: Users of the demo's Airflow (simple auth manager): username -> role; passwords ``<name>-password``.
UI_USERS = {"admin": "admin", "bridge": "op", "viewer": "viewer"}


def ui_address(stack: AirflowStack, page: str) -> str:
    """The page's address in the Airflow UI (the navigation bar's "Kafka Events", that tab)."""
    return f"{stack.base_url}/plugin/kafka-events/kafka-events/{page}"


def ui_demo(stack: AirflowStack, say: Any) -> bool:
    """Ask every page as the admin; print where each is in the UI. ``False`` if one is missing."""
    ok = True
    say("[ui]     the Kafka Events view (Airflow UI > Kafka Events), signed in as admin / admin-password:")
    for title, page, marker in PAGES:
        response = stack.api("GET", f"/kafka-events/{page}", user="admin")
        shown = response.status_code == 200 and marker in response.text
        ok = ok and response.status_code == 200
        state = (
            "OK" if shown else ("empty" if response.status_code == 200 else f"HTTP {response.status_code}")
        )
        say(f"[ui]       {title:<13} {ui_address(stack, page)}  ({state})")
    refused = stack.client.get(f"{stack.base_url}/kafka-events/streams", timeout=30).status_code
    say(f"[ui]     without signing in the view answers {refused}; viewer / viewer-password may look only")
    return ok and refused in (401, 403)


def stay_open(stack: AirflowStack, say: Any) -> None:
    """Block until Ctrl-C (SIGINT) or SIGTERM, saying where to look."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        say(f"[demo]   left running for a look: {stack.base_url} (Ctrl-C stops Airflow and the broker)")
        while not stop.wait(1.0):
            pass
        say("[demo]   stopping")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
