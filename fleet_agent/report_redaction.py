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


def _strings(value: Any, found: set[str], rule: Any = redact_text) -> Any:
    """``value`` with ``rule`` applied to every string in it (keys included)."""
    return map_json(value, lambda text: rule(text, found))


def _lines(value: Any, found: set[str]) -> Any:
    if isinstance(value, list):
        return [redact_line(v, found) if isinstance(v, str) else _strings(v, found)
                for v in value]
    return _strings(value, found, redact_line)


def _argv(value: Any, found: set[str]) -> Any:
    if isinstance(value, list) and all(isinstance(w, str) for w in value):
        return redact_argv(value, found)
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
        return redact_env({str(k): v for k, v in value.items()}, found)
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
    return _fields(value, found, {"text": text})


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
