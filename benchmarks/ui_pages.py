"""B10: the Kafka Events view's pages, answered by a real api-server, with 100,000 envelopes per topic.

The streams' answers (the Streams list, the task-instance tabs, Health) read the stream
index (``[kafka_events] stream_index_topic``, compacted): ``--streams`` streams of the trigger events
topic each have the index records their trigger writes (start, halfway, end; spread over the last
24 hours) and one consumer's (its ``consume`` task), so the list holds every stream of the last 24
hours whatever the topic holds.  ``--envelopes 1000000 --streams 10000`` is the issue's scale
(``--other-envelopes`` fills the asset-event and dead-letter topics with fewer).

One broker (``KAFKA_BOOTSTRAP_SERVERS`` or the local one) and one Airflow deployment
(``tests/harness/airflow_stack.py``) whose view reads three 3-partition topics of its own.  First a
real DAG run of ``b10_stream`` writes the old stream (its ``produce`` task defers to a streaming
trigger of 100 pages, then reads them back), then each topic is filled with ``--envelopes``
records after it before the pages are asked:

* trigger events: ``--streams`` streams (default ``--envelopes / 100``) of ``--envelopes /
  --streams`` pages each (~200-byte payloads, keyed by stream id as the streaming trigger writes
  them, the last one of each an end marker), and their stream index records;
* asset events: asset event envelopes of 50 assets (``external.build_envelope``, keyed by asset);
* dead letters: a dead letter of an asset event per record (the original value and headers plus
  the ``x-*`` headers of ``dlq.dead_letter_headers``), reasons alternating.

Then, as the admin user (a bearer token, no browser), every page is asked ``--rounds`` times in
turn after one warm-up round: the four lists, a stream (the DAG run's old one, the whole fill
after it, at the location a listing links it with -- ``?partition=&offset=`` of its
``StreamOverview``, taken once before the rounds from the per-key lookup, as a listing whose window
holds the stream has them -- and the same without the hint, as a typed URL or the task-instance
tab opens it: read forward in the time its task instance ran, from Airflow's metadata DB),
a dead letter, its replay confirmation, a filtered dead-letter list that matches nothing (the
whole window is read for it), each the JSON answer the view's React page reads (the app renders
no HTML).  Reported per page: p50 /
p95 / max of the wall time of the HTTP answer, and what the page says it scanned.  The goal: every
page under 300 ms (p95) with the default window (``[kafka_events] ui_max_records``, 1000 per
partition; ``--max-records`` sets it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow_kafka_events.assets.publish import build_envelope, record_key
from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.dead_letters.letter import DeadLetter, dead_letter_headers
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import (
    AssetRef,
    EventSource,
    ProducerIdentity,
    SourceKind,
    TriggerEventEnvelope,
)
from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
from airflow_kafka_events.kafka.producer import close_all_producers, get_producer
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.index.record import (
    ConsumerRecord,
    StreamRecord,
    consumer_key,
    encode_record,
    stream_key,
)
from airflow_kafka_events.streams.progress import lookup_stream
from benchmarks.harness import (
    airflow_stack_class,
    create_topics,
    kafka_broker,
    running_stack,
    say,
    scratch_dir,
)

GOAL_MS = 300.0
PAGES_PER_STREAM = 100
DAG_ID = "b10_ui"
STREAM_DAG_ID = "b10_stream"
#: The DAG of the old stream: one task that defers to a 100-page streaming trigger on the topic.
STREAM_DAG = """
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin
from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger


class PagingProducer(StreamingOperatorMixin, BaseOperator):
    stream_max_events = 200

    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages={pages}, delay=0.01, topic={topic!r}))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        return None


with DAG(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):
    PagingProducer(task_id="produce")
