"""The one redaction policy for what is shown to people: pages, JSON answers, CLI output.

Everything the Kafka Events view and the operator CLI show of a record (payload previews,
``extra``, headers, keys, error messages, asset URIs) goes through this module where it is read;
the view then runs Airflow's masker over each whole answer.  Which does what:

* Airflow's secrets masker (``redact`` in ``airflow._shared.secrets_masker``, the api-server's own;
  applied by :mod:`airflow_kafka_events.ui.rendering`, in the view only, as the CLI imports no
  Airflow module) masks the *values* of secrets the process registered (connection passwords,
  sensitive extras and variables) wherever they appear, and the values of dict keys named like its
  sensitive fields (``DEFAULT_SENSITIVE_FIELDS`` and ``[core] sensitive_var_conn_names``) in a
  structure.  It knows nothing of keys inside text, ``cookie`` headers or URL credentials.
* This module masks, for the view and the CLI alike:

  - values of secret-looking keys at any depth of a structure (:func:`redact`), keys of any type (a
    Python literal's bytes or tuple keys are read as text), and the value of a ``{"name": "Cookie",
    "value": ...}`` entry (a header list as JSON); a key is secret-looking when its name
    (NFKC-normalized: full-width letters count) contains ``password``, ``passwd``, ``passphrase``,
    ``secret``, ``token``, ``signature``, ``authorization``, ``credential``, ``private``, ``cookie``,
    ``session``, ``bearer``, ``auth header``, ``api key`` / ``access key`` / ``service key``, ``dsn``,
    ``connection string``, ``webhook url``, ``keyfile``, ``service account`` or ``proxy`` (any case,
    any separator: a superset of Airflow's default sensitive fields), or is ``key`` / ends with
    ``_key``, ``-key`` or ``.key`` -- except the names this package uses for non-secrets
    (``partition_key``, ``idempotency_key``);
  - the same keys inside text (:func:`redact_text`): JSON (``"password": "x"``, also JSON escaped
    inside JSON), Python repr (``{'password': 'x'}``), ``password=x`` / ``token: x`` fragments and
    ``Cookie:`` / ``Authorization:`` header lines (the rest of the line), form fields
    (``user[password]=x``), quoted pairs in a tuple or list (a Python repr of a header list,
    ``[('cookie', b'...')]``); a string that *is* a JSON document or a Python literal is parsed and
    redacted as a structure (a secret key's whole value, object or list included);
  - credentials recognisable without a key: a JWT, what follows ``Bearer `` and a base64 word after
    ``Basic ``, a PEM private key block;
  - URL credentials: ``scheme://user:pw@host`` becomes ``scheme://user:***@host``, and a user alone
    (``https://token@host``) ``***@``;
  - header values whose header name is secret-looking (``cookie``, ``set-cookie``, ``authorization``,
    ``x-api-key`` ...), by the callers through :func:`is_secret_name`.

  Not recognised (no rule can tell them from text): a secret in prose (``the password is x``), key
  names spelled with look-alike letters of another script, percent- or entity-encoded key names
  (``pass%77ord=``), and a value encoded beyond recognition (base64 of a JSON document).  Every
  pattern is one pass over the text, whatever it holds.

:func:`preview` turns a value into bounded text for a page or a terminal.  Escaping what a terminal
would interpret is the CLI's (:mod:`airflow_kafka_events.cli.terminal`); HTML escaping the templates'.

This module imports no Airflow module.
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "PREVIEW_LIMIT", "clip", "is_secret_name", "preview", "redact", "redact_text"]

MASK = "***"
#: Characters of a preview (payloads, ``extra``), unless the caller asks for another bound.
PREVIEW_LIMIT = 2048
#: Longest text parsed as a JSON document or Python literal (longer text: the text rules only).
_PARSE_LIMIT = 200_000
#: Nesting a structure is redacted to; what lies deeper is masked whole (a record nested thousands
#: deep would otherwise exhaust the recursion limit and break the page listing it).
MAX_DEPTH = 64

_SECRET_WORDS = (
    r"pass(?:word|wd|phrase)|pass\b|pwd|secret|token|signature|authori[sz]ation|auth\b|jwt|credential|private"
    r"|cookie|session"
    r"|bearer|auth[-_. ]?header|(?:api|access|service)[-_. ]?key|apikey|dsn|connection[-_. ]?string"
    r"|webhook[-_. ]?url"
    r"|keyfile|service[-_. ]?account|prox(?:y|ies)"
)
_SECRET_PARTS = re.compile(_SECRET_WORDS, re.IGNORECASE)
_KEY_NAME = re.compile(r"(?:^|[-_.])key$", re.IGNORECASE)
_NOT_SECRET = frozenset(
    {"partition_key", "idempotency_key", "idempotency-key", "x-idempotency-key", "partition-key"}
)

# Text patterns run over whatever a record holds: none backtracks over a long run of text (a key starts
# only at a word's start and is taken whole, possessive quantifiers give nothing back), so a long value
# cannot stall a page.
# A secret-looking key in text: bare, or quoted ("..." / '...', also JSON-escaped \"...\") ...
_TEXT_KEY = (
    r"(?<![\w.\\-])(?P<q>\\*+[\"'])?(?P<name>(?=[\w.-]*?(?:" + _SECRET_WORDS + r"))[\w.-]++)(?(q)(?P=q))"
    r"(?P<sep>\]?+\s*+[=:]\s*+)"
)
# ... and its value: quoted (up to the same quote, within 4,096 characters; the two alternatives inside
# the quotes never match the same text, so an unclosed quote after a run of backslashes costs one pass,
# not exponential time), a quote left open (the rest of its line), an auth scheme and its credentials,
# or a bare word
_TEXT_VALUE = (
    r"(?P<value>(?P<vq>\\*+[\"'])(?:[^\\]|\\.){0,4096}?(?P=vq)"
    r"|\\*+[\"'][^\r\n]*+"
    r"|(?:bearer|basic|digest|token)\s++[^\s,;&\"'<>{}\[\]]++"
    r"|[^\s,;&\"'<>{}\[\]]++)"
)
_IN_TEXT = re.compile(_TEXT_KEY + _TEXT_VALUE, re.IGNORECASE | re.DOTALL)
_HEADER_LINE = re.compile(
    r"(?P<name>\b(?:set-)?cookie|\b(?:proxy-)?authorization)(?P<sep>[ \t]*+:[ \t]*+)(?P<value>[^\r\n]++)",
    re.IGNORECASE,
)
# ... or a quoted secret-looking name and its quoted value in a tuple or list: Python's repr of a header
# list, ``[('cookie', b'session=...')]``
_PAIR_IN_TEXT = re.compile(
    r"(?P<open>[(\[]\s*+(?P<q>[\"'])(?P<name>(?=[\w.-]*?(?:" + _SECRET_WORDS + r"))[\w.-]++)(?P=q)"
    r"\s*+,\s*+b?)(?P<vq>[\"'])(?:[^\\]|\\.){0,4096}?(?P=vq)",
    re.IGNORECASE | re.DOTALL,
)
# the password runs to the authority's last "@" (a password may hold "@")
_URL_USERINFO = re.compile(
    r"(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]*+://)(?P<user>[^\s:/@\"'<>]*+)"
    r"(?::(?P<password>[^\s/\"'<>]*))?@",
    re.IGNORECASE,
)
# secrets recognisable without a key: a JWT, a bearer credential, a PEM private key block
_BARE_SECRETS = re.compile(
    r"\beyJ[\w-]{4,}+\.[\w-]{4,}+\.[\w-]*+"
    r"|(?<=\bbearer )[^\s,;\"'<>]++"
    r"|(?<=\bbasic )(?=[A-Za-z0-9+/]*+[0-9+/=])[A-Za-z0-9+/]{8,}+={0,2}+(?![\w+/=])"
    # a key block to its END line, else the 16 KB after its BEGIN line: masked either way, and a run of
    # BEGIN lines with no END is one pass (each failed search for END would rescan 16 KB)
    r"|-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----"
    r"(?:[\s\S]{0,16384}?-----END[A-Z ]{0,40}PRIVATE KEY-----|[\s\S]{0,16384}+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether a key or header named ``name`` holds a secret (see the module doc); compatibility forms
    (full-width letters, ligatures) count as the letters they stand for."""
    lowered = unicodedata.normalize("NFKC", name).strip().lower()
    if lowered in _NOT_SECRET:
        return False
    return bool(_SECRET_PARTS.search(lowered) or _KEY_NAME.search(lowered))


