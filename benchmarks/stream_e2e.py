"""B12: one stream end to end under a real Airflow, pages/s against raw confluent-kafka in the same run.

One broker and one Airflow deployment (as in B1: api-server, scheduler with the LocalExecutor,
triggerer, dag-processor on SQLite) run ``b12_stream_e2e`` (``benchmarks/dags/b12_stream_e2e.py``):
``produce`` defers once to ``CountingPagesTrigger``, which writes ``--pages`` pages of about
``--payload-bytes`` bytes of JSON as fast as it can (no delay); the pages are handled by no-op
handlers that only record when each batch was handed over:

  live    ``consume``, a ``StreamConsumerOperator`` reading the stream by reference in the worker
          while it is written (and ``produce``'s own resume after the trigger ends);
  resume  ``consume`` skipped: ``produce``'s resume (``handle_trigger_events``) is the only reader.

End to end = the first page's write (its envelope's ``emitted_at``, stamped before the send) to
the last page handled (the handler's clock, the same machine); pages/s = pages / that.  Beside it,
in the same process and against the same broker, **raw**: confluent-kafka produces the same
number of records of the stream's envelope size to a topic of one partition (pipelined,
``acks=all``, idempotent, ``linger.ms=5``), flushes, and a consumer reads them back
(``consume(500)``, no decode): pages / (produce + consume seconds), before and after every
Airflow run.  The ratio is e2e pages/s over the mean of the raw runs around it.

The triggerer's event loop: Airflow's triggerer runs a watchdog that sleeps 0.1 s and, when it
woke more than ``[triggerer] blocked_main_thread_warning_threshold`` (0.2 s) late, logs
"Triggerer's async thread was blocked for ..." and increments the StatsD counter
``triggers.blocked_main_thread``.  The deployment sends its StatsD metrics to a UDP listener of
this process; per run both the counter's increments and the log lines are reported.
Last, **alone**: the same trigger's ``run()`` in this process's own event loop, no Airflow (pages/s,
CPU per page, the loop's longest lag).  ``--linger-ms`` sets ``linger.ms`` on the deployment's
Kafka connection (and the trigger alone's): the stream producer's is 1 unless the connection sets
one (``0``: what it was before the CPU cuts of B12 at 100,000 pages).  ``--without-airflow
--profile FILE`` runs the trigger alone under cProfile.  An uncounted 100-page warm-up run comes
first: the triggerer's first streaming trigger, whose classes Airflow imports on the event loop (its
blocked counts are reported too).
Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.  Not run in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity, TriggerEventEnvelope
from airflow_kafka_events.kafka import KafkaSettings, TopicSpec, ensure_topics
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.index.options import index_topic
from airflow_kafka_events.streams.producing.trigger import DEFAULT_TOPIC
from benchmarks.dags.b12_stream_e2e import padding
from benchmarks.harness import (
    Environment,
    airflow_environment,
    create_topics,
    kafka_broker,
    loadavg,
    say,
    write_results,
)
from benchmarks.stream_read_throughput import read_raw

DAG_ID = "b12_stream_e2e"
PRODUCER, CONSUMER = "produce", "consume"
MODES = ("live", "resume")
BLOCKED_LINE = "Triggerer's async thread was blocked for"
BLOCKED_METRIC = "triggers.blocked_main_thread"


# ====================================================================== StatsD listener
class StatsdCounter:
    """A UDP StatsD sink that adds up the increments of the counters it is asked about."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.counts: dict[str, int] = dict.fromkeys(names, 0)
        self.lines = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="b12-statsd", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            for line in data.decode("utf-8", "replace").splitlines():
                self._count(line)

    def _count(self, line: str) -> None:
        name, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        with self._lock:
            self.lines += 1
            for wanted in self.names:
                if kind.startswith("c") and (name == wanted or name.endswith("." + wanted)):
                    try:
                        self.counts[wanted] += int(float(value))
                    except ValueError:
                        pass

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()