"""


# --------------------------------------------------------------------------- filling the topics
def _pump(producer: Any, topic: str, records: Iterator[tuple[bytes | str, bytes, list]]) -> int:
    futures = []
    count = 0
    for key, value, headers in records:
        futures.append(producer.send(topic, value, key=key, headers=headers, timeout=120.0))
        count += 1
        if len(futures) >= 20_000:
            for future in futures:
                future.result()
            futures.clear()
    for future in futures:
        future.result()
    return count


def _streams(count: int, streams: int) -> Iterator[tuple[bytes | str, bytes, list]]:
    pages = count // streams
    for n in range(streams):
        run_id = f"bench__{n:05d}"
        sid = stream_id(DAG_ID, run_id, "produce")
        producer = ProducerIdentity(DAG_ID, run_id, "produce", -1, 1)
        for i in range(pages):
            payload = {"page": i, "items": [{"id": i * 10 + j, "name": f"item-{j}"} for j in range(5)]}
            last = i == pages - 1
            envelope = TriggerEventEnvelope(
                sid, i, is_last=last, payload=None if last else payload, producer=producer
            )
            yield sid, TRIGGER_EVENT_CODEC.encode(envelope), []


def _asset_envelopes(count: int, topic: str) -> Iterator[tuple[AssetRef, bytes, list]]:
    source = EventSource(SourceKind.EXTERNAL, producer="bench-b10")
    for n in range(count):
        asset = AssetRef(name=f"b10_asset_{n % 50}", uri=f"bench://b10/asset/{n % 50}")
        envelope = build_envelope(
            asset=asset, source=source, partition_key=f"key-{n % 1000}", extra={"n": n, "rows": n % 7}
        )
        headers = [("event_id", envelope.event_id), ("idempotency_key", envelope.idempotency_key)]
        yield asset, ASSET_EVENT_CODEC.encode(envelope, topic=topic), headers


def _index(streams: int, pages: int, topic: str) -> Iterator[tuple[bytes, bytes, list]]:
    """The index records of each stream (start, halfway, end) and of its consumer, over the last 24 h."""
    now = time.time()
    step = 23.5 * 3600 / max(1, streams)
    for n in range(streams):
        run_id = f"bench__{n:05d}"
        sid = stream_id(DAG_ID, run_id, "produce")
        start = now - 23.5 * 3600 + n * step
        record = StreamRecord(
            stream_id=sid,
            topic=topic,
            partition=n % 3,
            attempt=0,
            status="running",
            pages=0,
            updated_at=start,
            started_at=start,
            generation=0,
            dag_id=DAG_ID,
            run_id=run_id,
            task_id="produce",
            map_index=-1,
            try_number=1,
            pages_over_time=((start, 0),),
        )
        yield stream_key(sid), encode_record(record), []
        for at, written, status in ((start + 30, pages // 2, "running"), (start + 60, pages - 1, "finished")):
            record = record.with_pages(at, written, status=status, last_page_at=at, last_sequence=written)
            yield stream_key(sid), encode_record(record), []
        reader = stream_id(DAG_ID, run_id, "consume")
        consumer = ConsumerRecord(
            stream_id=sid,
            consumer_id=reader,
            updated_at=start + 61,
            dag_id=DAG_ID,
            run_id=run_id,
            task_id="consume",
            map_index=-1,
            generation=0,
            attempt=0,
            next_sequence_index=pages,
            finished=True,
            positions_over_time=((start + 31, pages // 3), (start + 61, pages)),
        )
        yield consumer_key(sid, reader), encode_record(consumer), []


def fill(bootstrap: str, topics: dict[str, str], count: int, streams: int, others: int) -> dict[str, float]:
    settings = KafkaSettings({"bootstrap.servers": bootstrap})
    producer = get_producer(settings.producer_config())
    seconds = {}
    started = time.monotonic()
    _pump(producer, topics["trigger"], _streams(count, streams))
    seconds["trigger"] = time.monotonic() - started

    started = time.monotonic()
    _pump(producer, topics["index"], _index(streams, count // streams, topics["trigger"]))
    seconds["index"] = time.monotonic() - started
    count = others

    started = time.monotonic()
    assets = ((record_key(a), v, h) for a, v, h in _asset_envelopes(count, topics["asset"]))
    _pump(producer, topics["asset"], assets)
    seconds["asset"] = time.monotonic() - started

    reasons = (DeadLetterReason.NOT_ALLOWED, DeadLetterReason.SIGNATURE_INVALID, DeadLetterReason.UNDECODABLE)

    def letters() -> Iterator[tuple[bytes, bytes, list]]:
        for n, (asset, value, headers) in enumerate(_asset_envelopes(count, topics["asset"])):
            letter = DeadLetter(
                reason=reasons[n % len(reasons)],
                error_type="BenchError",
                error_message=f"bench dead letter {n}",
                source_topic=topics["asset"],
                source_partition=n % 3,
                source_offset=n // 3,
                consumer="bench-b10",
            )
            yield record_key(asset), value, dead_letter_headers(headers, letter)

    started = time.monotonic()
    _pump(producer, topics["dlq"], letters())
    seconds["dlq"] = time.monotonic() - started
    return seconds


# --------------------------------------------------------------------------- asking the pages
def _scanned(text: str) -> str:
    match = re.search(r"scanned (\d+) record\(s\)[^<]*", text)
    return match.group(0).split(" of topic")[0] if match else "-"


#: Pages reported but not held to the goal (none since the un-hinted stream page reads its task
#: instance's time: every page is bounded).
OUTSIDE_GOAL: frozenset[str] = frozenset()


def measure(stack: Any, pages: dict[str, str], rounds: int) -> dict[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {stack.token('admin')}"}
    times: dict[str, list[float]] = {name: [] for name in pages}
    scanned: dict[str, str] = {}
    for round_no in range(rounds + 1):  # round 0 warms up
        for name, path in pages.items():
            started = time.perf_counter()
            response = stack.client.get(path, headers=headers, timeout=120)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"{path} answered {response.status_code}: {response.text[:500]}")
            if round_no:
                times[name].append(elapsed)
            scanned[name] = _scanned(response.text)
    out = {}
    for name, values in times.items():
        values.sort()
        out[name] = {
            "p50_ms": round(statistics.median(values), 1),
            "p95_ms": round(values[min(len(values) - 1, int(len(values) * 0.95))], 1),
            "max_ms": round(values[-1], 1),
            "scanned": scanned[name],
            "ok": name in OUTSIDE_GOAL or values[min(len(values) - 1, int(len(values) * 0.95))] < GOAL_MS,
        }
    return out


def old_stream(stack: Any) -> str:
    """The stream of a real run of :data:`STREAM_DAG_ID` (written before the topics are filled)."""
    run_id = stack.trigger_dag(STREAM_DAG_ID)
    state = stack.wait_for_dag_run(STREAM_DAG_ID, run_id, timeout=300)
    if state != "success":
        raise RuntimeError(f"{STREAM_DAG_ID} run {run_id} ended {state}: {stack.diagnostics()}")
    return stream_id(STREAM_DAG_ID, run_id, "produce")


def listing_hint(bootstrap: str, topic: str, old: str) -> str:
    """``partition=&offset=`` of the old stream, as a listing's link has them (looked up once, untimed)."""
    location, latest = lookup_stream({"bootstrap.servers": bootstrap}, topic, old, timeout=120.0)
    if latest is None:
        raise RuntimeError(f"stream {old!r} is not in {topic!r}")
    return f"partition={location.partition}&offset={latest.offset}"


