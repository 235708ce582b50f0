"""The package's target layout as data: every module's new home (phase A, mechanical), and the
merges, splits and carves done by hand afterwards (phase B).

Paths are relative to src/airflow_kafka_events/. A folder key ("plugin/views/") moves the folder whole.
"""

from __future__ import annotations

PKG_DIR = "src/airflow_kafka_events/"

# ---------------------------------------------------------------------------------------------
# Phase A: git mv (module keeps its code byte-equal; only its imports are rewritten)
MOVES: dict[str, str] = {
    # provider/: how Airflow finds and drives the package (provider info, hook, trigger-kwargs check);
    # airflow_config.py and airflow_versions.py stay at the top: the ground every folder stands on
    "provider.py": "provider/__init__.py",
    "hooks.py": "provider/hook.py",
    "serialization_check.py": "provider/serialization.py",
    # envelopes/: what travels on Kafka and its bytes
    "envelopes.py": "envelopes/model.py",
    "codec.py": "envelopes/codec.py",
    "trigger_avro.py": "envelopes/trigger_avro.py",
    "json_values.py": "envelopes/json_values.py",
    "schemas/": "envelopes/schemas/",
    # kafka/: clients only (stay: settings clients client_log client_executor producer delivery
    # consumer topics partitioner assigned_reader bounded_reads shared_reader shared_feed positions
    # compacted)
    "topic_plan.py": "kafka/topic_plan.py",
    # streams/: trigger event streams; descriptor/checkpoint/progress shared by both sides
    "streams.py": "streams/descriptor.py",
    "checkpoint.py": "streams/checkpoint.py",
    "kafka/progress.py": "streams/progress.py",
    "operators/common.py": "streams/task_label.py",
    # streams/producing/: a trigger writes every page to Kafka; the operator that defers to it
    "triggers/streaming.py": "streams/producing/trigger.py",
    "triggers/wrapper.py": "streams/producing/wrapper.py",
    "triggers/attempt_writer.py": "streams/producing/writer.py",
    "triggers/outage.py": "streams/producing/outage.py",
    "triggers/testing.py": "streams/producing/demo_trigger.py",
    "operators/streaming.py": "streams/producing/operator.py",
    # streams/consuming/: reading a stream back in order, in batches, resumable; its operator
    "kafka/stream_reader.py": "streams/consuming/reader.py",
    "kafka/stream_records.py": "streams/consuming/records.py",
    "kafka/sequence_tracker.py": "streams/consuming/sequence.py",
    "kafka/stream_batches.py": "streams/consuming/batches.py",
    "kafka/stream_commits.py": "streams/consuming/commits.py",
    "kafka/stream_deadlines.py": "streams/consuming/deadlines.py",
    "kafka/stream_partition.py": "streams/consuming/partition.py",
    "stream_consumption.py": "streams/consuming/consumption.py",
    "slot_release.py": "streams/consuming/slot_release.py",
    "triggers/stream_wait.py": "streams/consuming/wait_trigger.py",
    "operators/consumer.py": "streams/consuming/operator.py",
    "operators/decorators.py": "streams/consuming/decorator.py",
    # http/: paginated HTTP APIs as streaming triggers
    "triggers/http.py": "http/trigger.py",
    "triggers/http_arguments.py": "http/arguments.py",
    "triggers/http_options.py": "http/options.py",
    "triggers/http_requests.py": "http/requests.py",
    "triggers/http_session.py": "http/session.py",
    "triggers/json_paths.py": "http/json_paths.py",
    "triggers/errors.py": "http/errors.py",
    # assets/: emit, admission, authorization (stay: emit notifier validation idempotency authz
    # admission errors)
    "assets/external.py": "assets/publish.py",
    # watcher/: asset events from Kafka into Airflow through an AssetWatcher
    "triggers/asset_watcher.py": "watcher/trigger.py",
    "triggers/asset_stream.py": "watcher/stream.py",
    "triggers/watcher_reader.py": "watcher/reader.py",
    "triggers/watcher_keys.py": "watcher/keys.py",
    "triggers/watcher_stops.py": "watcher/stops.py",
    "triggers/watcher_recheck.py": "watcher/recheck.py",
    "triggers/watcher_dead_letters.py": "watcher/dead_letters.py",
    "triggers/message_queue.py": "watcher/message_queue.py",
    "triggers/dead_letter_claims.py": "watcher/dead_letter_claims.py",
    "triggers/watcher_confirmations.py": "watcher/confirmations.py",
    # the Airflow listener that records which watcher events Airflow persisted (registered by
    # ui/plugin.py, written for the watcher's restarts)
    "plugin/persisted_events.py": "watcher/persisted_events.py",
    # dead_letters/: the refused record, its headers, its writer, the warning
    "dlq.py": "dead_letters/letter.py",
    "dead_letter_headers.py": "dead_letters/headers.py",
    "dead_letter_log.py": "dead_letters/log.py",
    # cli/: one package
    "cli.py": "cli/main.py",
    "cli_bridge.py": "cli/bridge.py",
    "cli_dlq.py": "cli/dlq.py",
    "cli_inspection.py": "cli/inspection.py",
    "cli_listing.py": "cli/listing.py",
    "cli_replay.py": "cli/replay.py",
    "cli_streams.py": "cli/streams.py",
    "cli_terminal.py": "cli/terminal.py",
    "cli_topics.py": "cli/topics.py",
    # ui/: the Airflow view (plugin) and what it and the CLI show people (inspection)
    "plugin/__init__.py": "ui/plugin.py",
    "plugin/app.py": "ui/app.py",
    "plugin/airflow_state.py": "ui/airflow_state.py",
    "plugin/kafka_access.py": "ui/kafka_access.py",
    "plugin/rendering.py": "ui/rendering.py",
    "plugin/security.py": "ui/security.py",
    "plugin/settings.py": "ui/settings.py",
    "plugin/views/": "ui/views/",
    "plugin/templates/": "ui/templates/",
    "plugin/static/": "ui/static/",  # the React bundle built from the repository's ui/ folder
    "inspection/": "ui/inspection/",
    # the stream index, split by side: the records and their writers are the streams' (the
    # streaming trigger and the consumers write them); reading and listing them is inspection's
    # (the view and the CLI) and uses inspection's errors, redaction and stream state
    "stream_index/__init__.py": "streams/index/__init__.py",
    "stream_index/record.py": "streams/index/record.py",
    "stream_index/options.py": "streams/index/options.py",
    "stream_index/publisher.py": "streams/index/publisher.py",
    "stream_index/reader.py": "ui/inspection/index_reader.py",
    "stream_index/listing.py": "ui/inspection/index_listing.py",
    # local_broker/: its data files beside it
    "broker_files/": "local_broker/files/",
}