def _masked_pair(match: re.Match[str]) -> str:
    if match.group("name").lower() in _NOT_SECRET:
        return match.group(0)
    quote = match.group("vq") or ""
    key = match.group(0)[: match.start("value") - match.start(0)]
    return f"{key}{quote}{MASK}{quote}"


def _masked_tuple(match: re.Match[str]) -> str:
    if match.group("name").lower() in _NOT_SECRET:
        return match.group(0)
    return f"{match.group('open')}{match.group('vq')}{MASK}{match.group('vq')}"


def _masked_url(match: re.Match[str]) -> str:
    if match.group("password") is not None:
        return f"{match.group('scheme')}{match.group('user')}:{MASK}@"
    return f"{match.group('scheme')}{MASK}@"


def _parsed(text: str) -> Any:
    """``text`` as a JSON document or a Python literal (a dict or a list), else ``None``."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[(" or len(stripped) > _PARSE_LIMIT:
        return None
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, (dict, list, tuple)):
            return value
    return None


def redact_text(text: str) -> str:
    """``text`` with the secrets it spells out masked (see the module doc).

    A JSON document or Python literal is redacted as a structure and written back as JSON.
    """
    parsed = _parsed(text)
    if parsed is not None:
        return json.dumps(redact(parsed), sort_keys=True, default=str)
    text = _HEADER_LINE.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", text)
    text = _IN_TEXT.sub(_masked_pair, text)
    text = _PAIR_IN_TEXT.sub(_masked_tuple, text)
    text = _URL_USERINFO.sub(_masked_url, text)
    return _BARE_SECRETS.sub(MASK, text)


def _is_secret_pair(obj: Any) -> bool:
    """``[name, value]`` with a secret-looking name (a header of a header list)."""
    if not isinstance(obj, (list, tuple)) or len(obj) != 2:
        return False
    return isinstance(obj[0], str) and is_secret_name(obj[0])


def _key_text(key: Any) -> str:
    """A mapping's key as text (a Python literal may have bytes, numbers or tuples as keys)."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray)):
        return bytes(key).decode("utf-8", "replace")
    return repr(key)


