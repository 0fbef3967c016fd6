"""The dashboard's second redaction pass over a whole decoded report (wire JSON).

The agent redacts before sending (:mod:`fleet_agent.redact`); an older or modified agent may
not, so ingest runs this over EVERY free-text field of the report, each with the rule that
fits its shape:

* ``servers[].argv`` and ``failed_starts[].argv``: :func:`~fleet_agent.redact.redact_argv`
  (flags kept, secret values replaced);
* ``servers[].env``: :func:`~fleet_agent.redact.redact_env`;
* log-like lines (``failed_starts[].lines``, ``servers[].probes[].evidence``, every
  ``errors`` list): :func:`~fleet_agent.redact.redact_line`;
* JSON documents (``servers[].model_files.config`` and its siblings) and ``host.labels``: a
  secret key (``hf_token``, ``password``) loses its value, other strings go through
  :func:`~fleet_agent.redact.redact_text`;
* ``servers[].metrics.text`` (Prometheus exposition, up to 2 MiB): URL credentials and
  credential shapes in each distinct label value (the rest of the text is vLLM's own);
* every other string anywhere, fields this version does not know included:
  :func:`~fleet_agent.redact.redact_text`.

Every secret value removed is then scrubbed from the whole document
(:func:`~fleet_agent.redact.scrub`). Never raises: a value of the wrong type is left for the
schema to refuse, and hostile nesting is walked iteratively (:func:`map_json`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleet_agent.redact import (
    REDACTED,
    is_secret_name,
    map_json,
    redact_argv,
    redact_env,
    redact_json_value,
    redact_line,
    redact_shapes,
    redact_text,
    redact_urls,
    scrub,
)

#: JSON documents of ``servers[].model_files`` read from the model's directory.
MODEL_FILE_DOCUMENTS = ("config", "generation_config", "quantization_config",
                        "hf_quant_config")


#: What the rules here are known to leave as they are, finding nothing (each rule is a pure
#: function of its input): strings under :func:`~fleet_agent.redact.redact_text` (metric and
#: label names, model names, bucket bounds, versions), and ``("argv", words)`` /
#: ``("env", items)`` of command lines and environments already redacted by the agent. A
#: fleet sends the same ones in every report. Never holds a secret (a value with one in it is
#: not clean). Bounded: an entry of at most :data:`_CLEAN_ENTRY_CHARS` characters, and
#: emptied once :data:`_CLEAN_BUDGET_CHARS` are held, however hostile the reports.
_CLEAN: set[Any] = set()
_CLEAN_ENTRY_CHARS = 8192
_CLEAN_BUDGET_CHARS = 4 * 1024 * 1024
_clean_chars = 0

_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)


def _remember_clean(key: Any, chars: int) -> None:
    global _clean_chars
    if chars > _CLEAN_ENTRY_CHARS:
        return
    if _clean_chars + chars > _CLEAN_BUDGET_CHARS:
        _CLEAN.clear()
        _clean_chars = 0
    _CLEAN.add(key)
    _clean_chars += chars


def _clean_text(text: str) -> bool:
    """True when ``redact_text(text)`` is ``text`` and removes no secret."""
    if text in _CLEAN:
        return True
    probe: set[str] = set()
    if redact_text(text, probe) != text or probe:
        return False
    _remember_clean(text, len(text))
    return True


def _all_clean(value: Any) -> bool:
    """True when :func:`_clean_text` holds for every string of JSON-like ``value``, keys
    included: then :func:`_strings` would return an equal copy. Each distinct string is
    judged once, read off ``json.dumps``' text: without a backslash in it, every other piece
    between quotes is one string. A string with an escape, or a value ``json`` cannot write,
    answers False: the caller then redacts string by string."""
    if isinstance(value, str):
        return _clean_text(value)
    if value is None or isinstance(value, bool | int | float):
        return True
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return False
    if "\\" in text:  # an escape: the strings are not the text's pieces
        return False
    unknown = set(text.split('"')[1::2]).difference(_CLEAN)
    return all(_clean_text(token) for token in unknown)


def _unless_clean(rule: Any, key: Any, chars: int, value: Any, found: set[str]) -> Any:
    """``rule(value, found)``, or ``value`` itself when ``key`` (``value`` made hashable,
    ``chars`` long) is known clean; a call that changes nothing and finds nothing makes it
    known."""
    if key in _CLEAN:
        return value
    probe: set[str] = set()
    out = rule(value, probe)
    if out == value and not probe:
        _remember_clean(key, chars)
        return value
    found |= probe
    return out


def _strings(value: Any, found: set[str], rule: Any = redact_text) -> Any:
    """``value`` with ``rule`` applied to every string in it (keys included); ``value``
    itself when ``rule`` is ``redact_text`` and would change nothing (:func:`_all_clean`)."""
    if rule is redact_text:
        if _all_clean(value):
            return value
        return map_json(value, lambda text: text if text in _CLEAN else redact_text(text, found))
    return map_json(value, lambda text: rule(text, found))


def _lines(value: Any, found: set[str]) -> Any:
    if isinstance(value, list):
        return [redact_line(v, found) if isinstance(v, str) else _strings(v, found)
                for v in value]
    return _strings(value, found, redact_line)


def _argv(value: Any, found: set[str]) -> Any:
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return _unless_clean(redact_argv, ("argv", *value), sum(map(len, value)), value, found)
    return _strings(value, found)


def _labels(value: Any, found: set[str]) -> Any:
    if not isinstance(value, dict):
        return _strings(value, found)
    return {key: (REDACTED if is_secret_name(str(key)) and val not in ("", None)
                  else _strings(val, found)) for key, val in value.items()}


def _fields(obj: Any, found: set[str], special: dict[str, Any]) -> Any:
    """A copy of dict ``obj`` where each key of ``special`` goes through its rule and every
    other value through :func:`_strings`."""
    if not isinstance(obj, dict):
        return _strings(obj, found)
    return {key: (special[key](val, found) if key in special else _strings(val, found))
            for key, val in obj.items()}


def _each(rule: Any) -> Any:
    def apply(value: Any, found: set[str]) -> Any:
        if not isinstance(value, list):
            return _strings(value, found)
        return [rule(item, found) for item in value]
    return apply


def _env(value: Any, found: set[str]) -> Any:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        env = {str(k): v for k, v in value.items()}
        return _unless_clean(redact_env, ("env", *env.items()),
                             sum(len(k) + len(v) for k, v in env.items()), env, found)
    return _strings(value, found)


def _base_url(value: Any, found: set[str]) -> Any:
    return redact_urls(value, found) if isinstance(value, str) else _strings(value, found)


#: A label value of the Prometheus text exposition (``name{label="value"} 1``).
_LABEL_VALUE = re.compile(r'="((?:[^"\\\n]|\\.)*)"')


def _metrics(value: Any, found: set[str]) -> Any:
    def text(val: Any, found: set[str]) -> Any:
        if not isinstance(val, str):
            return val
        # Only label values carry text from outside vLLM (model names, paths); each distinct
        # one is checked once (a 60 KB exposition repeats a few dozen), not the whole text.
        for label in set(_LABEL_VALUE.findall(val)):
            clean = redact_shapes(redact_urls(label, found), found)
            if clean != label:
                val = val.replace(f'="{label}"', f'="{clean}"')
        return val
    def compact(val: Any, found: set[str]) -> Any:
        strings = _compact_strings(val)
        if strings is not None and all(_clean_text(t) for t in strings.difference(_CLEAN)):
            return val
        return _strings(val, found)
    return _fields(value, found, {"text": text, "compact": compact})


#: What a compact histogram series holds (``fleet_agent.schema.CompactHistogram``).
_HISTOGRAM_KEYS = frozenset({"labels", "le", "counts", "sum", "count"})


def _compact_strings(value: Any) -> set[str] | None:
    """Every string of a compact ``/metrics`` block (its keys, family names, label names and
    values, bucket bounds) when the block has the contract's shape
    (``fleet_agent.schema.MetricsCompact``), read without writing its numbers out as JSON
    (most of the block, and most of the report); None for any other shape, which is then
    redacted string by string the general way."""
    if not isinstance(value, dict):
        return None
    strings: set[str] = set()
    for key, val in value.items():
        if not isinstance(key, str):
            return None
        strings.add(key)
        if key == "samples" and isinstance(val, dict):
            if not _families_into(val, strings, lambda pair: (
                    isinstance(pair, list) and len(pair) == 2
                    and _labels_into(pair[0], strings) and _plain(pair[1]))):
                return None
        elif key == "histograms" and isinstance(val, dict):
            if not _families_into(val, strings, lambda hist: _histogram_into(hist, strings)):
                return None
        elif isinstance(val, str):
            strings.add(val)
        elif not _plain(val):
            return None
    return strings


def _families_into(families: dict, strings: set[str], entry_into: Any) -> bool:
    """Add a compact block's family names to ``strings`` and read each family's series with
    ``entry_into`` (which adds the entry's strings); False on any other shape."""
    for name, series in families.items():
        if not (isinstance(name, str) and isinstance(series, list)):
            return False
        strings.add(name)
        if not all(map(entry_into, series)):
            return False
    return True


def _histogram_into(hist: Any, strings: set[str]) -> bool:
    """Add one compact histogram series' strings (labels, bounds, keys) to ``strings``;
    False unless it has ``fleet_agent.schema.CompactHistogram``'s shape."""
    if not (isinstance(hist, dict) and hist.keys() <= _HISTOGRAM_KEYS
            and _labels_into(hist.get("labels", {}), strings)
            and isinstance(hist.get("le", []), list)
            and isinstance(hist.get("counts", []), list)
            and set(map(type, hist.get("le", []))) <= {str}
            and set(map(type, hist.get("counts", []))) <= _PLAIN_TYPES
            and _plain(hist.get("sum")) and _plain(hist.get("count"))):
        return False
    strings.update(hist.get("le", []))
    strings.update(hist.keys())
    return True


def _labels_into(labels: Any, strings: set[str]) -> bool:
    """Add a label set's names and values to ``strings``; False unless it maps str to str."""
    if not isinstance(labels, dict):
        return False
    for name, val in labels.items():
        if not (isinstance(name, str) and isinstance(val, str)):
            return False
        strings.add(name)
        strings.add(val)
    return True


#: JSON scalars without text, by exact type (``set(map(type, ...))`` checks a list of them
#: at C speed; a subclass falls to the general way).
_PLAIN_TYPES = frozenset({type(None), bool, int, float})


def _plain(value: Any) -> bool:
    """A JSON scalar without text: null, a boolean or a number."""
    return type(value) in _PLAIN_TYPES


def _model_files(value: Any, found: set[str]) -> Any:
    def document(val: Any, found: set[str]) -> Any:
        return redact_json_value(val, found)
    return _fields(value, found, {name: document for name in MODEL_FILE_DOCUMENTS}
                   | {"errors": _lines})


def _probe(value: Any, found: set[str]) -> Any:
    def evidence(val: Any, found: set[str]) -> Any:
        return redact_line(val, found) if isinstance(val, str) else _strings(val, found)
    return _fields(value, found, {"evidence": evidence})


_SERVER = {"argv": _argv, "env": _env, "base_url": _base_url, "errors": _lines,
           "metrics": _metrics, "model_files": _model_files, "probes": _each(_probe)}
_FAILED_START = {"argv": _argv, "lines": _lines, "errors": _lines}


def _server(value: Any, found: set[str]) -> Any:
    return _fields(value, found, _SERVER)


def _failed_start(value: Any, found: set[str]) -> Any:
    return _fields(value, found, _FAILED_START)


def _host(value: Any, found: set[str]) -> Any:
    return _fields(value, found, {"labels": _labels})


_REPORT = {"servers": _each(_server), "failed_starts": _each(_failed_start), "host": _host,
           "gpu_error": lambda v, found: _lines([v], found)[0],
           "failed_start_errors": _lines}


def redact_report(raw: Any) -> Any:
    """A decoded report with every free-text field redacted (see the module docstring) and
    every secret value found scrubbed from the whole document. Not a dict: returned as is."""
    if not isinstance(raw, dict):
        return raw
    found: set[str] = set()
    return scrub(_fields(raw, found, _REPORT), found)