# Modules and folders that keep their place (every module under PKG_DIR is in MOVES, DELETE or here;
# `python scripts/relayout/analyze.py .` lists any module that is not).
STAYS = [
    "__init__.py",
    "__about__.py",
    "errors.py",
    "metrics.py",
    "retry.py",
    "retry_after.py",  # merged into retry.py in phase B
    "airflow_config.py",
    "airflow_versions.py",
    "lazy_exports.py",
    "kafka/",  # but the modules MOVES takes out of it
    "assets/",  # but external.py (-> publish.py)
    "bridge/",  # airflow_api.py moves in phase B (PHASE_B_MOVES)
    "iteration/",
    "local_broker/",
]


def target_of(rel: str) -> str | None:
    """The new path of a module (relative to PKG_DIR), the old path if it stays, None if unmapped."""
    if rel in DELETE:
        return ""
    best = max(
        (k for k in MOVES if rel == k or (k.endswith("/") and rel.startswith(k))), key=len, default=None
    )
    if best is not None:
        return MOVES[best] + rel[len(best) :]
    if any(rel == s or (s.endswith("/") and rel.startswith(s)) for s in STAYS):
        return rel
    return None


# The target's layers, lowest first: a node (a top folder, or a module at the top) imports only
# from its own layer or lower ones. analyze.py prints every runtime import that runs up.
LAYERS = [
    ["errors", "retry", "retry_after", "airflow_config", "lazy_exports", "__about__"],
    ["envelopes", "metrics", "airflow_versions", "local_broker"],
    ["kafka"],
    ["dead_letters", "provider"],
    ["assets"],
    ["bridge"],
    ["watcher"],
    ["streams"],
    ["http", "iteration", "ui"],
    ["cli"],
    ["(package)"],  # the package's __init__: the public face, lazy
]


# Package __init__ files that go away (their public names move to the new packages' __init__).
DELETE = ["triggers/__init__.py", "operators/__init__.py"]

