"""Compare our argv reading (:func:`audit.kb.flags.parse_argv`) with vLLM's own parser.

Used by the fast test (recorded answers, tests/data/real_vllm/<release>/parser_oracle.json)
and by the real-vLLM suite (answers from the installed release's parser).

Agreement, for one argv: both refuse it, or both accept it and every setting either side says
the line sets has the same value. Our "refuses" is what makes vLLM exit in argparse: an
option it does not have (``unknown``, ``not_accepted``), an ambiguous abbreviation, an invalid
choice or a value its type rejects (``invalid``), a missing value. Value conventions mapped:
the ``vllm serve`` positional (``model_tag``) is our ``model``; our ``"auto"`` for
``--max-model-len`` is vLLM's ``-1``; config objects compare on the keys the line set.
"""

from __future__ import annotations

from typing import Any

from audit.kb.flags import not_accepted, parse_argv
from audit.kb.vllm_tables import table


def ours_refuses(argv: list[str], release: str) -> tuple[bool, Any]:
    parsed = parse_argv(["vllm", *argv], release)
    refused = bool(parsed.unknown or not_accepted(parsed, release) or parsed.invalid
                   or any("missing value" in e for e in parsed.errors))
    return refused, parsed


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, dict) and "__class__" in theirs:
        theirs = {k: v for k, v in theirs.items() if k != "__class__"}
        if not isinstance(ours, dict):
            return False
        return all(_same(ours.get(k), v) for k, v in theirs.items()) and \
            all(k in theirs for k in ours)
    if ours == "auto" and theirs == -1:
        return True
    if isinstance(theirs, float) and isinstance(ours, (int, float)):
        return abs(ours - theirs) < 1e-9
    return ours == theirs


def disagreement(argv: list[str], answer: dict[str, Any], release: str) -> str | None:
    """None when we agree with vLLM's ``answer`` on ``argv``; else what differs."""
    refused, parsed = ours_refuses(argv, release)
    if not answer["ok"]:
        return None if refused else f"vLLM refuses ({answer['error'][:160]}); we accept " \
            f"{parsed.values}"
    if refused:
        return (f"vLLM accepts {answer['values']}; we refuse: unknown {parsed.unknown}, "
                f"invalid {parsed.invalid}, errors {parsed.errors}")
    theirs = {("model" if k == "model_tag" else k): v for k, v in answer["values"].items()}
    ours = dict(parsed.values)
    ours.pop("model", None)
    theirs.pop("model", None)
    options = {o["dest"]: o for o in table(release)["options"].values()}
    problems = []
    for dest, value in theirs.items():
        if not _same(ours.get(dest), value):
            problems.append(f"{dest}: vLLM {value!r}, ours {ours.get(dest)!r}")
    for dest, value in ours.items():
        default = options.get(dest, {}).get("default")
        if dest not in theirs and not _same(value, default):
            problems.append(f"{dest}: ours {value!r}, vLLM leaves the default")
    return "; ".join(problems) or None