def _pages(streams: int, minutes: int, old: str, hint: str) -> dict[str, str]:
    new = stream_id(DAG_ID, f"bench__{streams - 1:05d}", "produce")
    api = "/kafka-events/api"
    tab = f"{api}/streams?dag_id={DAG_ID}&run_id=bench__00002&map_index=%7BMAP_INDEX%7D&task_id="
    return {
        "streams": f"{api}/streams",
        "streams, 1000 rows": f"{api}/streams?limit=1000",
        "streams of a DAG run": f"{api}/streams?dag_id={DAG_ID}&run_id=bench__00002",
        "task-instance tab (producer)": f"{tab}produce",
        "task-instance tab (consumer)": f"{tab}consume",
        "stream (old, as the list links it)": f"{api}/streams/{quote(old, safe='/')}"
        f"?minutes={minutes}&{hint}",
        "stream (old, typed URL: the index's location)": f"{api}/streams/{quote(old, safe='/')}",
        "stream (newest)": f"{api}/streams/{quote(new, safe='/')}",
        "asset events": f"{api}/asset-events",
        "dead letters": f"{api}/dead-letters",
        "dead letters ?reason= (no match)": f"{api}/dead-letters?reason=too-large",
        "dead letter": f"{api}/dead-letters/1/500",
        "replay confirmation": f"{api}/dead-letters/1/500/replay",
        "health": f"{api}/health",
    }