# New package __init__ files: docstring + public names (module -> names); lazy ones import Airflow.
NEW_PACKAGES: dict[str, dict] = {
    "envelopes/__init__.py": {
        "doc": "What travels on Kafka: the envelope types, their Avro schemas and codec, JSON values.",
        "eager": {
            "envelopes.model": ["AssetEventEnvelope", "TriggerEventEnvelope", "StreamFailure"],
            "envelopes.codec": ["EnvelopeCodec"],
        },
    },
    "streams/__init__.py": {
        "doc": "Trigger event streams.\n\nA trigger writes every page to Kafka (``producing``); a task reads "
        "them back\nin order (``consuming``).\n",
        "eager": {"streams.descriptor": ["StreamDescriptor", "stream_id", "parse_stream_id"]},
        "lazy": {
            "streams.producing.trigger": ["Page", "StreamingTrigger"],
            "streams.producing.wrapper": ["StreamingWrapperTrigger"],
            "streams.producing.operator": ["StreamingOperatorMixin", "StreamingTriggerOperator"],
            "streams.consuming.operator": ["StreamConsumerOperator", "StreamRef", "consumer_group_id"],
            "streams.consuming.decorator": ["stream_consumer_task"],
            "streams.consuming.consumption": ["StreamEvent", "StreamSummary"],
        },
    },
    "streams/producing/__init__.py": {"doc": "Writing a stream: the triggers, the writer, the operator."},
    "streams/consuming/__init__.py": {
        "doc": "Reading a stream back: in order, in batches, resumable; the consumer operator."
    },
    "http/__init__.py": {
        "doc": "Paginated HTTP APIs as streaming triggers: every page becomes one Kafka envelope.",
        "lazy": {"http.trigger": ["HttpPaginationTrigger", "GraphPaginationTrigger"]},
    },
    "watcher/__init__.py": {
        "doc": "Asset events from Kafka into Airflow through an AssetWatcher.",
        "lazy": {
            "watcher.trigger": ["KafkaAssetEventTrigger", "kafka_watched_asset", "kafka_watcher_trigger"]
        },
    },
    "dead_letters/__init__.py": {
        "doc": "Dead letters: the refused record, unchanged, with headers that say why."
    },
    "cli/__init__.py": {"doc": "The ``airflow-kafka-events`` command line (entry point: ``cli.main:main``)."},
    "ui/__init__.py": {
        "doc": "What people see: the Airflow view (``ui.plugin``) and the inspection it shares with the CLI."
    },
}

# Text to rewrite outside Python imports (entry points, resource lookups).
TEXT_EDITS = [
    ("pyproject.toml", "airflow_kafka_events.cli:main", "airflow_kafka_events.cli.main:main"),
    (
        "pyproject.toml",
        "airflow_kafka_events.plugin:KafkaEventsPlugin",
        "airflow_kafka_events.ui.plugin:KafkaEventsPlugin",
    ),
    (
        "src/airflow_kafka_events/local_broker/_common.py",
        'resources.files("airflow_kafka_events").joinpath("broker_files")',
        'resources.files("airflow_kafka_events.local_broker").joinpath("files")',
    ),
    # path joins the dotted pass cannot see
    ("tests/unit/assets/signature_vectors.py", '/ "schemas"\n', '/ "envelopes"\n    / "schemas"\n'),
    (
        "tests/node/verify_signatures.js",
        "'airflow_kafka_events', 'schemas'",
        "'airflow_kafka_events', 'envelopes', 'schemas'",
    ),
    # provider info: the modules the two deleted packages exposed (same classes as before)
    (
        "src/airflow_kafka_events/provider/__init__.py",
        '"python-modules": ["airflow_kafka_events.triggers"]',
        '"python-modules": [\n                    "airflow_kafka_events.streams.producing.trigger",\n'
        '                    "airflow_kafka_events.streams.producing.wrapper",\n'
        '                    "airflow_kafka_events.watcher.trigger",\n                ]',
    ),
    (
        "src/airflow_kafka_events/provider/__init__.py",
        '"python-modules": ["airflow_kafka_events.operators"]',
        '"python-modules": [\n                    "airflow_kafka_events.streams.producing.operator",\n'
        '                    "airflow_kafka_events.streams.consuming.operator",\n                ]',
    ),
    ("tests/unit/test_docs_site.py", 'SRC / "plugin" / "settings.py"', 'SRC / "ui" / "settings.py"'),
]

# ---------------------------------------------------------------------------------------------
# Phase B (by hand, after phase A is green): concept merges / splits / carves, in target paths.
# The REST client moves in phase B together with its errors and API_PAGE_LIMIT (moved alone in
# phase A it makes the circle assets/airflow_api -> bridge/__init__ -> assets/airflow_api).
PHASE_B_MOVES = {"bridge/airflow_api.py": "assets/airflow_api.py"}

