"""Secret redaction: pure functions that keep credentials on the node.

Rules (issue 3, ``docs/wire-contract.md`` "Redaction replaces the value, never drops the flag"):

* a flag, env var or JSON key is secret when one of its words (split on ``-``, ``_``,
  ``.`` and camelCase) is in :data:`SECRET_WORDS` (``HF_TOKEN``, ``--api-key``,
  ``AWS_SECRET_ACCESS_KEY``, ``{"apiKey": ...}``); ``--max-num-batched-tokens``,
  ``--tokenizer``, ``num_speculative_tokens`` and ``--kv-cache-dtype`` are not
  (``TOKENS``, ``TOKENIZER`` and ``KV`` are other words);
* a secret's value is replaced by :data:`~fleet_agent.schema.REDACTED` unless it is
  a plain number (``--max-num-batched-tokens 8192`` style counters are not secrets);
* credentials inside URLs (``scheme://user:pass@host``) and secret query parameters
  (``?token=...``) are redacted wherever they appear;
* JSON-valued flags (``--speculative-config '{...}'``) are parsed and their secret
  keys redacted.

Every function takes an optional ``found`` set that collects the removed secret
values, so the collector can scrub them from any other field as a last line of
defence (:func:`scrub`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleet_agent.schema import REDACTED

#: Whole words that make a name secret (issue 3). Plural ``TOKENS`` is deliberately absent:
#: ``--max-num-batched-tokens`` is a count. ``CREDENTIALS``/``APIKEY``/``PASSWORDS`` are
#: common spellings of the same idea.
SECRET_WORDS = frozenset({
    "TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
    "CREDENTIALS", "APIKEY", "PASSWORDS", "SECRETS",
})

#: Flags whose value is a list (``--api-key k1 k2``): every following non-flag word is secret.
_LIST_SECRET_FLAGS = frozenset({"--api-key", "--api_key"})

#: Shortest secret value :func:`scrub` will search for; shorter strings would match by chance.
MIN_SCRUB_LEN = 6

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s?#]*)@")
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[A-Za-z0-9_.\-]+)=(?P<value>[^&#\s;\"']*)")
_ENV_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.*)$", re.DOTALL)
_JSON_PAIR = re.compile(r'"(?P<name>[^"\\]{1,128})"\s*:\s*"(?P<value>(?:[^"\\]|\\.)*)"')


def name_words(name: str) -> list[str]:
    """Split a flag/env/JSON key name into upper-case words.

    ``"--hf-token"`` -> ``["HF", "TOKEN"]``; ``"apiKey"`` -> ``["API", "KEY"]``.
    """
    stripped = name.lstrip("-")
    stripped = _CAMEL.sub("_", stripped)
    return [w for w in re.split(r"[-_.\s]+", stripped.upper()) if w]


def is_secret_name(name: str) -> bool:
    """True when ``name`` contains a word of :data:`SECRET_WORDS` (whole-word match)."""
    return any(word in SECRET_WORDS for word in name_words(name))


def is_plain_number(value: str) -> bool:
    """True for ``8192``, ``-1``, ``0.5``, ``1e3``: numbers are never treated as secrets."""
    return bool(_NUMBER.fullmatch(value.strip()))


def _remember(found: set[str] | None, value: str) -> None:
    if found is not None and value:
        found.add(value)


def redact_secret_value(value: str, found: set[str] | None = None) -> str:
    """Return ``REDACTED`` for a secret's value, the value itself when it is a plain number."""
    if value == "" or value == REDACTED or is_plain_number(value):
        return value
    _remember(found, value)
    return REDACTED


def redact_urls(text: str, found: set[str] | None = None) -> str:
    """Replace ``user:pass@`` in every URL and the value of secret query parameters.

    ``https://u:p@host/x?token=abc&n=1`` -> ``https://REDACTED@host/x?token=REDACTED&n=1``.
    """
    def userinfo(match: re.Match[str]) -> str:
        info = match.group("userinfo")
        if not info or info == REDACTED:
            return match.group(0)
        _remember(found, info)
        for part in info.split(":", 1):
            _remember(found, part if len(part) >= MIN_SCRUB_LEN else "")
        return f"{match.group('scheme')}{REDACTED}@"

    def query(match: re.Match[str]) -> str:
        if not is_secret_name(match.group("name")):
            return match.group(0)
        value = redact_secret_value(match.group("value"), found)
        return f"{match.group('sep')}{match.group('name')}={value}"

    if "://" in text:
        text = _URL_USERINFO.sub(userinfo, text)
    if "=" in text:
        text = _QUERY_PARAM.sub(query, text)
    return text


