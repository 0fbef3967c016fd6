"""Secret redaction: pure functions that keep credentials on the node.

Rules (``docs/wire-contract.md`` "Redaction replaces the value, never drops the
flag"):

* a flag, env var or JSON key is secret when one of its word parts (split on ``-``, ``_``,
  ``.`` and camelCase) is a secret word or abbreviation (:data:`SECRET_WORDS`: ``TOKEN(S)``,
  ``KEY``, ``PASS``, ``PWD``, ``PAT``, ``AUTH``, ``HEADERS``, ``DSN``, ``COOKIE``,
  ``SESSION``...) or contains a secret stem (:data:`SECRET_STEMS`: ``SSHPASS``,
  ``PGPASSWORD``, ``GITHUBTOKEN``, ``OAUTH``); word parts, not raw substrings, so
  ``TOKENIZERS_PARALLELISM``, ``PYTHONPATH``, ``KEYBOARD``, ``GIT_AUTHOR_NAME``,
  ``CUDA_VISIBLE_DEVICES`` and ``VLLM_ATTENTION_BACKEND`` keep their values;
* a secret's value is replaced by :data:`~fleet_agent.schema.REDACTED`, numbers included
  (``NUMERIC_API_KEY=8675309``), except a plain number under a name that also carries a
  quantity word (:data:`QUANTITY_WORDS`: ``--max-num-batched-tokens 8192``,
  ``num_speculative_tokens``, ``NCCL_KEY_TIMEOUT=30``);
* credentials inside URLs (``scheme://user:pass@host``), secret query parameters
  (``?token=...``), ``Authorization: …``/``Bearer …``/``Basic …`` anywhere, secret flags
  inside a value (``EXTRA_VLLM_ARGS="--api-key sk-…"``) and ``name=value`` pairs with a
  secret name inside a value (``x-api-key=…,other=1``) are redacted wherever they appear;
* JSON-valued flags (``--speculative-config '{...}'``) are parsed and their secret
  keys redacted.

Every function takes an optional ``found`` set that collects the removed secret
values, so the collector can scrub them from any other field as a last line of
defence (:func:`scrub`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fleet_agent.schema import REDACTED

#: Word parts that make a name secret: words and their usual abbreviations.
SECRET_WORDS = frozenset({
    "TOKEN", "TOKENS", "KEY", "KEYS", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS",
    "PASSWD", "PASS", "PWD", "PAT", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "CREDS",
    "AUTH", "AUTHORIZATION", "BEARER", "HEADER", "HEADERS", "DSN", "COOKIE", "COOKIES",
    "SESSION", "SESSIONS", "JWT", "PRIVATE", "SIGNATURE", "SIG",
})

#: Stems that make a word secret wherever they occur in it (run-together names such as
#: ``SSHPASS``, ``PGPASSWORD``, ``MYSQLPWD``, ``GITHUBTOKEN``, ``OAUTH``, ``XAPIKEY``).
SECRET_STEMS = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY",
                "CREDENTIAL", "COOKIE", "AUTH", "BEARER", "SSHPASS", "PGPASS", "MYSQLPWD")

#: Words that contain a stem but name something else (tokenizers, authors, bypasses).
_NOT_SECRET_WORDS = frozenset({
    "TOKENIZER", "TOKENIZERS", "DETOKENIZE", "DETOKENIZER", "TOKENIZE", "TOKENIZATION",
    "AUTHOR", "AUTHORS",
})

#: A Python exception class (``KeyError``, ``huggingface_hub.errors.GatedRepoError``): in an
#: error line ``KeyError: 'invalid tool call parser: openai'`` is the message, not a pair
#: named "key". Only the CamelCase class shape; env names (``KEY_ERROR``) are unaffected, and
#: token-shaped values in the message are still scrubbed.
_EXCEPTION_CLASS = re.compile(r"(?:[a-z_][\w]*\.)*[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning)")

#: Names the shell itself sets to a directory (``PWD``, ``OLDPWD``), not a password.
_SHELL_DIRECTORIES = frozenset({"PWD", "OLDPWD"})

#: Word parts that make a secret-looking name a count or a duration; only then is a plain
#: number kept (``--max-num-batched-tokens 8192``, ``--long-prefill-token-threshold 512``).
QUANTITY_WORDS = frozenset({
    "MAX", "MIN", "NUM", "COUNT", "SIZE", "LEN", "LENGTH", "LIMIT", "BUDGET", "TIMEOUT",
    "THRESHOLD", "TOTAL", "PER", "TTL", "INTERVAL", "RETRIES", "BATCHED", "LOOKAHEAD",
})

#: Flags whose value is a list (``--api-key k1 k2``): every following non-flag word is secret.
_LIST_SECRET_FLAGS = frozenset({"--api-key", "--api_key"})

#: Shortest secret value :func:`scrub` will search for; shorter strings would match by chance.
MIN_SCRUB_LEN = 6

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s?#]*)@")
#: ``user:password@`` whose password holds a raw ``/``, ``#`` or ``?`` (not valid in a URL,
#: yet DB clients such as libpq and SQLAlchemy users write ``postgres://u:pa/ss#1@db/x``):
#: the password runs to the last ``@`` before whitespace. A ``host:port/…@…`` (digits, then
#: ``/``) is a port, not a password.
_URL_LOOSE_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/?#@:]{0,256}):"
    r"(?P<password>[^\s@]{0,1024})@(?=[^\s@]*(?:\s|$))")
_PORT_PATH = re.compile(r"\d{1,5}(?:[/?#]|$)")
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[A-Za-z0-9_.\-]+)=(?P<value>[^&#\s;\"']*)")
_ENV_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<value>.*)$", re.DOTALL)
_JSON_PAIR = re.compile(r'"(?P<name>[^"\\]{1,128})"\s*:\s*"(?P<value>(?:[^"\\]|\\.)*)"')
#: ``Authorization: x``, ``Bearer x``, ``Basic x``, ``Token x`` inside any text.
_AUTH_SCHEME = re.compile(
    r"(?P<head>\b(?:Bearer|Basic|Token|Digest|Negotiate)[ \t]+)(?P<value>[^\s,;\"']+)",
    re.IGNORECASE)
#: Credentials recognisable by shape wherever they appear, by the prefix and length their
#: issuers document (tests/agent/test_secret_shapes.py holds a corpus with each source):
#: Hugging Face ``hf_…``; OpenAI-style ``sk-…`` (with a digit, so ``sk-learn-…`` words stay);
#: GitHub ``ghp_/gho_/ghu_/ghs_/ghr_…`` and ``github_pat_…``; AWS key ids ``AKIA…``/``ASIA…``;
#: Slack ``xox[abeprs]-…``/``xapp-…``; Stripe ``sk_live_``/``rk_live_`` (and ``_test_``);
#: GitLab ``glpat-``, ``gldt-``, ``glrt-``, ``glptt-``, ``gloas-``, ``glcbt-``, ``glft-``; npm
#: ``npm_`` + 36; SendGrid ``SG.`` + 22 + ``.`` + 43; Google API keys ``AIza`` + 35; JWTs
#: (RFC 7519: three base64url parts, the first two JSON objects, so ``eyJ``); the base64 body
#: of an OpenSSH private key (``openssh-key-v1`` encodes as ``b3BlbnNzaC1rZXktdjE``).
_TOKEN_SHAPE = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|sk-(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|xox[abeprs]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,}"
    r"|[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|gl(?:pat|dt|rt|ptt|oas|cbt|ft)-[A-Za-z0-9_\-]{20,}"
    r"|npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"
    r"|SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{0,1024}"
    r"|b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/=]*)")
#: Webhook URLs whose path is the credential: Slack incoming webhooks and workflow triggers
#: (https://api.slack.com/messaging/webhooks: ``hooks.slack.com/services/T…/B…/…``) and
#: Discord webhooks (``discord.com/api/webhooks/<id>/<token>``). The path is replaced.
_WEBHOOK_URL = re.compile(
    r"(?P<keep>(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:canary\.|ptb\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/))"
    r"(?P<secret>[A-Za-z0-9_/\-]{8,})", re.IGNORECASE)
#: A PEM private key (``-----BEGIN RSA PRIVATE KEY-----``, ``OPENSSH``, ``EC``, PKCS#8 …;
#: RFC 7468): the body up to the END line, or to the end of the text when cut off.
_PEM_KEY = re.compile(
    r"(?P<begin>-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----)(?P<body>.*?)"
    r"(?P<end>-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|\Z)", re.DOTALL)
#: ``'name': value`` / ``"name": value`` pairs of a JSON document or a Python repr (vLLM logs
#: its non-default args as ``{'api_key': ['sk-…']}``) anywhere in a text; a value is a quoted
#: string, a flat list or a bare word. Bounded repeats keep a hostile value linear enough.
_QUOTED_PAIR = re.compile(
    r"(?P<q>['\"])(?P<name>[^'\"\\\n]{1,128})(?P=q)[ \t]*:[ \t]*"
    r"(?P<value>\[[^\[\]]{0,1024}\]|'(?:[^'\\]|\\.){0,1024}'|\"(?:[^\"\\]|\\.){0,1024}\""
    r"|[^\s,}\]]+)")
_QUOTED_ITEM = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
#: Bare values of a secret name that hold no secret.
_NO_SECRET_WORDS = frozenset({"None", "null", "true", "false", "True", "False"})
#: ``--flag value`` / ``--flag=value`` inside a value (``EXTRA_VLLM_ARGS``).
_INLINE_FLAG = re.compile(
    r"(?<![\w-])(?P<name>--?[A-Za-z][A-Za-z0-9_.\-]*)(?P<sep>=|[ \t]+)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|-?[^\s,;&\"'-][^\s,;&\"']*)")  # "-0000:" too, not "--x"
#: ``name=value`` / ``name: value`` inside a value (``x-api-key=abc,other=1``, headers).
#: Found overlapping (a lookahead), so each start scans a bounded value: quoted values up to
#: 1024 characters, bare ones up to 256 and then extended by :data:`_BARE_TAIL` (only for a
#: secret name), keeping ``x=x=x=…`` linear.
_INLINE_PAIR = re.compile(
    r"(?<![\w.-])(?=(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,127})(?P<sep>=|:[ \t]*)"
    r"(?P<value>\"[^\"]{0,1024}\"|'[^']{0,1024}'|[^\s,;&\"']{1,256}))")
_BARE_TAIL = re.compile(r"[^\s,;&\"']*")


def name_words(name: str) -> list[str]:
    """Split a flag/env/JSON key name into upper-case words.

    ``"--hf-token"`` -> ``["HF", "TOKEN"]``; ``"apiKey"`` -> ``["API", "KEY"]``.
    """
    stripped = name.lstrip("-")
    stripped = _CAMEL.sub("_", stripped)
    return [w for w in re.split(r"[-_.\s]+", stripped.upper()) if w]


def _secret_word(word: str) -> bool:
    if word in SECRET_WORDS:
        return True
    if word in _NOT_SECRET_WORDS:
        return False
    return any(stem in word for stem in SECRET_STEMS)


def is_secret_name(name: str) -> bool:
    """True when a word part of ``name`` is secret (:data:`SECRET_WORDS`, :data:`SECRET_STEMS`).

    ``HF_TOKENS``, ``PGPASSWORD``, ``GH_PAT``, ``OTEL_EXPORTER_OTLP_HEADERS`` are secret;
    ``TOKENIZERS_PARALLELISM``, ``PYTHONPATH``, ``CUDA_VISIBLE_DEVICES`` and ``PWD`` (the
    shell's directory) are not.
    """
    if name.strip().upper() in _SHELL_DIRECTORIES or _EXCEPTION_CLASS.fullmatch(name.strip()):
        return False
    return any(_secret_word(word) for word in name_words(name))


def is_quantity_name(name: str | None) -> bool:
    """True when ``name`` carries a :data:`QUANTITY_WORDS` part (its numbers are counts)."""
    return bool(name) and any(w in QUANTITY_WORDS for w in name_words(name or ""))


def is_plain_number(value: str) -> bool:
    """True for ``8192``, ``-1``, ``0.5``, ``1e3``."""
    return bool(_NUMBER.fullmatch(value.strip()))


def _remember(found: set[str] | None, value: str) -> None:
    if found is not None and value:
        found.add(value)


def redact_secret_value(value: str, found: set[str] | None = None,
                        name: str | None = None) -> str:
    """``REDACTED`` for the value of secret ``name``; a plain number is kept only when
    ``name`` is a quantity (:func:`is_quantity_name`), never for ``NUMERIC_API_KEY``."""
    if value == "" or value == REDACTED or (is_plain_number(value) and is_quantity_name(name)):
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
        value = redact_secret_value(match.group("value"), found, match.group("name"))
        return f"{match.group('sep')}{match.group('name')}={value}"

    def loose(match: re.Match[str]) -> str:
        password = match.group("password")
        if _PORT_PATH.match(password) or password == REDACTED:
            return match.group(0)
        _remember(found, password)
        _remember(found, f"{match.group('user')}:{password}")
        return f"{match.group('scheme')}{REDACTED}@"

    if "://" in text:
        text = _URL_LOOSE_USERINFO.sub(loose, text)
        text = _URL_USERINFO.sub(userinfo, text)
    if "=" in text:
        text = _QUERY_PARAM.sub(query, text)
    return text


def _redact_json_obj(obj: Any, found: set[str] | None) -> Any:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, val in obj.items():
            if is_secret_name(str(key)) and not isinstance(val, bool) and val is not None \
                    and val != "" and not (isinstance(val, int | float)
                                           and is_quantity_name(str(key))):
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


def redact_json_value(obj: Any, found: set[str] | None = None) -> Any:
    """A decoded JSON document (``config.json``, a label map) with every secret key's value
    replaced and every string through :func:`redact_text`. Nested past Python's recursion
    limit: :data:`REDACTED` whole (never raises)."""
    try:
        return _redact_json_obj(obj, found)
    except RecursionError:
        return REDACTED


def _remember_nested(val: Any, found: set[str] | None) -> None:
    if isinstance(val, str):
        _remember(found, val)
    elif isinstance(val, int | float) and not isinstance(val, bool):
        _remember(found, str(val))
    elif isinstance(val, dict):
        for v in val.values():
            _remember_nested(v, found)
    elif isinstance(val, list):
        for v in val:
            _remember_nested(v, found)


#: Deepest JSON nesting redacted key by key; a deeper value (no vLLM config nests past a
#: handful of levels) is replaced whole by :data:`REDACTED`, so that a hostile
#: ``[[[...]]]`` argv word costs one linear scan and never a RecursionError.
MAX_JSON_DEPTH = 32

#: One token of :func:`json_text_depth`'s scan: an escape pair, a quote or a bracket.
_JSON_TOKEN = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


def json_text_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting of ``text`` outside JSON strings (one linear scan).

    ``'{"a": [1, {"b": "[["}]}'`` -> 3. Unbalanced text is measured as far as it goes.
    """
    depth = deepest = 0
    in_string = False
    for match in _JSON_TOKEN.finditer(text):
        mark = match.group(0)
        if mark == '"':
            in_string = not in_string
        elif in_string or mark[0] == "\\":
            continue
        elif mark in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def redact_json_text(text: str, found: set[str] | None = None) -> str:
    """Redact secret keys of a JSON object/array given as text.

    Unchanged input comes back byte-identical; a changed one is re-serialised
    compactly. Text that does not parse (truncated ``<...>`` values) is redacted
    with a ``"key": "value"`` pattern instead. Text nested deeper than
    :data:`MAX_JSON_DEPTH` comes back as :data:`REDACTED` whole (never raises).
    """
    if json_text_depth(text) > MAX_JSON_DEPTH:
        _remember(found, text)
        return REDACTED
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return _JSON_PAIR.sub(lambda m: _json_pair(m, found), text)
    redacted = _redact_json_obj(obj, found)
    if redacted == obj:
        return text
    return json.dumps(redacted, separators=(", ", ": "), ensure_ascii=False)


def _json_pair(match: re.Match[str], found: set[str] | None) -> str:
    if not is_secret_name(match.group("name")):
        return match.group(0)
    value = redact_secret_value(match.group("value"), found, match.group("name"))
    return f'"{match.group("name")}": "{value}"'


def redact_shapes(text: str, found: set[str] | None = None) -> str:
    """Only the credentials recognisable by shape: tokens (:data:`_TOKEN_SHAPE`), webhook
    URL paths (:data:`_WEBHOOK_URL`) and PEM private keys (:data:`_PEM_KEY`), whatever name
    they are under. Also alone for large machine text (Prometheus exposition), where name
    rules would misread labels."""
    def shape(match: re.Match[str]) -> str:
        _remember(found, match.group(0))
        return REDACTED

    def webhook(match: re.Match[str]) -> str:
        _remember(found, match.group("secret"))
        return match.group("keep") + REDACTED

    def pem(match: re.Match[str]) -> str:
        _remember(found, match.group("body").strip())
        return f"{match.group('begin')}{REDACTED}{match.group('end')}"

    if "PRIVATE KEY-----" in text:
        text = _PEM_KEY.sub(pem, text)
    if "webhooks" in text or "hooks.slack.com" in text.lower():
        text = _WEBHOOK_URL.sub(webhook, text)
    return _TOKEN_SHAPE.sub(shape, text)


def redact_inline(text: str, found: set[str] | None = None) -> str:
    """Redact credentials embedded in free text: ``Authorization: …``, ``Bearer …``,
    ``--api-key sk-…`` / ``--hf-token=…`` and ``secret_name=value`` pairs.

    ``EXTRA_VLLM_ARGS="--api-key sk-1 --port 8000"`` -> ``--api-key REDACTED --port 8000``.
    Linear: two regex passes without nested quantifiers.
    """
    def auth(match: re.Match[str]) -> str:
        return match.group("head") + redact_secret_value(match.group("value"), found)

    def pair(match: re.Match[str]) -> str:
        name = match.group("name")
        if not is_secret_name(name):
            return match.group(0)
        raw = match.group("value")
        quote = raw[0] if raw[:1] in ("'", '"') and len(raw) > 1 else ""
        inner = raw[1:-1] if quote else raw
        redacted = redact_secret_value(inner, found, name)
        return f"{name}{match.group('sep')}{quote}{redacted}{quote}"

    text = redact_shapes(text, found)
    if any(c in text for c in "=: \t"):
        text = _AUTH_SCHEME.sub(auth, text)
        text = _QUOTED_PAIR.sub(lambda m: _quoted_pair(m, found), text)
        text = _INLINE_FLAG.sub(pair, text)
        text = _secret_pairs(text, found)
    return text


def _secret_pairs(text: str, found: set[str] | None) -> str:
    """Redact the value of every ``name=value``/``name: value`` pair with a secret name.

    Pairs are found overlapping (a zero-width match at each word start), so a non-secret
    pair cannot swallow a secret one: in ``ValueError: api_key: v`` the first pair's value
    is ``api_key:``, yet ``api_key: v`` is still seen. Replaced right to left, skipping a
    pair whose value overlaps one already replaced."""
    spans: list[tuple[int, int, str]] = []
    for match in _INLINE_PAIR.finditer(text):
        name = match.group("name")
        if not is_secret_name(name):
            continue
        raw, end = match.group("value"), match.end("value")
        quote = raw[0] if raw[:1] in ("'", '"') and len(raw) > 1 else ""
        if not quote:
            end = _BARE_TAIL.match(text, end).end()
            raw = text[match.start("value"):end]
        inner = raw[1:-1] if quote else raw
        if inner == REDACTED:
            continue
        spans.append((match.start("value"), end,
                      f"{quote}{redact_secret_value(inner, found, name)}{quote}"))
    limit = len(text)
    for start, end, value in reversed(spans):
        if end <= limit:
            text = text[:start] + value + text[end:]
            limit = start
    return text


def _quoted_pair(match: re.Match[str], found: set[str] | None) -> str:
    name, value = match.group("name"), match.group("value")
    if not is_secret_name(name) or value in _NO_SECRET_WORDS:
        return match.group(0)
    head = match.group(0)[:match.start("value") - match.start()]
    if value.startswith("["):
        items = [item[1:-1] for item in _QUOTED_ITEM.findall(value)]
        for item in items:
            _remember(found, item)
        quote = "'" if "'" in value else '"'
        redacted = "[" + ", ".join(f"{quote}{REDACTED}{quote}" for _ in items) + "]"
        return head + (redacted if items else value)
    if value[:1] in ("'", '"') and len(value) > 1:
        inner = value[1:-1]
        return head + value[0] + redact_secret_value(inner, found, name) + value[0]
    return head + redact_secret_value(value, found, name)


#: ``password hunter2`` / ``passphrase is x`` in a log line's prose (``password: x`` and
#: ``password=x`` are pairs, :func:`redact_inline`): the word after it, unless that word is
#: prose itself (:data:`_PASSWORD_PROSE`: ``password authentication failed for user``).
_FREE_PASSWORD = re.compile(
    r"(?i)(?<![A-Za-z0-9_])(?P<head>(?:password|passwd|passphrase|pwd)(?:[ \t]+(?:is|was))?"
    r"[ \t]+(?P<q>['\"]?))(?P<value>[^\s,;'\"]{1,256})")
_PASSWORD_PROSE = frozenset({
    "authentication", "auth", "failed", "failure", "required", "for", "is", "was", "not",
    "must", "too", "incorrect", "invalid", "expired", "mismatch", "missing", "field",
    "prompt", "provided", "empty", "reset", "change", "changed", "set", "file", "policy",
    "length", "hash", "hashing", "login", "of", "the", "a", "an", "and", "or", "to", "with",
    "from", "in", "on", "none", "null", "protected", "based", "less", "manager", "store",
    "env", "variable", "rejected", "accepted", "denied", "wrong", "does", "did", "has",
    "have", "should", "cannot", "can't", "will", "needed", "needs", "supplied", "given",
    "authentication.", "(redacted)", REDACTED.lower(),
})


def _free_passwords(line: str, found: set[str] | None) -> str:
    def value(match: re.Match[str]) -> str:
        word = match.group("value")
        if word.lower() in _PASSWORD_PROSE or word.startswith(REDACTED):
            return match.group(0)
        _remember(found, word)
        return match.group("head") + REDACTED
    if "pass" in line.lower() or "pwd" in line.lower():
        line = _FREE_PASSWORD.sub(value, line)
    return line


def redact_line(line: str, found: set[str] | None = None) -> str:
    """A log line (journal, container log) through the same rules as argv and env values:
    JSON/Python-repr pairs with a secret name, ``NAME=value``/``name: value``, URLs with
    credentials, ``Authorization``/``Bearer``/``Basic`` values, ``--api-key x`` flags,
    ``password <word>`` prose (:data:`_FREE_PASSWORD`) and shapes (:func:`redact_shapes`).
    Never raises: a line that cannot be redacted comes
    back as :data:`REDACTED` whole."""
    try:
        line = _free_passwords(redact_text(line, found), found)
        return " ".join(redact_argv(line.split(" "), found))
    except Exception:  # noqa: BLE001 - one odd line must not hide the unit's other lines
        return REDACTED


def redact_text(text: str, found: set[str] | None = None) -> str:
    """Redact a free-form value: JSON documents, ``NAME=value`` assignments, URLs, and
    credentials embedded in text (:func:`redact_inline`)."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        text = redact_json_text(text, found)
    match = _ENV_ASSIGN.match(text)
    if match and is_secret_name(match.group("name")):
        value = redact_secret_value(match.group("value"), found, match.group("name"))
        return f"{match.group('name')}={value}"
    return redact_inline(redact_urls(text, found), found)


def redact_argv(argv: list[str], found: set[str] | None = None) -> list[str]:
    """Redact a command line, keeping every flag and the number of words.

    Handles ``--flag=value``, ``--flag value`` (``--api-key k1 k2``: every value),
    ``-e HF_TOKEN=x`` style assignments, JSON values and URLs in any word.
    """
    out: list[str] = []
    pending = 0  # how many following words are the value of a secret flag
    list_flag = False
    secret_flag = ""
    first = False  # the word right after a secret flag: its value unless it is a --flag
    for word in argv:
        looks_like_option = word.startswith("--") if first else (
            word.startswith("-") and len(word) > 1 and not is_plain_number(word))
        if pending and not looks_like_option:
            # "-0000:" or "-x9" right after --api-key is still the key's value: never let a
            # leading dash carry a secret past redaction.
            out.append(redact_secret_value(word, found, secret_flag))
            pending = pending - 1 if not list_flag else pending
            first = False
            continue
        pending, list_flag, first = 0, False, False
        if word.startswith("-") and len(word) > 1 and not is_plain_number(word):
            # a dash-led word may still be a secret's shape ("-----BEGIN … PRIVATE KEY-----")
            word = redact_shapes(word, found)
            flag, eq, value = word.partition("=")
            if is_secret_name(flag):
                if eq:
                    out.append(f"{flag}={redact_secret_value(value, found, flag)}")
                else:
                    out.append(word)
                    pending, list_flag = 1, flag in _LIST_SECRET_FLAGS
                    secret_flag, first = flag, True
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
            out[name] = redact_secret_value(value, found, name)
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


def _scrub_text(text: str, needles: list[str]) -> str:
    for needle in needles:
        if needle in text:
            text = text.replace(needle, REDACTED)
    return text


def _scrub(obj: Any, needles: list[str]) -> Any:
    return map_json(obj, lambda text: _scrub_text(text, needles))


def map_json(obj: Any, text: Callable[[str], Any], *, other: Callable[[Any], Any] = lambda v: v,
             max_depth: int | None = None, too_deep: Any = None) -> Any:
    """A copy of JSON-like ``obj`` with ``text`` applied to every string (object keys too)
    and ``other`` to every other leaf; containers nested deeper than ``max_depth`` become
    ``too_deep``. Iterative: a hostile document may nest as deep as its parser allows
    (Python's recursion limit is about 1000 frames)."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(obj, root, 0, 0)]  # source, parent, slot, depth
    while stack:
        source, parent, slot, depth = stack.pop()
        if isinstance(source, dict | list) and max_depth is not None and depth >= max_depth:
            copy: Any = too_deep
        elif isinstance(source, dict):
            copy = {}
            for key, val in source.items():
                new_key = text(key) if isinstance(key, str) else key
                copy[new_key] = None
                stack.append((val, copy, new_key, depth + 1))
        elif isinstance(source, list):
            copy = [None] * len(source)
            stack.extend((val, copy, i, depth + 1) for i, val in enumerate(source))
        else:
            copy = text(source) if isinstance(source, str) else other(source)
        parent[slot] = copy
    return root[0]
