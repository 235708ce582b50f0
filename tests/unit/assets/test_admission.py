"""The admission pipeline: the same records give the same verdicts as the bridge and the watcher use it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kafka_events.assets.admission import (
    DEFAULT_MAX_RECORD_BYTES,
    AdmissionConfig,
    AdmissionPipeline,
    AdmissionVerdict,
    Stage,
    asset_selector,
    seen_key,
)
from airflow_kafka_events.assets.authz import Allowlist, sign_envelope
from airflow_kafka_events.assets.errors import CausationTooDeepError, ConsumedRecordTooLargeError
from airflow_kafka_events.assets.idempotency import SeenKeys
from airflow_kafka_events.assets.publish import build_envelope
from airflow_kafka_events.bridge.config import BridgeConfig
from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    EventSource,
    SourceKind,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import ConfigurationError, EnvelopeDecodeError, ExtraTooLargeError
from airflow_kafka_events.kafka.settings import KafkaSettings

pytestmark = pytest.mark.unit

ASSET = AssetRef(name="batches", uri="s3://lake/batches")
OTHER = AssetRef(name="other", uri="s3://lake/other")
KEY = b"signing-key"
ALLOW = [{"source_kinds": ["task"], "dag_ids": ["ingest"]}]
INGEST = EventSource(SourceKind.TASK, dag_id="ingest", run_id="r1", task_id="t")
DEPTH = 2


def envelope(key: str | None = "batch-1", *, sign: bool = True, **kwargs: Any) -> AssetEventEnvelope:
    env = build_envelope(
        asset=kwargs.pop("asset", ASSET), source=kwargs.pop("source", INGEST), partition_key=key, **kwargs
    )
    return sign_envelope(env, KEY) if sign else env


def raw_envelope(**fields: Any) -> AssetEventEnvelope:
    """An envelope the emit side would refuse (its checks bypassed), signed."""
    fields.setdefault("partition_key", "batch-1")
    return sign_envelope(AssetEventEnvelope(asset=ASSET, source=INGEST, **fields), KEY)


def encoded(env: AssetEventEnvelope) -> bytes:
    return ASSET_EVENT_CODEC.encode(env)


def _invalid_envelope_bytes(monkeypatch: pytest.MonkeyPatch) -> bytes:
    original = AssetEventEnvelope.to_avro
    monkeypatch.setattr(AssetEventEnvelope, "to_avro", lambda self: {**original(self), "event_id": ""})
    value = encoded(envelope())
    monkeypatch.undo()
    return value


# --------------------------------------------------------------------------- the two configurations
def bridge_pipeline(**options: Any) -> AdmissionPipeline:
    """The pipeline exactly as BridgeService builds it."""
    config = BridgeConfig(
        kafka=KafkaSettings({"bootstrap.servers": "unused:9092"}),
        api_url="http://airflow.test",
        username="bridge",
        password="pw",
        allowlist=Allowlist.from_config(ALLOW),
        signing_keys=options.pop("signing_keys", (KEY,)),
        max_causation_depth=DEPTH,
        **options,
    )
    return AdmissionPipeline(config.admission_config(), seen=SeenKeys())


def watcher_pipeline(keys: Callable[[], list[bytes]] | None = None, **options: Any) -> AdmissionPipeline:
    """The pipeline as a watcher of ASSET uses it: asset selection, keys from a (loaded) connection."""
    selector = asset_selector(
        asset_uri=ASSET.uri,
        asset_name=ASSET.name,
        include_partitioned=options.pop("include_partitioned", True),
    )
    config = AdmissionConfig(
        signing_keys=keys or (lambda: [KEY]),
        allowlist=Allowlist.from_config(ALLOW),
        max_causation_depth=DEPTH,
        select=selector,
        remember_on_accept=True,
        **options,
    )
    return AdmissionPipeline(config, seen=SeenKeys())


def deliver(pipeline: AdmissionPipeline, verdict: AdmissionVerdict) -> None:
    """What each path does after an accepted event reached Airflow."""
    pipeline.remember(verdict)  # a no-op when the pipeline remembered on accept


def _summary(verdict: AdmissionVerdict) -> tuple[Any, ...]:
    return (
        verdict.action,
        verdict.stage,
        verdict.reason,
        type(verdict.error).__name__ if verdict.error is not None else None,
        str(verdict.error) if verdict.error is not None else None,
        verdict.envelope.event_id if verdict.envelope is not None else None,
        verdict.group_scope,
    )


# --------------------------------------------------------------------------- the same verdicts
SHARED_CASES: dict[str, tuple[Callable[[pytest.MonkeyPatch], Any], str, Stage, DeadLetterReason | None]] = {
    "undecodable": (
        lambda mp: b"garbage: not an envelope",
        "reject",
        Stage.DECODE,
        DeadLetterReason.UNDECODABLE,
    ),
    "tombstone": (lambda mp: None, "reject", Stage.DECODE, DeadLetterReason.UNDECODABLE),
    "unknown schema": (
        lambda mp: TRIGGER_EVENT_CODEC.encode(
            TriggerEventEnvelope(trigger_run_id="r", sequence_index=0, is_last=True)
        ),
        "reject",
        Stage.DECODE,
        DeadLetterReason.UNKNOWN_SCHEMA,
    ),
    "invalid envelope": (_invalid_envelope_bytes, "reject", Stage.DECODE, DeadLetterReason.INVALID_ENVELOPE),
    "record too large": (
        lambda mp: b"\x00" * (DEFAULT_MAX_RECORD_BYTES + 1),
        "reject",
        Stage.RECORD_SIZE,
        DeadLetterReason.TOO_LARGE,
    ),
    "extra too large": (
        lambda mp: encoded(raw_envelope(extra={"blob": "x" * 70_000})),
        "reject",
        Stage.EXTRA_SIZE,
        DeadLetterReason.TOO_LARGE,
    ),
    "unsigned": (
        lambda mp: encoded(envelope(sign=False)),
        "reject",
        Stage.SIGNATURE,
        DeadLetterReason.SIGNATURE_MISSING,
    ),
    "bad signature": (
        lambda mp: encoded(sign_envelope(envelope(sign=False), b"stolen")),
        "reject",
        Stage.SIGNATURE,
        DeadLetterReason.SIGNATURE_INVALID,
    ),
    "not allowed": (
        lambda mp: encoded(
            envelope(source=EventSource(SourceKind.TASK, dag_id="other", run_id="r", task_id="t"))
        ),
        "reject",
        Stage.ALLOWLIST,
        DeadLetterReason.NOT_ALLOWED,
    ),
    "causation too deep": (
        lambda mp: encoded(envelope(causation=["e1", "e2", "e3"])),
        "reject",
        Stage.CAUSATION,
        DeadLetterReason.CAUSATION_TOO_DEEP,
    ),
    "good": (lambda mp: encoded(envelope(causation=["e1", "e2"])), "accept", Stage.ACCEPTED, None),
}


@pytest.mark.parametrize("case", list(SHARED_CASES))
def test_bridge_and_watcher_give_the_same_verdict(case, monkeypatch):
    make, action, stage, reason = SHARED_CASES[case]
    value = make(monkeypatch)
    headers = [("source", b"test")]
    verdicts = [
        pipeline.admit(value, key=b"s3://lake/batches", headers=headers)
        for pipeline in (bridge_pipeline(), watcher_pipeline())
    ]
    bridge, watcher = verdicts
    assert _summary(bridge) == _summary(watcher)
    assert (bridge.action, bridge.stage, bridge.reason) == (action, stage, reason)
    assert bridge.record_bytes == watcher.record_bytes == len(value or b"") + len(b"s3://lake/batches") + 10
    assert bridge.group_scope == (stage in (Stage.DECODE, Stage.RECORD_SIZE))


def test_a_repeat_is_a_duplicate_on_both_paths_once_the_first_is_delivered():
    first = envelope(idempotency_key="k-1")
    repeat = dataclasses.replace(envelope(idempotency_key="k-1"), event_id="another-id")
    repeat = sign_envelope(dataclasses.replace(repeat, signature=None), KEY)
    for pipeline in (bridge_pipeline(), watcher_pipeline()):
        accepted = pipeline.admit(encoded(first))
        assert accepted.accepted and accepted.seen_key == f"{ASSET.uri}\x00k-1"
        deliver(pipeline, accepted)
        again = pipeline.admit(encoded(repeat))
        assert (again.action, again.stage, again.duplicate) == ("skip", Stage.DEDUPE, True)
        assert "k-1" in (again.detail or "")
    # the same key on another asset is another event
    assert seen_key(envelope(asset=OTHER, idempotency_key="k-1")) == f"{OTHER.uri}\x00k-1"


def test_the_bridge_remembers_only_what_it_delivered():
    pipeline = bridge_pipeline()
    env = envelope()
    assert pipeline.admit(encoded(env)).accepted
    assert pipeline.admit(encoded(env)).accepted  # not delivered (e.g. Airflow refused it): not a repeat
    watcher = watcher_pipeline()
    assert watcher.admit(encoded(env)).accepted
    assert watcher.admit(encoded(env)).duplicate  # the watcher remembers at once


# --------------------------------------------------------------------------- the deliberate differences
def test_partition_keys_airflow_would_refuse_are_checked_by_the_bridge_only():
    bad = encoded(raw_envelope(partition_key="   "))
    refused = bridge_pipeline().admit(bad)
    assert (refused.stage, refused.reason) == (Stage.PARTITION_KEY, DeadLetterReason.INVALID_ENVELOPE)
    assert type(refused.error).__name__ == "PartitionKeyError"
    assert watcher_pipeline().admit(bad).accepted  # a watcher's events carry no partition key


def test_asset_selection_is_each_paths_own():
    other = encoded(sign_envelope(envelope(asset=OTHER, sign=False), KEY))
    skipped = watcher_pipeline().admit(other)
    assert (skipped.action, skipped.stage) == ("skip", Stage.SELECT) and "s3://lake/other" in skipped.detail
    assert bridge_pipeline().admit(other).accepted  # the bridge asks Airflow (unknown-asset, later)
    assert bridge_pipeline(assets=("s3://lake/b*",)).admit(other).stage is Stage.SELECT


def test_unpartitioned_and_partitioned_skips():
    unpartitioned = encoded(envelope(key=None))
    partitioned = encoded(envelope(key="k"))
    bridge = bridge_pipeline(skip_unpartitioned=True)
    assert bridge.admit(unpartitioned).stage is Stage.SELECT
    assert bridge.admit(partitioned).accepted
    watcher = watcher_pipeline(include_partitioned=False)
    assert watcher.admit(partitioned).stage is Stage.SELECT
    assert watcher.admit(unpartitioned).accepted


def test_keys_that_cannot_be_loaded_refuse_signed_events_with_their_own_reason():
    def unavailable() -> list[bytes]:
        raise ConfigurationError("connection 'asset_signing' holds no signing key (set its password)")

    verdict = watcher_pipeline(keys=unavailable).admit(encoded(envelope()))
    assert verdict.reason is DeadLetterReason.SIGNING_KEY_UNAVAILABLE
    assert "holds no signing key" in str(verdict.error)
    # an undecodable record is still undecodable, and another asset's still skipped
    assert watcher_pipeline(keys=unavailable).admit(b"junk").reason is DeadLetterReason.UNDECODABLE
    # keys (or the loading error) given per call, as an async loader hands them over
    pipeline = watcher_pipeline()
    error = TimeoutError("secrets backend timed out")
    assert pipeline.admit(encoded(envelope()), signing_keys=error).error is error
    assert (
        pipeline.admit(encoded(envelope()), signing_keys=[b"other"]).reason
        is DeadLetterReason.SIGNATURE_INVALID
    )
    assert pipeline.admit(encoded(envelope()), signing_keys=[KEY]).accepted


# --------------------------------------------------------------------------- stages in detail
def test_size_limits_name_the_limit_and_the_fix():
    pipeline = AdmissionPipeline(AdmissionConfig(max_record_bytes=1000, max_extra_bytes=100))
    big = pipeline.admit(b"x" * 990, key=b"k" * 11)
    assert isinstance(big.error, ConsumedRecordTooLargeError) and big.record_bytes == 1001
    assert "1001 bytes" in str(big.error) and "max_record_bytes=1000" in str(big.error)
    extra = pipeline.admit(encoded(envelope(extra={"rows": "1" * 100})))
    assert isinstance(extra.error, ExtraTooLargeError) and extra.stage is Stage.EXTRA_SIZE
    size = len(json.dumps({"rows": "1" * 100}, separators=(",", ":")))
    assert f"extra of {size} bytes" in str(extra.error) and "max_extra_bytes=100" in str(extra.error)
    assert "references" in str(extra.error)
    assert extra.envelope is not None and not extra.group_scope  # one asset's event


def test_causation_error_is_one_class_for_both_paths():
    from airflow_kafka_events.assets.errors import CausationTooDeepError as from_bridge
    from airflow_kafka_events.assets.errors import CausationTooDeepError as from_package

    assert from_package is from_bridge is CausationTooDeepError
    verdict = AdmissionPipeline(AdmissionConfig(max_causation_depth=0)).admit(
        encoded(envelope(causation=["e1"]))
    )
    assert isinstance(verdict.error, CausationTooDeepError)
    assert verdict.error.reason == "causation-too-deep" and "feedback loop" in str(verdict.error)


def test_a_bug_in_a_stage_dead_letters_instead_of_raising():
    def broken(env: AssetEventEnvelope) -> str | None:
        raise RuntimeError("select is broken")

    verdict = AdmissionPipeline(AdmissionConfig(select=broken)).admit(encoded(envelope()))
    assert (verdict.stage, verdict.reason) == (Stage.INTERNAL, DeadLetterReason.INTERNAL_ERROR)
    assert verdict.envelope is not None and str(verdict.error) == "select is broken"


def test_screen_then_judge_is_admit():
    pipeline = AdmissionPipeline(AdmissionConfig())
    screened = pipeline.screen(encoded(envelope()), key=b"k")
    assert not isinstance(screened, AdmissionVerdict)
    env, size = screened
    assert pipeline.judge(env, record_bytes=size).accepted
    assert isinstance(pipeline.screen(b"junk"), AdmissionVerdict)
    # a record the caller decoded already (or failed to) is not decoded again
    error = EnvelopeDecodeError("truncated")
    assert pipeline.admit(b"whatever", decoded=error).error is error
    assert pipeline.admit(None, decoded=env).accepted


def test_seen_key_without_an_idempotency_key_uses_the_event_id():
    env = dataclasses.replace(envelope(sign=False), idempotency_key=None)
    assert seen_key(env) == f"{ASSET.uri}\x00event_id:{env.event_id}"


@pytest.mark.parametrize(
    "options",
    [
        {"max_record_bytes": 0},
        {"max_extra_bytes": True},
        {"max_causation_depth": -1},
        {"signing_keys": ()},
        {"signing_keys": (b"",)},
        {"allowlist": [{"source_kinds": ["task"]}]},
        {"select": "batches"},
    ],
)
def test_config_is_validated(options):
    with pytest.raises(ConfigurationError):
        AdmissionConfig(**options)


def test_config_takes_str_keys_and_selector_needs_an_asset():
    assert AdmissionConfig(signing_keys=["k1", b"k2"]).signing_keys == (b"k1", b"k2")
    with pytest.raises(ConfigurationError, match="asset_uri and/or asset_name"):
        asset_selector()
    with pytest.raises(ConfigurationError, match="AdmissionConfig"):
        AdmissionPipeline({})  # type: ignore[arg-type]


def test_a_decoder_failure_other_than_a_decode_error_is_an_internal_error():
    bug = KeyError("codec state")
    verdict = AdmissionPipeline(AdmissionConfig()).admit(b"bytes", decoded=bug)
    assert (verdict.stage, verdict.reason, verdict.error) == (
        Stage.INTERNAL,
        DeadLetterReason.INTERNAL_ERROR,
        bug,
    )
    assert verdict.group_scope


def test_dedupe_can_be_left_to_the_caller():
    pipeline = AdmissionPipeline(AdmissionConfig(dedupe=False, remember_on_accept=True))
    env = encoded(envelope(sign=False))
    first, second = pipeline.admit(env), pipeline.admit(env)
    assert first.accepted and second.accepted and second.seen_key == first.seen_key
    assert len(pipeline.seen) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("case", list(SHARED_CASES))
def test_the_watcher_trigger_itself_gives_the_bridges_verdict(case, monkeypatch):
    """Not a hand-built config: the pipeline a real KafkaAssetEventTrigger builds from its kwargs."""
    import asyncio

    from airflow_kafka_events.watcher.records import KafkaRecord
    from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger

    make, action, stage, reason = SHARED_CASES[case]
    value = make(monkeypatch)
    headers = (("source", b"test"),)
    trigger = KafkaAssetEventTrigger(
        topics=["events"],
        asset_uri=ASSET.uri,
        asset_name=ASSET.name,
        allow=ALLOW,
        signing_conn_id="asset_signing",
        max_causation_depth=DEPTH,
    )

    async def keys() -> list[bytes]:
        return [KEY]

    monkeypatch.setattr(trigger, "_load_signing_keys", keys)
    record = KafkaRecord("events", 0, 7, b"s3://lake/batches", value, headers)
    watcher = asyncio.run(trigger.judge(record))
    bridge = bridge_pipeline().admit(value, key=b"s3://lake/batches", headers=list(headers))
    assert _summary(watcher) == _summary(bridge)
    assert (watcher.action, watcher.stage, watcher.reason) == (action, stage, reason)
