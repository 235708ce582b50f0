"""``airflow-kafka-events replay-assets``: post asset events from Kafka to an Airflow again.

For an Airflow whose metadata database was restored from a backup (or that missed events while
the bridge was down): the asset events of a window of the asset events topic (``--from`` ..
``--until``) are posted through the REST API like the partition bridge posts them -- the same
client, admission checks (``AIRFLOW_KAFKA_EVENTS_BRIDGE_*`` settings or ``--allow`` /
``--signing-key-file``: signatures, allowlist, causation depth; ``--asset`` patterns), ``extra`` and
provenance -- except those Airflow already
has: before anything is posted, each event is looked up among its asset's most recent Airflow
events (``--recent-events-limit``) by its ``event_id`` or idempotency key (the bridge's re-check),
and an idempotency key repeated in the window is posted once.  Run it twice: the second run posts
nothing.  Nothing is posted when the window was truncated (``--max-records``).  Without the bridge's
authorization (allow rules or signing keys) it refuses to run, unless ``--allow-any-source`` says the
bridge has none: it would post the events the bridge refused.

Imports no Airflow module.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_kafka_events.cli.bridge import RefusePassword, add_authorization_args
from airflow_kafka_events.cli.inspection import (
    add_common_args,
    emit_json,
    parse_time,
    progress_bar,
    run_command,
)

__all__ = [
    "add_replay_group",
]

T = TypeVar("T")
#: Records per partition a replay reads at most (it refuses to post from a truncated window).
DEFAULT_MAX_RECORDS = 100_000


def _redacted(text: str) -> str:
    from airflow_kafka_events.ui.inspection.redact import redact_text

    return str(redact_text(text))


@dataclass
class _Event:
    """One asset event of the window and what became of it."""

    record: Any  # ConsumedRecord[bytes]
    outcome: str = "pending"
    envelope: Any = None
    verdict: Any = None
    asset_id: int | None = None
    airflow_event_id: Any = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        envelope = self.envelope
        return {
            "topic": self.record.topic,
            "partition": self.record.partition,
            "offset": self.record.offset,
            "event_id": None if envelope is None else envelope.event_id,
            "asset_uri": None if envelope is None else _redacted(envelope.asset.uri),  # URL userinfo
            "partition_key": None if envelope is None else envelope.partition_key,
            "idempotency_key": None if envelope is None else envelope.idempotency_key,
            "outcome": self.outcome,
            "airflow_event_id": self.airflow_event_id,
            "detail": None if self.detail is None else _redacted(self.detail),
        }


@dataclass
class _Replay:
    """The replay's state: the bridge's configuration, REST client and admission pipeline."""

    config: Any
    api: Any
    assets: Any
    admission: Any
    events: list[_Event] = field(default_factory=list)

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` with the bridge's retry policy for transient API failures (the package's retry loop)."""
        from airflow_kafka_events.assets.airflow_api import retry_api_call
        from airflow_kafka_events.bridge.errors import RetriesExhaustedError

        return retry_api_call(
            call,
            self.config.retry,
            exhausted=lambda failures, exc: RetriesExhaustedError(
                f"{what}: giving up after {failures} attempts: {exc}"
            ),
        )

    # ------------------------------------------------------------------ phases
    def check(self, event: _Event) -> None:
        """Admission, asset id, and the look-up among the asset's recent Airflow events."""
        from airflow_kafka_events.assets.airflow_api import UnknownAssetError

        record = event.record
        verdict = self.admission.admit(record.raw, key=record.key, headers=record.headers)
        event.verdict, event.envelope = verdict, verdict.envelope
        if verdict.rejected:
            event.outcome, event.detail = "refused", f"{verdict.reason.value}: {verdict.error}"
            return
        if verdict.skipped:
            event.outcome = "duplicate" if verdict.duplicate else "skipped"
            event.detail = verdict.detail
            return
        envelope = verdict.envelope
        try:
            event.asset_id = self.retrying(
                "resolving the asset id", lambda: self.assets.get(envelope.asset.name, envelope.asset.uri)
            )
        except UnknownAssetError as exc:
            event.outcome, event.detail = "failed", str(exc)
            return
        found = self.retrying(
            f"looking up event {envelope.event_id}",
            lambda: self.api.find_recent_event(
                event.asset_id,
                event_id=envelope.event_id,
                idempotency_key=envelope.idempotency_key,
                limit=self.config.recent_events_limit,
            ),
        )
        self.admission.remember(verdict)  # a repeat of its idempotency key in the window is a duplicate
        if found is not None:
            event.outcome, event.airflow_event_id = "already_present", found.get("id")
        else:
            event.outcome = "missing"

    def post(self, event: _Event) -> None:
        from airflow_kafka_events.assets.airflow_api import RejectedError, TransientApiError
        from airflow_kafka_events.bridge.airflow_event import event_extra

        envelope, recheck = event.envelope, [False]

        def attempt() -> tuple[str, dict[str, Any]]:
            if recheck[0]:  # an earlier POST may have been applied: look before posting again
                found = self.api.find_recent_event(
                    event.asset_id,
                    event_id=envelope.event_id,
                    idempotency_key=envelope.idempotency_key,
                    limit=self.config.recent_events_limit,
                )
                if found is not None:
                    return "already_present", found
            try:
                created = self.api.post_asset_event(
                    event.asset_id,
                    partition_key=envelope.partition_key,
                    extra=event_extra(envelope, event.record),
                )
            except TransientApiError as exc:
                recheck[0] = recheck[0] or exc.ambiguous
                raise
            return "posted", created

        try:
            outcome, answer = self.retrying(f"posting event {envelope.event_id}", attempt)
        except RejectedError as exc:
            event.outcome, event.detail = "failed", str(exc)
            return
        event.outcome, event.airflow_event_id = outcome, answer.get("id")