MERGES = {  # file -> into (reason: one concept)
    "kafka/bounded_reads.py": "kafka/assigned_reader.py",  # the config of the reads it makes
    "streams/consuming/records.py": "streams/consuming/reader.py",  # which messages it takes in, decoding
    "streams/consuming/batches.py": "streams/consuming/sequence.py",  # what is handed out, in order
    "streams/task_label.py": "streams/descriptor.py",  # naming a task's stream
    "cli/listing.py": "cli/inspection.py",  # what the inspection commands share
    "retry_after.py": "retry.py",  # when to try again
}
SPLITS = {  # file -> {new file: [names]}
    "dead_letters/letter.py": {
        "dead_letters/writer.py": [
            "_Plan",
            "_RAISE_LIMITS",
            "_Producer",
            "DLQ_ROLE",
            "DLQ_TIMEOUT",
            "DeadLetterWriter",
        ],
        "kafka/record_size.py": [
            "RECORD_OVERHEAD_BYTES",
            "Header",
            "record_size",
            "is_size_error",
            "_SIZE_ERROR_CODES",
            "_header_bytes",
        ],
    },
    # where a consumed record is: one Protocol for the dead letters and the watcher payload; opens
    # the circles dead_letters/letter <-> log and assets/watcher_payload -> watcher -> back
    "dead_letters/log.py": {"kafka/consumer.py": ["SourceRecord"]},
    "http/errors.py": {"streams/producing/demo_trigger.py": ["GateTimeoutError"]},
    "bridge/config.py": {"assets/airflow_api.py": ["API_PAGE_LIMIT"]},  # a constant of the client
    "bridge/errors.py": {  # the REST client's errors go with it (base: AirflowKafkaEventsError)
        "assets/airflow_api.py": [
            "AirflowApiError",
            "TransientApiError",
            "RejectedError",
            "NotFoundError",
            "AuthenticationError",
            "ForbiddenError",
            "UnknownAssetError",
        ],
    },
}
# assets/watcher_payload.py stays in assets/ (emit and DAG code read the payload back); its
# TYPE_CHECKING import of KafkaRecord becomes kafka.consumer.SourceRecord (a Protocol): this cut
# breaks the circle assets/watcher_payload -> triggers/asset_stream -> triggers/watcher_recheck.
CUTS = [
    ("assets/watcher_payload.py", "triggers/asset_stream.py"),
    ("bridge/airflow_api.py", "bridge/errors.py"),
]
CARVES = [  # (file, function, lines, into)
    (
        "streams/producing/operator.py",
        "StreamingOperatorMixin.resume_stream",
        45,
        "streams/consuming/consumption.py",
    ),
    ("streams/producing/operator.py", "_raise_if_failed", 15, "streams/consuming/consumption.py"),
    ("streams/producing/operator.py", "_start_of", 20, "streams/consuming/consumption.py"),
]

# Tests of the shims themselves, or reading a name through a shim module's attribute (the import
# rewrite cannot see these; found by running `pytest -m unit` after the script).
TEST_EDITS = [
    ("tests/unit/test_dlq.py", "        dlq.log_dead_lettered(logger,", "        log_dead_lettered(logger,"),
    (
        "tests/unit/test_retry_after.py",
        "    assert http_requests.parse_retry_after is parse_retry_after\n",
        "",
    ),
    (
        "tests/unit/test_retry_after.py",
        "    from airflow_kafka_events.http import requests as http_requests\n",
        "",
    ),
    (
        "tests/unit/triggers/test_watcher_recheck.py",
        "watcher_recheck.RECHECK_LIMIT >= asset_stream.DURABLE_KEYS",
        "watcher_recheck.RECHECK_LIMIT >= DURABLE_KEYS",
    ),
    (
        "tests/unit/triggers/test_watcher_recheck.py",
        "\n\ndef test_the_recheck_limit_reaches_beyond_the_stored_keys():",
        "\n\nfrom airflow_kafka_events.watcher.keys import DURABLE_KEYS  # noqa: E402\n\n\n"
        "def test_the_recheck_limit_reaches_beyond_the_stored_keys():",
    ),
]
TEST_DELETES = [("tests/unit/test_dlq.py", "test_the_names_moved_out_of_dlq_stay_importable_from_it")]