# ====================================================================== raw produce + consume
def envelope_value(pages: int, payload_bytes: int) -> bytes:
    """An envelope of the stream's size (a middle page, the payload the DAG writes)."""
    payload = {"pad": padding(pages, payload_bytes), "page": pages // 2, "pages": pages}
    identity = ProducerIdentity(DAG_ID, "manual__2026-12-03T00:00:00.000000+00:00", PRODUCER, -1, 1)
    envelope = TriggerEventEnvelope(
        stream_id(DAG_ID, "manual__2026-12-03T00:00:00.000000+00:00", PRODUCER, -1),
        pages // 2,
        is_last=False,
        payload=payload,
        producer=identity,
        resume_cursor=str(pages // 2 + 1),
        metadata={"generation": "0", "first_offset": "123456"},
    )
    return TRIGGER_EVENT_CODEC.encode(envelope)


def raw_roundtrip(settings: KafkaSettings, n: int, value: bytes) -> dict[str, Any]:
    """Produce ``n`` copies of ``value`` (pipelined, flushed), then consume them all: the times."""
    from confluent_kafka import Producer

    from airflow_kafka_events.kafka import delete_topics

    admin = AdminClient(settings.admin_config())
    topic = f"bench-b12-raw-{uuid.uuid4().hex[:8]}"
    ensure_topics(admin, [TopicSpec(topic, partitions=1, max_message_bytes=8 * 1024 * 1024)])
    key = b"b12-raw"
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    try:
        producer = Producer({**settings.producer_config(), "linger.ms": 5})
        started = time.perf_counter()
        for _ in range(n):
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(300) or failures:
            raise RuntimeError(f"raw produce failed: {failures[:3]}")
        produced = time.perf_counter()
        seen = read_raw(settings.consumer_config("bench-b12"), topic, n, decode=False)
        consumed = time.perf_counter()
    finally:
        delete_topics(admin, [topic])
    produce_s, consume_s = produced - started, consumed - produced
    return {
        "records": seen,
        "value_bytes": len(value),
        "produce_s": round(produce_s, 3),
        "consume_s": round(consume_s, 3),
        "pages_per_s": round(n / (produce_s + consume_s), 1),
        "load": loadavg(),
    }


# ====================================================================== the trigger alone
def trigger_alone(
    bootstrap: str, linger_ms: int | None, pages: int, payload_bytes: int, profile: Path | None = None
) -> dict[str, Any]:
    """``CountingPagesTrigger.run()`` in this process's own event loop (no Airflow), the same pages:
    pages/s, this process's CPU per page, and the loop's lag as Airflow's watchdog sees it.

    ``profile``: run it under cProfile (the event loop's thread only; librdkafka's and the producer's
    poller threads are not seen) and write the statistics there (``python -m pstats`` reads them)."""
    import asyncio
    import cProfile

    from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger

    extra: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if linger_ms is not None:
        extra["linger.ms"] = linger_ms
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": extra})
    identity = {"dag_id": DAG_ID, "run_id": "alone", "task_id": PRODUCER, "map_index": -1, "try_number": 1}
    trigger = CountingPagesTrigger(
        pages=pages,
        extra={"pad": padding(pages, payload_bytes)},
        trigger_run_id=f"b12-alone-{uuid.uuid4().hex[:8]}",
        producer_identity=identity,
    )
    lags: list[float] = []

    async def watchdog() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.1)
            lags.append(time.monotonic() - before - 0.1)

    async def run() -> tuple[float, float]:
        watching = asyncio.create_task(watchdog())
        started, cpu = time.perf_counter(), time.process_time()
        async for _ in trigger.run():
            pass
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        watching.cancel()
        return elapsed, cpu

    profiler = None if profile is None else cProfile.Profile()
    if profiler is not None:
        profiler.enable()
    elapsed, cpu = asyncio.run(run())
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    return {
        "pages": pages,
        "seconds": round(elapsed, 3),
        "pages_per_s": round(pages / elapsed, 1),
        "cpu_us_per_page": round(cpu / pages * 1e6, 1),
        "loop_lag_max_ms": round(max(lags, default=0.0) * 1000, 1),
        "loop_lags_over_0_1_s": sum(lag > 0.1 for lag in lags),
        "load": loadavg(),
    }


# ====================================================================== one Airflow run
@dataclass
class E2eRun:
    mode: str
    run_id: str
    state: str
    pages: int
    envelope_bytes: int | None = None
    first_write: float | None = None  # page 0's emitted_at (epoch s)
    last_write: float | None = None  # the last page's emitted_at
    end_marker: float | None = None  # the terminal marker's emitted_at
    handled: dict[str, dict[str, Any]] = field(default_factory=dict)  # task -> first/last/pages/batches
    e2e_s: float | None = None
    e2e_pages_per_s: float | None = None
    write_pages_per_s: float | None = None
    blocked_log_lines: int = 0
    blocked_metric: int = 0
    blocked_seconds: list[float] = field(default_factory=list)
    statsd_lines: int = 0
    wall_s: float = 0.0
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)