#: Fields of a ``{"name": ..., "value": ...}`` entry (a header list as JSON): a secret-looking name
#: masks the value fields.
_NAME_FIELDS = ("name", "key", "header")
_VALUE_FIELDS = frozenset({"value", "values"})


def _named_secret(obj: Mapping[Any, Any]) -> bool:
    return any(isinstance(obj.get(f), str) and is_secret_name(obj[f]) for f in _NAME_FIELDS)


def redact(obj: Any, depth: int = 0) -> Any:
    """A copy of ``obj`` with secret-looking keys' values masked (recursively; ``None`` stays ``None``),
    strings through :func:`redact_text`; bytes become their size; keys become text.  A ``[name, value]``
    pair or a ``{"name"|"key"|"header": name, "value"|"values": ...}`` entry whose name is
    secret-looking (a header list) has its value masked; a structure deeper than :data:`MAX_DEPTH`
    is masked whole."""
    if depth > MAX_DEPTH and isinstance(obj, (Mapping, list, tuple, set, frozenset)):
        return MASK
    if isinstance(obj, Mapping):
        named_secret = _named_secret(obj)
        out: dict[str, Any] = {}
        for key, value in obj.items():
            name = _key_text(key)
            if named_secret and name in _NAME_FIELDS and isinstance(value, str) and is_secret_name(value):
                out[name] = value  # the header's name ("cookie"), shown; its value below is masked
            elif value is not None and (is_secret_name(name) or (named_secret and name in _VALUE_FIELDS)):
                out[name] = MASK
            else:
                out[name] = redact(value, depth + 1)
        return out
    if _is_secret_pair(obj):
        return [obj[0], MASK if obj[1] is not None else None]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [redact(item, depth + 1) for item in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def preview(obj: Any, limit: int = PREVIEW_LIMIT) -> str:
    """Redacted text of ``obj`` (JSON for structures) of at most ``limit`` characters.

    A cut preview ends with ``"... (N more characters)"`` (within the bound).
    """
    value = redact(obj)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return clip(text, limit)


def clip(text: str, limit: int = PREVIEW_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    suffix = f"... ({len(text)} characters in all)"
    return (text[: max(0, limit - len(suffix))] + suffix)[:limit]
