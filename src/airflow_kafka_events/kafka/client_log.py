"""What a librdkafka client sees, turned into Python logging, broker state and error causes.

One :class:`ClientHealth` per librdkafka client (producer or consumer).  :meth:`ClientHealth.wire`
adds three callbacks to the client's configuration (chaining any the caller set):

* ``logger`` — librdkafka's own log lines go to the Python logger
  ``airflow_kafka_events.librdkafka`` at their real levels (confluent-kafka maps syslog levels:
  ``LOG_ERR`` → ``ERROR``, ``LOG_WARNING`` → ``WARNING``, ``LOG_NOTICE``/``LOG_INFO`` → ``INFO``,
  ``LOG_DEBUG`` → ``DEBUG``), instead of raw stderr.  Repeats are rate-limited: one line per cause
  (the text with its numbers masked) per interval; the next line of that cause, or :meth:`flush`,
  says how many were suppressed.  Lines are served by ``poll()``.
* ``error_cb`` — the last error of each kind (brokers unreachable, authentication failed,
  unknown topic ...) is kept, so that an error raised later can name the cause librdkafka saw.
  When all brokers go down one WARNING line is logged, and one INFO line when a broker is back.
* ``stats_cb`` (``statistics.interval.ms``) — per-broker connection state and the number of
  Produce requests each broker connection fully transmitted, used by the producer to tell a
  message that was never sent from one that may have been written
  (:meth:`BrokerSnapshot.produce_sent_since`).

Configured secrets (``sasl.password`` ...) are masked in every text this module hands out.
This module imports no Airflow module.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from confluent_kafka import KafkaError

from airflow_kafka_events.errors import (
    AuthenticationNotSentError,
    KafkaAuthenticationError,
    KafkaOperationError,
    KafkaTlsError,
    TlsNotSentError,
)

__all__ = [
    "DEFAULT_REPEAT_INTERVAL",
    "LIBRDKAFKA_LOGGER",
    "BrokerSnapshot",
    "Cause",
    "ClientHealth",
    "ObservedClientError",
    "RateLimitedLogger",
    "RepeatLimiter",
    "cause_of",
    "refusal_error",
    "repeat_key",
]

#: Python logger that receives librdkafka's own log lines.
LIBRDKAFKA_LOGGER = "airflow_kafka_events.librdkafka"
#: Seconds between two lines of the same cause.
DEFAULT_REPEAT_INTERVAL = 30.0
#: librdkafka settings whose values are never shown.
SECRET_KEYS = (
    "sasl.password",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "sasl.oauthbearer.client.secret",
    "ssl.key.pem",
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- causes
class Cause(str, Enum):
    """Why librdkafka could not do what it was asked, as a user would say it."""

    UNREACHABLE = "brokers unreachable"
    LEADER_UNAVAILABLE = "partition leader unavailable"
    AUTHENTICATION = "authentication failed"
    TLS = "TLS handshake failed"
    AUTHORIZATION = "not authorized"
    UNKNOWN_TOPIC = "unknown topic or partition"
    TOO_LARGE = "record too large"
    TIMED_OUT = "timed out"
    FATAL = "fatal client error"
    OTHER = "error"


_CAUSES: dict[int, Cause] = {
    KafkaError._TRANSPORT: Cause.UNREACHABLE,
    KafkaError._ALL_BROKERS_DOWN: Cause.UNREACHABLE,
    KafkaError._RESOLVE: Cause.UNREACHABLE,
    KafkaError._AUTHENTICATION: Cause.AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED: Cause.AUTHENTICATION,
    KafkaError._SSL: Cause.TLS,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: Cause.AUTHORIZATION,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: Cause.AUTHORIZATION,
    KafkaError.GROUP_AUTHORIZATION_FAILED: Cause.AUTHORIZATION,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Cause.AUTHORIZATION,
    KafkaError.UNKNOWN_TOPIC_OR_PART: Cause.UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_TOPIC: Cause.UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION: Cause.UNKNOWN_TOPIC,
    KafkaError.MSG_SIZE_TOO_LARGE: Cause.TOO_LARGE,
    KafkaError._MSG_TIMED_OUT: Cause.TIMED_OUT,
    KafkaError._TIMED_OUT: Cause.TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT: Cause.TIMED_OUT,
    KafkaError._FATAL: Cause.FATAL,
}

#: Causes that do not heal by retrying: clients report them at once instead of waiting out a timeout.
REFUSALS = (Cause.AUTHENTICATION, Cause.TLS)

#: What to do about each cause (``{servers}`` is the bootstrap servers).
FIXES: Mapping[Cause, str] = {
    Cause.UNREACHABLE: (
        "check that the brokers at {servers} run and are reachable from this host "
        "(bootstrap.servers, the brokers' advertised.listeners, firewalls)"
    ),
    Cause.LEADER_UNAVAILABLE: (
        "other brokers of {servers} answered: a broker is down or a leader election was under way; "
        "with replicated topics (RF >= 2, min.insync.replicas below the live replicas) a new leader "
        "takes over within seconds: retry with the same idempotency key, and check the down broker"
    ),
    Cause.AUTHENTICATION: (
        "check the client's credentials (security.protocol, sasl.mechanism, sasl.username, "
        "sasl.password, ssl.*) in the connection or properties file"
    ),
    Cause.TLS: (
        "check ssl.ca.location (the CA that signed the brokers' certificates), that the certificates "
        "name the host in bootstrap.servers {servers}, and that security.protocol matches the "
        "listener (SSL / SASL_SSL)"
    ),
    Cause.AUTHORIZATION: "grant this client's principal the ACLs it needs (e.g. WRITE on the topic)",
    Cause.UNKNOWN_TOPIC: "create the topics first (airflow-kafka-events topics ensure) or fix the name",
    Cause.TOO_LARGE: "send a smaller record, or raise the limit that was hit",
    Cause.TIMED_OUT: "check the brokers' health at {servers}, or wait longer (timeout)",
    Cause.FATAL: "the client cannot continue: restart the process; see the ERROR lines before this one",
    Cause.OTHER: "see the client's log lines (logger airflow_kafka_events.librdkafka)",
}


def cause_of(code: int | None) -> Cause:
    """The :class:`Cause` of a librdkafka error code (``OTHER`` when not one we name)."""
    return _CAUSES.get(code, Cause.OTHER) if code is not None else Cause.OTHER


# --------------------------------------------------------------------------- rate limiting
_NUMBERS = re.compile(r"\d+")


def repeat_key(text: str) -> str:
    """What makes two log lines "the same cause": their text with every number masked."""
    return _NUMBERS.sub("#", text)


@dataclass
class _Repeat:
    last_emitted: float
    suppressed: int = 0
    last_text: str = ""
    last_level: int = logging.INFO


class RepeatLimiter:
    """At most one line per key per ``interval`` seconds, counting what it suppressed.

    :meth:`admit` returns ``None`` for a line to suppress, else how many lines of that key were
    suppressed since the last one admitted (``0`` the first time).  :meth:`due` hands back, once,
    the keys whose interval is over with suppressed lines pending (to report them even when the
    cause stopped).  Not thread-safe on its own: :class:`RateLimitedLogger` holds a lock.
    """

    def __init__(
        self, interval: float = DEFAULT_REPEAT_INTERVAL, *, clock: Callable[[], float] = time.monotonic
    ):
        if interval < 0:
            raise ValueError(f"interval must be >= 0, got {interval!r}")
        self.interval = interval
        self._clock = clock
        self._repeats: dict[Any, _Repeat] = {}

    def admit(self, key: Any, text: str = "", level: int = logging.INFO) -> int | None:
        now = self._clock()
        repeat = self._repeats.get(key)
        if repeat is None:
            self._repeats[key] = _Repeat(last_emitted=now)
            return 0
        if now - repeat.last_emitted < self.interval:
            repeat.suppressed += 1
            repeat.last_text, repeat.last_level = text, level
            return None
        suppressed, repeat.suppressed, repeat.last_emitted = repeat.suppressed, 0, now
        return suppressed

    def due(self, *, everything: bool = False) -> list[tuple[Any, int, str, int]]:
        """``(key, suppressed, last_text, last_level)`` of keys whose suppressed lines are due."""
        now = self._clock()
        out = []
        for key, repeat in self._repeats.items():
            if repeat.suppressed and (everything or now - repeat.last_emitted >= self.interval):
                out.append((key, repeat.suppressed, repeat.last_text, repeat.last_level))
                repeat.suppressed, repeat.last_emitted = 0, now
        return out


class RateLimitedLogger:
    """The object given as confluent-kafka's ``logger``: rate-limits, masks secrets, forwards.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client_name, text)`` with the
    syslog level already mapped to a :mod:`logging` level.
    """

    def __init__(
        self,
        target: logging.Logger | None = None,
        *,
        interval: float = DEFAULT_REPEAT_INTERVAL,
        redact: Callable[[str], str] = lambda text: text,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target if target is not None else logging.getLogger(LIBRDKAFKA_LOGGER)
        self.limiter = RepeatLimiter(interval, clock=clock)
        self._redact = redact
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        try:
            text = msg % args if args else str(msg)
        except (TypeError, ValueError):
            text = " ".join([str(msg), *map(str, args)])
        text = self._redact(text)
        with self._lock:
            suppressed = self.limiter.admit((level, repeat_key(text)), text, level)
            due = self.limiter.due()
        if suppressed is not None:
            suffix = (
                f" (and {suppressed} similar line(s) in the last {self.limiter.interval:g}s)"
                if suppressed
                else ""
            )
            self.target.log(level, "%s%s", text, suffix)
        self._report(due)

    def flush(self) -> None:
        """Report every suppressed repeat now (e.g. when the client closes)."""
        with self._lock:
            due = self.limiter.due(everything=True)
        self._report(due)

    def _report(self, due: Iterable[tuple[Any, int, str, int]]) -> None:
        for _key, count, text, level in due:
            self.target.log(level, "%s (repeated %d time(s), suppressed)", text, count)


# --------------------------------------------------------------------------- broker state
@dataclass(frozen=True)
class BrokerSnapshot:
    """One statistics report: when (``ts``, monotonic seconds), and per broker connection its
    state and how many Produce requests it fully transmitted."""

    ts: float
    produce_requests: Mapping[str, int] = field(default_factory=dict)
    states: Mapping[str, str] = field(default_factory=dict)
    #: topics a broker's metadata answer did not know (no partition but librdkafka's "-1")
    unknown_topics: frozenset[str] = frozenset()
    #: topics with at least one partition in the brokers' metadata
    known_topics: frozenset[str] = frozenset()
    #: every topic the client holds, whatever its state
    listed_topics: frozenset[str] = frozenset()

    @property
    def any_up(self) -> bool:
        return any(state == "UP" for state in self.states.values())

    def produce_sent_since(self, earlier: BrokerSnapshot | None) -> bool:
        """Whether any Produce request was transmitted between ``earlier`` and this snapshot.

        ``earlier=None`` means "since the client was created" (every counter started at 0).
        A broker connection that disappeared in between counts as "maybe" (``True``).
        """
        before = {} if earlier is None else earlier.produce_requests
        if any(name not in self.produce_requests for name in before):
            return True
        return any(count != before.get(name, 0) for name, count in self.produce_requests.items())

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any]) -> BrokerSnapshot:
        brokers = stats.get("brokers") or {}
        topics = stats.get("topics") or {}
        partitioned = {name for name, t in topics.items() if set(t.get("partitions") or {}) - {"-1"}}
        return cls(
            ts=float(stats.get("ts", 0)) / 1e6,
            produce_requests={
                name: int((b.get("req") or {}).get("Produce", 0)) for name, b in brokers.items()
            },
            states={name: str(b.get("state", "")) for name, b in brokers.items()},
            # a metadata age of 0 is "never answered" or "answered this millisecond": neither says
            unknown_topics=frozenset(
                name
                for name, t in topics.items()
                if name not in partitioned and int(t.get("metadata_age") or 0) > 0
            ),
            known_topics=frozenset(partitioned),
            listed_topics=frozenset(topics),
        )


@dataclass(frozen=True)
class ObservedClientError:
    """An error librdkafka reported to a client: its cause, code, redacted text and when it came."""

    cause: Cause
    code: int
    text: str
    at: float


class ClientHealth:
    """Callbacks and state of one librdkafka client (thread-safe).

    :param bootstrap_servers: shown in messages (never a secret).
    :param secrets: values masked in every text (the client's passwords).
    :param stats_interval: seconds between statistics reports (``statistics.interval.ms``).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        name: str = "client",
        secrets: Iterable[str] = (),
        stats_interval: float = 1.0,
        repeat_interval: float = DEFAULT_REPEAT_INTERVAL,
        state_logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.name = name
        self.stats_interval = stats_interval
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._clock = clock
        self._lock = threading.Lock()
        self._state_log = state_logger if state_logger is not None else log
        self.logger = RateLimitedLogger(interval=repeat_interval, redact=self.redact, clock=clock)
        self._errors: dict[Cause, ObservedClientError] = {}
        self._last_transport: ObservedClientError | None = None
        self.snapshot: BrokerSnapshot | None = None
        self._unknown_topics: frozenset[str] = frozenset()
        self.down_since: float | None = None
        self._snapshot_listeners: list[Callable[[BrokerSnapshot], None]] = []
        self._user_error_cb: Callable[[KafkaError], Any] | None = None
        self._refusal_listeners: list[Callable[[ObservedClientError], None]] = []
        self.security_protocol = "PLAINTEXT"
        self.mechanism: str | None = None
        self.username: str | None = None
        self._user_stats_cb: Callable[[str], Any] | None = None

    @classmethod
    def for_config(cls, config: Mapping[str, Any], **kwargs: Any) -> ClientHealth:
        health = cls(
            bootstrap_servers=str(config.get("bootstrap.servers", "")),
            secrets=[str(config[k]) for k in SECRET_KEYS if config.get(k)],
            **kwargs,
        )
        health.security_protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
        mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
        health.mechanism = str(mechanism) if mechanism else None
        health.username = str(config["sasl.username"]) if config.get("sasl.username") else None
        return health

    # ------------------------------------------------------------------ config
    def wire(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` with this object's ``error_cb``, ``stats_cb`` and ``logger`` (chaining the
        caller's callbacks; a caller's ``statistics.interval.ms`` is kept when it is shorter)."""
        wired = dict(config)
        self._user_error_cb = wired.pop("error_cb", None)
        self._user_stats_cb = wired.pop("stats_cb", None)
        wired.pop("logger", None)
        interval_ms = max(1, int(self.stats_interval * 1000))
        if self._user_stats_cb is not None and wired.get("statistics.interval.ms"):
            interval_ms = min(interval_ms, int(wired["statistics.interval.ms"]))
        self.stats_interval = interval_ms / 1000
        wired.update(
            {
                "error_cb": self.error_cb,
                "stats_cb": self.stats_cb,
                "statistics.interval.ms": interval_ms,
                "logger": self.logger,
            }
        )
        return wired

    def add_snapshot_listener(self, listener: Callable[[BrokerSnapshot], None]) -> None:
        self._snapshot_listeners.append(listener)

    # ------------------------------------------------------------------ text
    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # ------------------------------------------------------------------ callbacks
    def error_cb(self, err: KafkaError) -> None:
        code = err.code()
        seen = ObservedClientError(cause_of(code), code, self.redact(err.str()), self._clock())
        went_down = False
        with self._lock:
            self._errors[seen.cause] = seen
            if code == KafkaError._TRANSPORT:
                self._last_transport = seen
            if code == KafkaError._ALL_BROKERS_DOWN and self.down_since is None:
                self.down_since, went_down = seen.at, True
        if went_down:
            self._state_log.warning(
                "Kafka %s: every broker at %s is unreachable (%s); the client keeps retrying",
                self.name,
                self.bootstrap_servers,
                self.describe_unreachable(),
            )
        elif seen.cause in REFUSALS:
            self.logger.log(logging.ERROR, "%s", self.refusal_text(seen))
            for listener in list(self._refusal_listeners):
                listener(seen)
        elif seen.cause in (Cause.AUTHORIZATION, Cause.FATAL):
            self.logger.log(logging.ERROR, "%s: %s", seen.cause.value, seen.text)
        if self._user_error_cb is not None:
            self._user_error_cb(err)

    def stats_cb(self, stats_json: str) -> None:
        try:
            snapshot = BrokerSnapshot.from_stats(json.loads(stats_json))
        except (ValueError, TypeError, AttributeError):
            snapshot = None
        if snapshot is not None:
            self.observe(snapshot)
        if self._user_stats_cb is not None:
            self._user_stats_cb(stats_json)

    def observe(self, snapshot: BrokerSnapshot) -> None:
        with self._lock:
            self.snapshot = snapshot
            # a topic stays unknown until the brokers name a partition of it or the client drops it
            kept = (self._unknown_topics & snapshot.listed_topics) - snapshot.known_topics
            self._unknown_topics = kept | snapshot.unknown_topics
            listeners = list(self._snapshot_listeners)
        if snapshot.any_up:
            self.mark_up()
        for listener in listeners:
            listener(snapshot)

    def mark_up(self) -> None:
        """A broker answered (a connection is UP, or a message was acknowledged)."""
        with self._lock:
            since, self.down_since = self.down_since, None
        if since is not None:
            self._state_log.info(
                "Kafka %s: brokers at %s reachable again after %.1fs",
                self.name,
                self.bootstrap_servers,
                self._clock() - since,
            )

    # ------------------------------------------------------------------ state
    @property
    def down(self) -> bool:
        return self.down_since is not None

    def topic_unknown(self, topic: str) -> bool:
        """Whether the brokers' last metadata answer about ``topic`` said they do not know it (as
        seen by the statistics so far: one report's age of 0 does not forget an earlier answer)."""
        with self._lock:
            return topic in self._unknown_topics

    def last_error(self, since: float | None = None) -> ObservedClientError | None:
        """The most telling error seen (at or after ``since``): authentication, authorization,
        unknown topic, then unreachable, then anything else."""
        order = (
            Cause.AUTHENTICATION,
            Cause.AUTHORIZATION,
            Cause.UNKNOWN_TOPIC,
            Cause.UNREACHABLE,
            Cause.FATAL,
        )
        with self._lock:
            errors = dict(self._errors)
        recent = {c: e for c, e in errors.items() if since is None or e.at >= since}
        for cause in order:
            if cause in recent:
                if cause is Cause.UNREACHABLE:
                    return ObservedClientError(
                        cause, recent[cause].code, self.describe_unreachable(), recent[cause].at
                    )
                return recent[cause]
        return next(iter(recent.values()), None)

    def describe_unreachable(self) -> str:
        transport = self._last_transport
        if transport is None:
            return "no broker connection"
        return f"all brokers down: {transport.text}" if self.down else transport.text

    # ------------------------------------------------------------------ refusals
    def add_refusal_listener(self, listener: Callable[[ObservedClientError], None]) -> None:
        """``listener(seen)`` is called (on librdkafka's callback thread) when the brokers refuse
        the client's credentials or the TLS handshake fails: neither heals by retrying."""
        self._refusal_listeners.append(listener)

    def refusal(self, since: float | None = None) -> ObservedClientError | None:
        """The credentials / TLS refusal seen (at or after ``since``), if any."""
        with self._lock:
            found = [self._errors[c] for c in REFUSALS if c in self._errors]
        return next((e for e in found if since is None or e.at >= since), None)

    def refusal_text(self, seen: ObservedClientError) -> str:
        """What went wrong, with whom, and the fix: the mechanism, the user and the brokers, never
        the password."""
        if seen.cause is Cause.AUTHENTICATION:
            who = (
                f"SASL mechanism {self.mechanism or '(none set)'}, user {self.username!r}"
                if self.username or self.mechanism
                else "no SASL credentials configured"
            )
            what = (
                f"the brokers at {self.bootstrap_servers} refused the credentials of the {self.name} ({who}, "
                f"security.protocol {self.security_protocol}); a wrong password and an unknown user "
                "look the same from here"
            )
        else:
            what = (
                f"the TLS handshake of the {self.name} with the brokers at {self.bootstrap_servers} "
                f"failed (security.protocol {self.security_protocol})"
            )
        return f"{seen.cause.value}: {what}: {seen.text}; fix: {self.fix_for(seen.cause)}"

    def fix_for(self, cause: Cause) -> str:
        return FIXES[cause].format(servers=self.bootstrap_servers)


def refusal_error(
    health: ClientHealth, seen: ObservedClientError, *, producing: bool = False
) -> KafkaOperationError:
    """The typed error of a refusal: :class:`KafkaAuthenticationError` or :class:`KafkaTlsError`
    (their not-sent variants for a producer: nothing was, or will be, published)."""
    if seen.cause is Cause.TLS:
        cls: type[KafkaOperationError] = TlsNotSentError if producing else KafkaTlsError
    else:
        cls = AuthenticationNotSentError if producing else KafkaAuthenticationError
    head = "not sent — nothing will be published: " if producing else ""
    return cls(head + health.refusal_text(seen), kafka_error=KafkaError(seen.code))