@contextlib.contextmanager
def environment(max_records: int) -> Iterator[tuple[Any, str, dict[str, str]]]:
    run = uuid.uuid4().hex[:8]
    with scratch_dir("bench-b10-") as scratch, kafka_broker(scratch / "kafka") as broker:
        bootstrap = broker.bootstrap
        topics = {
            "trigger": f"bench.b10.trigger.{run}",
            "asset": f"bench.b10.asset.{run}",
            "dlq": f"bench.b10.dlq.{run}",
            "index": f"bench.b10.stream-index.{run}",
        }
        create_topics(
            bootstrap,
            [
                TopicSpec(name, partitions=3, cleanup_policy="compact" if role == "index" else None)
                for role, name in topics.items()
            ],
        )
        env = {
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
            ),
            "AIRFLOW__KAFKA_EVENTS__TRIGGER_EVENTS_TOPIC": topics["trigger"],
            "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC": topics["asset"],
            "AIRFLOW__KAFKA_EVENTS__DLQ_TOPIC": topics["dlq"],
            "AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_TOPIC": topics["index"],
            "AIRFLOW__KAFKA_EVENTS__UI_MAX_RECORDS": str(max_records),
        }
        dags = scratch / "dags"
        dags.mkdir()
        source = STREAM_DAG.format(pages=PAGES_PER_STREAM, topic=topics["trigger"], dag_id=STREAM_DAG_ID)
        (dags / f"{STREAM_DAG_ID}.py").write_text(source)
        stack = airflow_stack_class()(
            home=scratch / "airflow", dags_folder=dags, extra_env=env, users={"admin": "admin"}
        )
        with running_stack(stack, [STREAM_DAG_ID], since=time.monotonic(), timeout=400.0):
            say(f"[airflow] {stack.base_url}")
            try:
                yield stack, bootstrap, topics
            finally:
                close_all_producers(timeout=10)  # the fill's producers, before the stack stops


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks ui-pages", description=__doc__.split("\n")[0])
    parser.add_argument("--envelopes", type=int, default=100_000, help="records of the trigger events topic")
    parser.add_argument("--streams", type=int, default=None, help="streams among them (--envelopes / 100)")
    parser.add_argument(
        "--other-envelopes", type=int, default=None, help="records of the other topics (--envelopes)"
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--max-records", type=int, default=1000, help="[kafka_events] ui_max_records")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(list(argv))
    streams = args.streams or max(1, args.envelopes // PAGES_PER_STREAM)
    others = args.envelopes if args.other_envelopes is None else args.other_envelopes
    with environment(args.max_records) as (stack, bootstrap, topics):
        old = old_stream(stack)
        say(f"[stream]  the old stream {old} was written by a real DAG run; the fill follows it")
        filled_at = time.monotonic()
        filled = fill(bootstrap, topics, args.envelopes, streams, others)
        say(
            f"[fill]    {args.envelopes:,} envelopes of {streams:,} streams, their index records, "
            f"{others:,} asset events and dead letters: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in filled.items())
        )
        minutes = math.ceil((time.monotonic() - filled_at) / 60) + 5  # a link of the list: first_at + margin
        hint = listing_hint(bootstrap, topics["trigger"], old)
        say(f"[hint]    the old stream's link carries ?{hint} (as a listing holding it links it)")
        auth = {"Authorization": f"Bearer {stack.token('admin')}"}
        started = time.perf_counter()
        listed = stack.client.get("/kafka-events/api/streams", headers=auth, timeout=300).json()
        cold_ms = (time.perf_counter() - started) * 1000
        say(f"[index]   first read (the whole index, cold): {cold_ms:.0f} ms; {listed['window_text']}")
        if listed["matched"] < streams:
            raise RuntimeError(
                f"the Streams list holds {listed['matched']} streams, not every one of {streams}"
            )
        figures = measure(stack, _pages(streams, minutes, old, hint), args.rounds)
        found = stack.client.get(
            f"/kafka-events/api/streams/{quote(old, safe='/')}", headers=auth, timeout=120
        )
        say(f"[typed]   the old stream found by {found.json()['found_by']!r}: {found.json()['window_text']}")
        if found.json()["found_by"] != "hint":
            raise RuntimeError("the typed stream URL did not read the stream where the index says it is")
    width = max(map(len, figures))
    say(f"\n{'page':<{width}}  {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}  scanned")
    for name, row in figures.items():
        flag = (
            "  (outside the goal)"
            if name in OUTSIDE_GOAL
            else ""
            if row["ok"]
            else f"  OVER {GOAL_MS:.0f} ms"
        )
        times = f"{row['p50_ms']:>7} {row['p95_ms']:>7} {row['max_ms']:>7}"
        say(f"{name:<{width}}  {times}  {row['scanned']}{flag}")
    result = {
        "benchmark": "B10 ui-pages",
        "at": datetime.now(timezone.utc).isoformat(),
        "envelopes": args.envelopes,
        "streams": streams,
        "other_envelopes": others,
        "index_first_read_ms": round(cold_ms, 1),
        "streams_listed": listed["matched"],
        "max_records": args.max_records,
        "rounds": args.rounds,
        "fill_seconds": filled,
        "pages": figures,
        "load_avg": os.getloadavg(),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(row["ok"] for row in figures.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
