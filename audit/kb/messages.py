"""How evidence reads inside a rule message (:class:`MessageFormatter`, used by
audit.kb.engine for every finding's message)."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from typing import Any, NamedTuple

from audit.kb import labels


class _Named(NamedTuple):
    """A placeholder's value with its evidence name (the unit comes from the name)."""

    name: str
    value: Any


class MessageFormatter(string.Formatter):
    """Renders evidence into messages: null shows as "n/a", booleans as yes/no, fractions
    such as KV cache usage as percentages and floats without exponent notation (audit/kb/
    labels.py), lists and dicts as JSON, an empty text as nothing, a bad format spec falls back
    to str()."""

    def get_field(self, field_name: str, args: Sequence[Any], kwargs: Any) -> Any:
        obj, used = super().get_field(field_name, args, kwargs)
        return _Named(re.split(r"[.\[]", field_name, maxsplit=1)[0], obj), used

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion and isinstance(value, _Named):
            return super().convert_field(value.value, conversion)
        return value

    def format_field(self, value: Any, format_spec: str) -> str:
        name, value = value if isinstance(value, _Named) else ("", value)
        if value is None:
            return "n/a"
        if isinstance(value, str) and not value.strip():
            return ""  # optional text evidence (a probe summary before any probe ran)
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, dict | list):  # as an operator would type them
            return json.dumps(value, sort_keys=True)
        if not format_spec:
            return labels.message_value(name, value)
        try:
            return format(value, format_spec)
        except (TypeError, ValueError):
            return str(value)