def partition_ends(settings: KafkaSettings) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings.consumer_config(f"bench-b12-ends-{uuid.uuid4().hex[:8]}"))
    try:
        meta = consumer.list_topics(DEFAULT_TOPIC, timeout=30)
        ends = {}
        for p in meta.topics[DEFAULT_TOPIC].partitions:
            ends[p] = consumer.get_watermark_offsets(TopicPartition(DEFAULT_TOPIC, p), timeout=30)[1]
        return ends
    finally:
        consumer.close()


def stream_times(
    settings: KafkaSettings, key: str, since: dict[int, int], timeout: float = 120.0
) -> dict[str, Any]:
    """The first page's, the last page's and the end marker's ``emitted_at`` of the (finished) stream
    ``key``, read from the offsets ``since`` on to the partitions' ends (keys compared, three decoded)."""
    from confluent_kafka import Consumer, TopicPartition

    wanted = key.encode()
    consumer = Consumer(settings.consumer_config(f"bench-b12-read-{uuid.uuid4().hex[:8]}"))
    ends = {p: consumer.get_watermark_offsets(TopicPartition(DEFAULT_TOPIC, p), timeout=30)[1] for p in since}
    todo = {p for p in since if ends[p] > since[p]}
    consumer.assign([TopicPartition(DEFAULT_TOPIC, p, since[p]) for p in todo])
    first: bytes | None = None
    tail: list[bytes] = []  # the key's last two records
    deadline = time.monotonic() + timeout
    try:
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None:
                    continue
                if msg.key() == wanted:
                    first = first or msg.value()
                    tail = [*tail[-1:], msg.value()]
                if msg.offset() + 1 >= ends[msg.partition()]:
                    todo.discard(msg.partition())
    finally:
        consumer.close()
    if todo or first is None or len(tail) < 2:
        raise RuntimeError(f"stream {key} not read to its end in {DEFAULT_TOPIC} within {timeout:.0f}s")
    page0, final, marker = (TRIGGER_EVENT_CODEC.decode(v) for v in (first, *tail))
    if not marker.is_last:
        raise RuntimeError(f"stream {key}: its last record is not the end marker")
    return {
        "first": page0.emitted_at.timestamp(),
        "last": final.emitted_at.timestamp(),
        "end": marker.emitted_at.timestamp(),
        "envelope_bytes": len(first),
        "pages": marker.sequence_index,
    }