def _check_authorization(args: argparse.Namespace, config: Any) -> None:
    """Refuse to run without the bridge's authorization stated: it would post what the bridge refuses."""
    from airflow_kafka_events.bridge import config as bc
    from airflow_kafka_events.errors import ConfigurationError

    authorized = config.allowlist is not None or bool(config.signing_keys)
    if authorized and args.allow_any_source:
        raise ConfigurationError(
            "--allow-any-source contradicts the allow rules / signing keys given (flags or "
            f"${bc.ENV_ALLOW} / ${bc.ENV_SIGNING_KEY_FILES}): pass one or the other"
        )
    if not authorized and not args.allow_any_source:
        raise ConfigurationError(
            "replay-assets posts only what the bridge would, and no authorization is set: nothing read, "
            "nothing posted; fix: give the bridge's allow rules and signing keys (--allow / "
            f"--signing-key-file, or ${bc.ENV_ALLOW} / ${bc.ENV_SIGNING_KEY_FILES} as the bridge has "
            "them), or pass --allow-any-source when the bridge runs without either"
        )


def _read_window(args: argparse.Namespace, config: Any, progress: Any) -> tuple[list[_Event], Any]:
    from airflow_kafka_events.errors import ConfigurationError
    from airflow_kafka_events.kafka.consumer import ConsumedRecord
    from airflow_kafka_events.ui.inspection.reader import message_headers, message_timestamp_ms, scan
    from airflow_kafka_events.ui.inspection.window import ScanWindow

    events: list[_Event] = []

    def keep(msg: Any) -> None:
        record = ConsumedRecord(
            topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), key=msg.key(),
            headers=tuple(message_headers(msg)), timestamp_ms=message_timestamp_ms(msg),
            value=msg.value(), raw=msg.value(),
        )  # fmt: skip
        events.append(_Event(record))

    window = ScanWindow(since=args.since, until=args.until, max_records=args.max_records)
    scanned = scan(
        dict(config.kafka.config), config.topic, window, keep, timeout=args.timeout, progress=progress
    )
    if scanned.truncated:
        raise ConfigurationError(
            f"nothing was posted: {scanned.describe()}; a replay must see the whole window: raise "
            "--max-records or narrow --from / --until"
        )
    return events, scanned


def _each(
    args: argparse.Namespace, what: str, events: Iterable[_Event], step: Callable[[_Event], None]
) -> None:
    todo = list(events)
    with progress_bar(args, what) as progress:
        for done, event in enumerate(todo, start=1):
            step(event)
            if progress is not None:
                progress(done, len(todo))


def _report(args: argparse.Namespace, replay: _Replay, scanned: Any) -> int:
    counts = Counter(event.outcome for event in replay.events)
    failed = counts["failed"]
    if args.json:
        emit_json(
            {
                "window": scanned.to_dict(),
                "airflow_url": replay.config.api_url,
                "dry_run": args.dry_run,
                "counts": dict(sorted(counts.items())),
                "events": [event.to_dict() for event in replay.events],
            }
        )
    else:
        for event in replay.events:
            if event.outcome in {"posted", "failed", "refused", "missing"}:
                d = event.to_dict()
                print(
                    f"{event.outcome:<16} {d['asset_uri']} {d['event_id']} "
                    f"partition_key={d['partition_key']!r}"
                )
                if event.detail:
                    print(f"    {d['detail']}")
        summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "no asset events"
        print(f"{summary}; {scanned.describe()}")
        if args.dry_run:
            print("(dry run: nothing was posted; 'missing' events would be)")
    return 1 if failed else 0


