"""A rule too costly to evaluate is refused when it loads, never run (audit/kb/cel_cost.py).

The ``cel`` module cannot be interrupted once an evaluation runs: a bundle rule with five
nested ``.all()`` over 40-item lists took 66 s per server in the worker and timed out a web
worker planning on ``/plan/fleet/``. The load (shipped rules and every installed bundle go
through :func:`audit.kb.engine.load_rules`) refuses it, naming the file, the rule and why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audit.kb import cel_cost
from audit.kb.engine import RuleError, load_rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_engine import a_rule, write_rules  # noqa: E402

L = "flags_meta.unknown"
FIVE_NESTED = (f"{L}.all(a, {L}.all(b, {L}.all(c, {L}.all(d, {L}.all(e, "
               "a + b + c + d + e != '')))))")


@pytest.mark.parametrize("field", ["condition", "applies"])
def test_five_nested_comprehensions_are_refused_at_load(tmp_path: Path, field: str) -> None:
    path = write_rules(tmp_path, a_rule(**{field: FIVE_NESTED}))
    with pytest.raises(RuleError) as raised:
        load_rules([path])
    message = str(raised.value)
    assert str(path) in message and "test-long-context" in message
    assert "estimated evaluation cost" in message


def test_a_third_nested_comprehension_is_refused_two_are_allowed(tmp_path: Path) -> None:
    two = f"{L}.exists(a, {L}.exists(b, a == b + 'x'))"
    assert load_rules([write_rules(tmp_path, a_rule(condition=two))]).rules
    three = f"{L}.exists(a, {L}.exists(b, {L}.exists(c, a == b + c)))"
    with pytest.raises(RuleError, match="unnest"):
        load_rules([write_rules(tmp_path, a_rule(condition=three), name="three.yaml")])


def test_macro_names_inside_string_literals_cost_nothing() -> None:
    text = "'.all(.all(.all(.all(' + \".exists(.map(.filter(\""
    assert cel_cost.estimate(text) < 100


def test_every_shipped_rule_is_within_the_bound() -> None:
    assert load_rules().rules  # loading applies the bound to every expression