def handled_lines(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        return None
    return {
        "first_at": min(x["at"] for x in lines),
        "last_at": max(x["at"] for x in lines),
        "pages": sum(x["n"] for x in lines),
        "batches": len(lines),
        "last_seq": max(x["last"] for x in lines),
    }


def blocked_in_log(log: Path, start: int) -> tuple[int, list[float]]:
    """Watchdog lines in the triggerer's log after byte ``start``, and the seconds each reports."""
    if not log.exists():
        return 0, []
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    seconds = []
    for line in text.splitlines():
        if BLOCKED_LINE in line:
            rest = line.split(BLOCKED_LINE, 1)[1].split()
            try:
                seconds.append(float(rest[0]))
            except (IndexError, ValueError):
                seconds.append(float("nan"))
    return len(seconds), seconds


def run_once(
    env: Environment, statsd: StatsdCounter, mode: str, pages: int, payload_bytes: int, scratch: Path
) -> E2eRun:
    stack = env.stack
    run_dir = scratch / f"run-{uuid.uuid4().hex[:8]}"
    run_dir.mkdir(parents=True)
    log = stack.log_dir / "triggerer.log"
    log_start = log.stat().st_size if log.exists() else 0
    since = partition_ends(env.settings)
    metric_start, lines_start = statsd.snapshot()[BLOCKED_METRIC], statsd.lines
    load_start = loadavg()
    t0 = time.monotonic()
    conf = {"pages": pages, "payload_bytes": payload_bytes, "dir": str(run_dir), "live": mode == "live"}
    run_id = stack.trigger_dag(DAG_ID, conf=conf)
    state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=max(600.0, pages * 0.02))
    result = E2eRun(mode=mode, run_id=run_id, state=state, pages=pages, load_start=load_start)
    result.wall_s = round(time.monotonic() - t0, 2)
    time.sleep(1.5)  # the watchdog's and StatsD's last lines of the run (a 0.1 s loop, UDP)
    result.blocked_log_lines, result.blocked_seconds = blocked_in_log(log, log_start)
    result.blocked_metric = statsd.snapshot()[BLOCKED_METRIC] - metric_start
    result.statsd_lines = statsd.lines - lines_start
    result.load_end = loadavg()
    if state != "success":
        return result
    times = stream_times(env.settings, stream_id(DAG_ID, run_id, PRODUCER, -1), since)
    result.envelope_bytes = times["envelope_bytes"]
    result.first_write, result.last_write, result.end_marker = times["first"], times["last"], times["end"]
    for task_id in (PRODUCER, CONSUMER):
        seen = handled_lines(run_dir / f"{task_id}.jsonl")
        if seen is not None:
            seen["first_after_first_write_s"] = round(seen["first_at"] - times["first"], 3)
            seen["last_after_first_write_s"] = round(seen["last_at"] - times["first"], 3)
            seen["last_after_end_marker_s"] = round(seen["last_at"] - times["end"], 3)
            result.handled[task_id] = seen
    complete = [h for h in result.handled.values() if h["pages"] >= pages and h["last_seq"] == pages - 1]
    if complete:
        # end to end: the first write to the last page handled by the first reader done with all of them
        last = min(h["last_at"] for h in complete)
        result.e2e_s = round(last - times["first"], 3)
        result.e2e_pages_per_s = round(pages / result.e2e_s, 1)
    span = times["last"] - times["first"]
    result.write_pages_per_s = round((pages - 1) / span, 1) if span > 0 else None
    return result


# ====================================================================== main
def _raw(settings: KafkaSettings, pages: int, value: bytes) -> dict[str, Any]:
    result = raw_roundtrip(settings, pages, value)
    say(
        f"[raw]     {result['records']:,} x {result['value_bytes']} B: "
        f"produce {result['produce_s']} s + consume {result['consume_s']} s = "
        f"{result['pages_per_s']:,.0f} pages/s, load {result['load']}"
    )
    return result


def _alone(
    bootstrap: str, linger_ms: int | None, pages: int, payload_bytes: int, profile: Path | None = None
) -> dict[str, Any]:
    alone = trigger_alone(bootstrap, linger_ms, pages, payload_bytes, profile)
    say(
        f"[alone]   the trigger in this process: {alone['pages']:,} pages in {alone['seconds']} s = "
        f"{alone['pages_per_s']:,.0f} pages/s, CPU {alone['cpu_us_per_page']} us/page, loop lag max "
        f"{alone['loop_lag_max_ms']} ms; load {alone['load']}"
    )
    if profile is not None:
        import pstats

        say(f"[alone]   cProfile statistics in {profile}; the functions of most own time:")
        pstats.Stats(str(profile)).sort_stats("tottime").print_stats(25)
    return alone


