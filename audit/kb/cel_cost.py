"""A static cost bound for one CEL expression of a rule, checked when the rule loads.

The ``cel`` module (PyPI common-expression-language) has no evaluation budget and a running
evaluation cannot be interrupted from Python; a signed bundle rule with five nested
``.all()`` over 40-item lists took 66 s per server (and a web worker planning on
``/plan/fleet/`` with it timed out). So a rule whose estimated cost is over
:data:`MAX_COST` is refused at load with :class:`~audit.kb.engine.RuleError`, like a syntax
error, and never reaches an evaluation.

Cost model (an upper-bound estimate, not a measurement): every comprehension macro
(``all``, ``exists``, ``exists_one``, ``map``, ``filter``: the CEL spec's macros,
https://github.com/google/cel-spec/blob/master/doc/langdef.md#macros) iterates a list or map
of at most :data:`ASSUMED_ITEMS` items, so a macro nested ``d`` macros deep costs
``ASSUMED_ITEMS ** d``; every other character of the expression costs 1. The shipped rules
nest at most one macro (cost about 100 each); two nested ones are allowed, a third is not.
"""

from __future__ import annotations

import re

#: Items assumed in any list a macro iterates: the context's lists (flags, GPUs, metric
#: series, models) hold tens of items on a real server.
ASSUMED_ITEMS = 100
#: Highest estimated cost of one expression: twenty doubly nested macros.
MAX_COST = 20 * ASSUMED_ITEMS ** 2

_MACRO = re.compile(r"\.\s*(?:all|exists_one|exists|map|filter)\s*\(")
_STRING = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"",
                     re.DOTALL)


def estimate(expr: str) -> int:
    """The estimated cost of ``expr`` (see the module docstring); string literals count
    as one character each, so a ``".all("`` inside a string is not a macro.

    ``"flags.all(f, f != 'x')"`` -> about 120; five nested ``.all`` -> 10**10.
    """
    text = _STRING.sub('""', expr)
    cost, depth, stack, pos = 0, 0, [], 0
    while pos < len(text):
        macro = _MACRO.match(text, pos)
        if macro:
            depth += 1
            stack.append(True)
            cost += ASSUMED_ITEMS ** depth
            pos = macro.end()
            continue
        char = text[pos]
        if char == "(":
            stack.append(False)
        elif char == ")" and stack:
            depth -= stack.pop()
        cost += 1
        pos += 1
    return cost


def problem(expr: str) -> str | None:
    """None when ``expr`` is within :data:`MAX_COST`, else the reason to refuse it."""
    cost = estimate(expr)
    if cost <= MAX_COST:
        return None
    return (f"estimated evaluation cost {cost:.3g} is over the limit {MAX_COST:.3g} (each "
            f"nested all/exists/map/filter multiplies it by {ASSUMED_ITEMS}); unnest the "
            f"comprehensions")
