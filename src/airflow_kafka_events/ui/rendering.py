"""How the view answers: JSON, with every secret masked last.

Whatever an answer holds went through :mod:`airflow_kafka_events.ui.inspection.redact` where it was
read (payload previews, headers, extra, keys, error messages; that module's doc says what it masks
and what Airflow's masker does).  An answer's structure also goes through Airflow's masker
(``redact``: its sensitive key names, ``[core] sensitive_var_conn_names`` included).  As a last
line, :func:`mask` runs on the whole answer: Airflow's secrets maskers (every connection password
and sensitive extra the process loaded) and the secret-named values of the view's own Kafka
connection (``sasl.password``, ``ssl.key.password`` ...) are replaced by ``***``, whatever field
they turned up in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import markupsafe
from fastapi.responses import JSONResponse, Response

from airflow_kafka_events.ui.inspection.redact import MASK, is_secret_name

__all__ = [
    "mask",
    "render_json",
    "secrets_of",
]

#: Secrets shorter than this are not masked (they would mask common words); Airflow's default.
MIN_SECRET_LENGTH = 5


def secrets_of(config: Mapping[str, Any] | None, extra: Iterable[str | None] = ()) -> list[str]:
    """The values of ``config``'s secret-named keys, plus ``extra``, long enough to mask."""
    values = [str(v) for k, v in (config or {}).items() if is_secret_name(str(k))]
    values.extend(v for v in extra if v)
    return sorted({v for v in values if len(v) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


def _airflow_masked(text: str) -> str:
    from airflow._shared.secrets_masker import redact as core_redact

    text = str(core_redact(text))
    try:
        from airflow.sdk._shared.secrets_masker import redact as sdk_redact
    except ImportError:  # pragma: no cover - the task SDK is part of Airflow 3
        return text
    return str(sdk_redact(text))


def _written_forms(secret: str) -> list[str]:
    """How ``secret`` can appear in an answer: as is, JSON-escaped (``json.dumps``: quotes,
    backslashes, non-ASCII as ``\\uXXXX``), or HTML-escaped, plain or JSON-escaped (as a record may
    carry it: an error message quoting a web page, a header copied from one)."""
    in_json = json.dumps(secret)[1:-1]
    forms = {secret, str(markupsafe.escape(secret)), in_json, str(markupsafe.escape(in_json))}
    return sorted(forms, key=len, reverse=True)


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with Airflow's masked values and ``secrets`` (in any written form) replaced by ``***``."""
    for secret in secrets:
        for form in _written_forms(secret):
            if form in text:
                text = text.replace(form, MASK)
    return _airflow_masked(text)


#: Characters a JSON answer writes as ``\\uXXXX`` (the same JSON): no markup from a record survives in
#: it, whatever reads it as HTML (a browser sniffing, a proxy's error page, a log viewer).
_JSON_MARKUP = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def render_json(payload: Any, *, secrets: Iterable[str] = (), status: int = 200) -> Response:
    from airflow._shared.secrets_masker import redact as core_redact

    text = mask(json.dumps(core_redact(payload), default=str, sort_keys=True), secrets)
    return Response(text.translate(_JSON_MARKUP), status_code=status, media_type=JSONResponse.media_type)