def _redact_json_obj(obj: Any, found: set[str] | None) -> Any:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, val in obj.items():
            if is_secret_name(str(key)) and not isinstance(val, bool | int | float) and val:
                _remember_nested(val, found)
                out[key] = REDACTED
            else:
                out[key] = _redact_json_obj(val, found)
        return out
    if isinstance(obj, list):
        return [_redact_json_obj(v, found) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, found)
    return obj


def _remember_nested(val: Any, found: set[str] | None) -> None:
    if isinstance(val, str):
        if not is_plain_number(val):
            _remember(found, val)
    elif isinstance(val, dict):
        for v in val.values():
            _remember_nested(v, found)
    elif isinstance(val, list):
        for v in val:
            _remember_nested(v, found)


def redact_json_text(text: str, found: set[str] | None = None) -> str:
    """Redact secret keys of a JSON object/array given as text.

    Unchanged input comes back byte-identical; a changed one is re-serialised
    compactly. Text that does not parse (truncated ``<...>`` values) is redacted
    with a ``"key": "value"`` pattern instead.
    """
    try:
        obj = json.loads(text)
    except ValueError:
        return _JSON_PAIR.sub(lambda m: _json_pair(m, found), text)
    redacted = _redact_json_obj(obj, found)
    if redacted == obj:
        return text
    return json.dumps(redacted, separators=(", ", ": "), ensure_ascii=False)


def _json_pair(match: re.Match[str], found: set[str] | None) -> str:
    if not is_secret_name(match.group("name")):
        return match.group(0)
    return f'"{match.group("name")}": "{redact_secret_value(match.group("value"), found)}"'


def redact_text(text: str, found: set[str] | None = None) -> str:
    """Redact a free-form value: JSON documents, ``NAME=value`` assignments and URLs."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        text = redact_json_text(text, found)
    match = _ENV_ASSIGN.match(text)
    if match and is_secret_name(match.group("name")):
        return f"{match.group('name')}={redact_secret_value(match.group('value'), found)}"
    return redact_urls(text, found)


def redact_argv(argv: list[str], found: set[str] | None = None) -> list[str]:
    """Redact a command line, keeping every flag and the number of words.

    Handles ``--flag=value``, ``--flag value`` (``--api-key k1 k2``: every value),
    ``-e HF_TOKEN=x`` style assignments, JSON values and URLs in any word.
    """
    out: list[str] = []
    pending = 0  # how many following words are the value of a secret flag
    list_flag = False
    for word in argv:
        if pending and not (word.startswith("-") and len(word) > 1 and not is_plain_number(word)):
            out.append(redact_secret_value(word, found))
            pending = pending - 1 if not list_flag else pending
            continue
        pending, list_flag = 0, False
        if word.startswith("-") and len(word) > 1 and not is_plain_number(word):
            flag, eq, value = word.partition("=")
            if is_secret_name(flag):
                if eq:
                    out.append(f"{flag}={redact_secret_value(value, found)}")
                else:
                    out.append(word)
                    pending, list_flag = 1, flag in _LIST_SECRET_FLAGS
                continue
            out.append(f"{flag}={redact_text(value, found)}" if eq else word)
            continue
        out.append(redact_text(word, found))
    return out


def redact_env(env: dict[str, str], found: set[str] | None = None) -> dict[str, str]:
    """Redact an environment: secret names lose their value; other values lose URL credentials."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if is_secret_name(name):
            out[name] = redact_secret_value(value, found)
        else:
            out[name] = redact_text(value, found)
    return out


def scrub(obj: Any, secrets: set[str]) -> Any:
    """Return ``obj`` (JSON-like) with every occurrence of a known secret replaced.

    Only secrets of at least :data:`MIN_SCRUB_LEN` characters are searched, longest
    first, so that a short value cannot garble unrelated text.
    """
    needles = sorted((s for s in secrets if len(s) >= MIN_SCRUB_LEN and s != REDACTED),
                     key=len, reverse=True)
    if not needles:
        return obj
    return _scrub(obj, needles)


def _scrub(obj: Any, needles: list[str]) -> Any:
    if isinstance(obj, str):
        for needle in needles:
            if needle in obj:
                obj = obj.replace(needle, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {_scrub(k, needles): _scrub(v, needles) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, needles) for v in obj]
    return obj