def _replay_assets(args: argparse.Namespace) -> int:
    from airflow_kafka_events.assets.admission import AdmissionPipeline
    from airflow_kafka_events.assets.airflow_api import AirflowApiClient, AssetIdCache
    from airflow_kafka_events.bridge.config import BridgeConfig
    from airflow_kafka_events.cli.inspection import role_topic

    def command() -> int:
        config = BridgeConfig.from_args(args, topic=role_topic(args, "asset-events"))
        _check_authorization(args, config)
        with AirflowApiClient(
            config.api_url, config.username, config.password, timeout=config.request_timeout
        ) as api:
            replay = _Replay(
                config,
                api,
                AssetIdCache(api),
                AdmissionPipeline(config.admission_config(), decoder=config.kafka.codecs.asset),
            )
            replay.retrying("logging in to the Airflow API", api.login)
            with progress_bar(args, "reading asset events") as progress:
                replay.events, scanned = _read_window(args, config, progress)
            _each(args, "checking Airflow", replay.events, replay.check)
            if not args.dry_run:
                _each(args, "posting", [e for e in replay.events if e.outcome == "missing"], replay.post)
            return _report(args, replay, scanned)

    return run_command(args, command)


def add_replay_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from airflow_kafka_events.bridge import config as bc

    replay = subparsers.add_parser(
        "replay-assets",
        allow_abbrev=False,
        help="post the asset events of a Kafka window to an Airflow again, skipping those it has",
        description=(__doc__ or "").split("\n\n")[1].replace("\n", " "),
    )
    window = replay.add_argument_group("window")
    window.add_argument(
        "--from", dest="since", type=parse_time, required=True, metavar="TIME",
        help="asset events written at or after TIME (ISO-8601, or 2h / 7d ago)",
    )  # fmt: skip
    window.add_argument("--until", type=parse_time, default=None, metavar="TIME", help="and before TIME")
    window.add_argument(
        "--max-records", type=int, default=DEFAULT_MAX_RECORDS, metavar="N",
        help="refuse a window with more than N records in a partition (%(default)s)",
    )  # fmt: skip
    window.add_argument(
        "--asset", dest="assets", action="append", default=[], metavar="PATTERN",
        help="only events of assets whose URI or name matches (fnmatch; repeat)",
    )  # fmt: skip
    api = replay.add_argument_group("Airflow REST API")
    api.add_argument(
        "--airflow-url", "--api-url", dest="api_url", default=None, metavar="URL",
        help=f"base URL of the api-server (default: ${bc.ENV_API_URL})",
    )  # fmt: skip
    api.add_argument(
        "--username", default=None, help=f"a user that may create asset events (${bc.ENV_USERNAME})"
    )
    api.add_argument(
        "--password-file", default=None, metavar="FILE",
        help=f"file holding the password (default: ${bc.ENV_PASSWORD_FILE}, else ${bc.ENV_PASSWORD})",
    )  # fmt: skip
    api.add_argument("--password", nargs="?", action=RefusePassword, help=argparse.SUPPRESS)
    api.add_argument(
        "--request-timeout", type=float, default=10.0, help="seconds per HTTP request (%(default)s)"
    )
    api.add_argument("--max-attempts", type=int, default=8, help="attempts per request (%(default)s)")
    api.add_argument(
        "--recent-events-limit", type=int, default=1000, metavar="N",
        help="how many of an asset's most recent Airflow events are searched for each event (%(default)s)",
    )  # fmt: skip
    authorization = replay.add_argument_group(
        "authorization (the bridge's: one of them is required)",
        "Events the bridge refuses are not posted: give its rules, or say that it has none.",
    )
    add_authorization_args(authorization, "refused (not posted)")
    authorization.add_argument(
        "--allow-any-source",
        action="store_true",
        help="the bridge runs without allow rules and signing keys: every source is admitted",
    )
    replay.add_argument("--dry-run", action="store_true", help="check only: report what would be posted")
    add_common_args(replay, topic_role="asset-events")
    replay.set_defaults(handler=_replay_assets, group_parser=replay)