@contextlib.contextmanager
def kafka_only() -> Iterator[tuple[KafkaSettings, str]]:
    """``KAFKA_BOOTSTRAP_SERVERS`` or a local broker of its own (stopped after), with the stream topics."""
    with kafka_broker() as broker:
        topics = [
            TopicSpec(DEFAULT_TOPIC, partitions=3),
            TopicSpec(index_topic(), partitions=3, cleanup_policy="compact"),
        ]
        create_topics(broker.bootstrap, topics)
        yield KafkaSettings({"bootstrap.servers": broker.bootstrap}), broker.bootstrap


def _fmt(value: float | None, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def run_with_airflow(
    args: argparse.Namespace, statsd: StatsdCounter, value: bytes, scratch: Path, raws: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, Any] | None]:
    """The Airflow runs (warm-up, then each mode ``--runs`` times, raw around each), then the trigger
    alone; the runs, the warm-up and the trigger alone."""
    modes = [m for m in args.modes.split(",") if m]
    runs: list[dict[str, Any]] = []
    warmup: dict[str, Any] | None = None
    alone: dict[str, Any] | None = None
    metrics_env = {
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
        "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        # the triggerer's runner: its inherited heap frozen at the fork (the default) or not
        "AIRFLOW__KAFKA_EVENTS__TRIGGERER_FREEZE_HEAP": str(args.runner_heap == "frozen").lower(),
        **(
            {}
            if args.write_window is None
            else {"AIRFLOW__KAFKA_EVENTS__STREAM_WRITE_WINDOW": str(args.write_window)}
        ),
    }
    with airflow_environment(
        [DAG_ID],
        prefix="bench-b12-",
        keep_home=args.keep_home,
        extra_env=metrics_env,
        connection_extra={} if args.linger_ms is None else {"linger.ms": args.linger_ms},
    ) as env:
        ensure_topics(
            AdminClient(env.settings.admin_config()),
            [TopicSpec(index_topic(), partitions=3, cleanup_policy="compact")],
        )
        if not args.no_warmup:
            # the triggerer's first streaming trigger: its classes are imported on the event loop
            warm = run_once(env, statsd, "live", 100, args.payload_bytes, scratch)
            warmup = asdict(warm)
            say(
                f"[warmup]  {warm.state}, e2e {_fmt(warm.e2e_s, '.2f')} s (not counted); blocked: "
                f"{warm.blocked_metric} metric, {warm.blocked_log_lines} log lines {warm.blocked_seconds}"
            )

        before = _raw(env.settings, args.pages, value)
        raws.append(before)
        for i in range(args.runs):
            for mode in modes if i % 2 == 0 else list(reversed(modes)):
                run = run_once(env, statsd, mode, args.pages, args.payload_bytes, scratch)
                after = _raw(env.settings, args.pages, value)
                raws.append(after)
                raw_rate = (before["pages_per_s"] + after["pages_per_s"]) / 2
                ratio = None if run.e2e_pages_per_s is None else round(run.e2e_pages_per_s / raw_rate, 4)
                record = {**asdict(run), "raw_pages_per_s_mean": round(raw_rate, 1), "ratio": ratio}
                runs.append(record)
                handled = "; ".join(
                    f"{task}: {h['pages']:,} pages in {h['batches']} batches, last "
                    f"{h['last_after_first_write_s']} s after the first write "
                    f"({h['last_after_end_marker_s']:+} s after the end marker)"
                    for task, h in run.handled.items()
                )
                say(
                    f"[run {i + 1}] {mode:<6} {run.state}: e2e {_fmt(run.e2e_s, '.2f')} s = "
                    f"{_fmt(run.e2e_pages_per_s, ',.0f')} pages/s (raw {raw_rate:,.0f}/s, ratio "
                    f"{_fmt(ratio, '.3f')}); trigger wrote {_fmt(run.write_pages_per_s, ',.0f')}/s; "
                    f"blocked: {run.blocked_metric} metric, {run.blocked_log_lines} log lines "
                    f"{run.blocked_seconds[:5]}; load {run.load_start} -> {run.load_end}"
                )
                say(f"          {handled}")
                before = after
        if not args.no_alone:
            alone = _alone(env.bootstrap, args.linger_ms, args.pages, args.payload_bytes)
    return runs, warmup, alone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000, help="pages of the stream (100000)")
    parser.add_argument("--payload-bytes", type=int, default=1024, help="bytes of JSON per page (1024)")
    parser.add_argument("--runs", type=int, default=1, help="runs of each mode, alternating (1)")
    parser.add_argument("--modes", default=",".join(MODES), help="subset of " + ",".join(MODES))
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    parser.add_argument("--no-warmup", action="store_true", help="skip the uncounted 100-page warm-up run")
    parser.add_argument("--keep-home", action="store_true", help="keep the Airflow home (logs, DB)")
    parser.add_argument("--no-alone", action="store_true", help="skip the trigger alone after Airflow")
    parser.add_argument(
        "--without-airflow",
        action="store_true",
        help="only raw and the trigger alone, on a broker of their own (no Airflow, no lock needed)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="with --without-airflow: run the trigger alone under cProfile, its statistics to this file",
    )
    parser.add_argument(
        "--linger-ms",
        type=int,
        help="linger.ms of the Airflow connection (its producers'; the stream producer's is 1 unless set)",
    )
    parser.add_argument(
        "--runner-heap",
        choices=("frozen", "inherited"),
        default="frozen",
        help="the triggerer's runner's inherited heap: frozen at its fork ([kafka_events] "
        "triggerer_freeze_heap, the default) or left to its collections (inherited)",
    )
    parser.add_argument(
        "--write-window",
        type=int,
        help="[kafka_events] stream_write_window of the deployment (pages in flight; unset: its default)",
    )
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES) or not modes:
        parser.error(f"--modes must be a subset of {','.join(MODES)}")
    if args.pages < 2 or args.payload_bytes < 1 or args.runs < 1:
        parser.error("--pages must be >= 2, --payload-bytes and --runs >= 1")
    if args.profile is not None and not args.without_airflow:
        parser.error("--profile needs --without-airflow")

    load_start = loadavg()
    say(f"[machine] {os.cpu_count()} CPUs, load average {load_start}")
    statsd = StatsdCounter((BLOCKED_METRIC,))
    value = envelope_value(args.pages, args.payload_bytes)
    raws: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    warmup: dict[str, Any] | None = None
    alone: dict[str, Any] | None = None
    scratch = Path(tempfile.mkdtemp(prefix="bench-b12-runs-"))
    started = time.monotonic()
    try:
        if args.without_airflow:
            with kafka_only() as (settings, bootstrap):
                raws.append(_raw(settings, args.pages, value))
                alone = _alone(bootstrap, args.linger_ms, args.pages, args.payload_bytes, args.profile)
                raws.append(_raw(settings, args.pages, value))
        else:
            runs, warmup, alone = run_with_airflow(args, statsd, value, scratch, raws)
    finally:
        statsd.close()
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}; benchmark took {time.monotonic() - started:.0f}s")
    if args.out:
        document = {
            "benchmark": "B12 a stream end to end in Airflow vs raw produce + consume",
            "pages": args.pages,
            "payload_bytes": args.payload_bytes,
            "connection_linger_ms": args.linger_ms,
            "runner_heap": args.runner_heap,
            "write_window": args.write_window,
            "warmup": warmup,
            "trigger_alone": alone,
            "raw": raws,
            "runs": runs,
        }
        write_results(args.out, document, load_start, load_end)
    ok = all(r["state"] == "success" and r["e2e_pages_per_s"] for r in runs)
    return 0 if ok else 1
