"""The demo's last part: the Kafka Events view in the Airflow UI, and keeping the demo open for a look.

:func:`refused_event_demo` (while the partition bridge runs) publishes an asset event from a
producer the bridge does not allow, so the view has a dead letter to show; :func:`ui_demo` asks
every page of the view on the demo's Airflow (as the ``admin`` user, through the api-server, as
the UI's frame does) and prints, per page, its address in the Airflow UI and what it shows;
:func:`save_screenshots` (``examples/demo.py --screenshots DIR``) saves the documentation's pictures of
the pages from the demo's data with headless Chromium; :func:`stay_open` keeps everything running
until Ctrl-C (``make demo KEEP=1``, ``examples/demo.py --keep-running``), after which the caller
stops Airflow and the broker as usual.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
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


#: The producer the demo's bridge does not allow (its allowlist names the ingestion DAG only).
REFUSED_PRODUCER = "adhoc-backfill-script"


def refused_event_demo(bootstrap: str, say: Any, *, topic: str, dlq_topic: str) -> bool:
    """An event of ``orders_batches`` the running bridge refuses (its producer is not allowed).

    Waits (with a deadline) until the bridge has written the dead letter, reason ``not-allowed``.
    """
    from airflow_kafka_events.assets.publish import emit
    from airflow_kafka_events.ui.inspection import ScanWindow, list_dead_letters

    receipt = emit(
        "s3://lake/orders/batches",  # examples/dags/process_batch_partitioned.py
        name="orders_batches",
        partition_key="batch-0044",
        extra={"rows": 120, "note": "backfilled by hand"},
        producer=REFUSED_PRODUCER,
        topic=topic,
        bootstrap_servers=bootstrap,
    )
    window = ScanWindow(since=datetime.now(timezone.utc) - timedelta(hours=1), max_records=1000)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listing = list_dead_letters({"bootstrap.servers": bootstrap}, dlq_topic, window=window)
        found = [r for r in listing.records if r.event_id == receipt.event_id]
        if found:
            say(
                f"[assets] an event from {REFUSED_PRODUCER!r} (not allowed) became dead letter "
                f"{dlq_topic}[{found[0].partition}]@{found[0].offset}, reason {found[0].reason}"
            )
            return True
        time.sleep(0.5)
    say(f"[assets] FAILED: no dead letter of event {receipt.event_id} from {REFUSED_PRODUCER!r} within 60 s")
    return False


#: When the demo started (examples/demo.py imports this module first): the pictures show the records
#: written since, not those earlier demos left on the demo's broker.
STARTED = time.monotonic()


def save_screenshots(stack: AirflowStack, target: Path, say: Any) -> bool:
    """``ui-<page>.png`` of every page of the view, from the demo's data, in ``target``."""
    from e2e.ui.browser import missing_binaries
    from e2e.ui.screenshots import take_screenshots

    missing = missing_binaries()
    if missing:
        say(
            f"[ui]     FAILED: no screenshots, missing {', '.join(missing)} "
            "(apt-get install chromium chromium-driver)"
        )
        return False
    minutes = math.ceil((time.monotonic() - STARTED) / 60) + 1
    saved = take_screenshots(stack.base_url, target, minutes=minutes)
    say(f"[ui]     screenshots: {', '.join(str(p) for p in saved)}")
    wanted = {f"ui-{page}.png" for _, page, _ in PAGES} | {"ui-streams-dark.png", "ui-dead-letter-dark.png"}
    return wanted <= {p.name for p in saved}


def ui_address(stack: AirflowStack, page: str) -> str:
    """The page's address in the Airflow UI (the navigation bar's "Kafka Events", that tab)."""
    return f"{stack.base_url}/plugin/kafka-events/{page}"


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
