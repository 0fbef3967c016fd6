"""Rules engine: load, validate and evaluate the knowledge base (audit/rules/*.yaml).

Rules are data. Every expression (condition, escalate ``when``, ``applies``, evidence) is
a CEL expression compiled once at load by the ``cel`` module (PyPI
common-expression-language); nothing is ``eval``-ed. Loading refuses a rule file with
:class:`RuleError` naming the file and the rule when it finds an unknown or missing
field, a bad kind/severity/cadence, a duplicate id, a CEL syntax error, an unknown
variable, context key or function, a bad PEP 440 literal in ``version_in`` /
``version_lt`` / ``version_ge``, a message placeholder that is not an evidence name, a
reference that is neither an https URL nor ``seed:<file>#<section>``, or a
``last_verified`` that is not a date.

Rule fields (see docs/knowledge-base.md) plus two optional fields for metric rules:

- ``applies``: CEL precondition ("this rule is about this server"). When it holds, the
  condition is evaluated; when the condition does not fire and the exposition could not
  answer (``metrics.available`` false, or a name of ``needs`` in ``metrics.missing`` or
  null in the window) the engine emits an info "cannot check" finding for the rule instead
  of staying silent (missing data is not healthy). A condition that can fire on
  partial data still fires.
- ``needs``: canonical metric names (audit/kb/metrics.py) the condition relies on.

- ``log_signatures``: error-line patterns. A failed start (``failed_starts[]`` of a
  report) whose error lines match one fires the rule as "server down", whatever its condition
  says (:meth:`KnowledgeBase.match_log`). Checked at load: a list of at most
  :data:`MAX_SIGNATURES` strings of at most :data:`MAX_SIGNATURE_CHARS` characters that compile
  with Python's ``re``, with no backreference and no quantified group that itself contains a
  quantifier (``(a+)+``, ``(.*)*``, ``(x|y+){2,}``), the shape behind catastrophic
  backtracking. ``re`` has no timeout, so the patterns are kept simple instead; the agent also
  bounds each line to 500 characters and 40 lines per failed start.

- ``predicts: startup_failure``: the finding claims the server fails to start; it is
  dropped on a server the report shows serving (audit.kb.evidence_of_serving).

``confirmed_upstream`` (true/false) is required on every rule that cites a GitHub issue or
pull request.

This module imports no Django, so ``audit_snapshot``, benchmarks and the ingest can use it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cel
import yaml

from audit.kb import cel_cost
from audit.kb import cel_functions as fn
from audit.kb.cannot_check import missing_reason, scope_text
from audit.kb.evidence_of_serving import parse_predicts, refuted
from audit.kb.messages import MessageFormatter
from audit.kb.paths import active_kb_dirs, safe_load_yaml
from audit.kb.roots import roots_of
from audit.kb.signatures import compile_signatures

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"
SETTINGS_FILE = "_kb.yaml"

SEVERITIES = ("critical", "high", "medium", "low", "info")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
KINDS = frozenset({"known_issue", "ceiling", "pitfall", "template", "metric", "model"})
CADENCES = frozenset({"config", "metrics"})
TOP_LEVEL = frozenset(
    {"vllm", "flags", "flags_meta", "model", "gpu", "template", "metrics", "geometry", "host",
     "memory", "server", "probes", "support", "fixes", "perf", "server_model"}
    # memory: per-GPU budget (audit/kb/memory.py); probes: live-probe results
    # (audit/kb/probes.py); support: what the release can serve (audit/kb/support.py);
    # fixes: shipped fixes it lacks (audit/kb/fixes.py); perf: the running command against
    # its predicted TPOT/TTFT (audit/kb/perf); server_model: capacity, engine figures first
    # (servermodel.py)
)
REQUIRED_FIELDS = frozenset(
    {"id", "title", "kind", "severity", "cadence", "condition", "message", "remediation",
     "references", "last_verified"}
)
OPTIONAL_FIELDS = frozenset(
    {"escalate", "evidence", "fixed_in", "confirmed_upstream", "checklist", "applies",
     "needs", "log_signatures", "families", "supersedes", "steer", "predicts"}
)
#: ``steer.direction``: what the recommended command does to ``steer.flag``.
STEER_DIRECTIONS = frozenset({"lower", "raise", "set", "off"})
ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CHECKLIST_RE = re.compile(r"^[KR]\d+$")
ISSUE_RE = re.compile(r"^https://github\.com/[^/]+/[^/]+/(issues|pull)/\d+")
SEED_REF_RE = re.compile(r"^seed:[\w.-]+(#.+)?$")
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
BINDER_RE = re.compile(r"\.\s*(?:all|exists_one|exists|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
FIELD_RE = re.compile(
    r"(?<![\w.])(" + "|".join(sorted(TOP_LEVEL)) + r")\s*\.\s*([A-Za-z_]\w*)"
    r"(?:\s*\.\s*([A-Za-z_]\w*))?"
)
CALL_RE = re.compile(r"\b(version_in|version_lt|version_ge|version_gt)\s*\(")


class RuleError(ValueError):
    """A rule file or rule that refuses to load; ``str()`` names the file and rule id."""

    def __init__(self, file: str | Path, rule_id: str | None, problem: str) -> None:
        self.file, self.rule_id, self.problem = str(file), rule_id, problem
        where = f"{self.file}: rule {rule_id!r}" if rule_id else self.file
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class FindingResult:
    """One rule that fired on one server's context (all values JSON-able)."""

    rule_id: str
    severity: str
    kind: str
    title: str
    message: str
    remediation: str
    references: list[str]
    evidence: dict[str, Any]
    checklist: list[str] = field(default_factory=list)
    #: The rule's ``steer`` evaluated on this server: ``{"flag", "direction", "value"}``
    #: (the recommender follows it: advice.recommend.steer), or None.
    steer: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The finding as the dict printed by ``audit_snapshot``."""
        return asdict(self)


@dataclass(frozen=True)
class RuleFailure:
    """A rule whose evaluation raised; recorded, never stops the other rules."""

    rule_id: str
    error: str


class Evaluation(list):
    """``list[FindingResult]`` sorted by severity then rule id, plus ``failures``."""

    def __init__(self, findings: Iterable[FindingResult], failures: list[RuleFailure]):
        super().__init__(sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity], f.rule_id)))
        self.failures = failures


@dataclass
class Rule:
    """A validated rule with its compiled CEL programs."""

    id: str
    title: str
    kind: str
    severity: str
    cadence: str
    condition: cel.Program
    message: str
    remediation: str
    references: list[str]
    last_verified: dt.date
    file: str
    escalate: list[tuple[cel.Program, str]] = field(default_factory=list)
    evidence: dict[str, cel.Program] = field(default_factory=dict)
    applies: cel.Program | None = None
    needs: list[str] = field(default_factory=list)
    #: The condition's terms that read no metrics (audit.kb.cannot_check.scope_text):
    #: "cannot check" is said only where they hold.
    scope: cel.Program | None = None
    log_signatures: list[re.Pattern[str]] = field(default_factory=list)
    fixed_in: str | None = None
    confirmed_upstream: bool | None = None
    checklist: list[str] = field(default_factory=list)
    # The condition reads vllm.version / vllm.installed (set by build_rule).
    version_gated: bool = False
    #: Optional model families the rule is about (``families: [gemma4, qwen3]``), for coverage.
    families: list[str] = field(default_factory=list)
    #: The condition and ``applies`` source text (coverage reads version literals from it).
    condition_text: str = ""
    #: Rule ids this rule replaces when both fire on one server (``supersedes: [id]``): one
    #: cause, one finding. Checked at load: every id exists, none is its own.
    supersedes: list[str] = field(default_factory=list)
    #: How a firing finding steers the recommended command: ``{"flag": "--max-num-seqs",
    #: "direction": "lower"|"raise"|"set"|"off", "value": CEL program or None}``.
    steer: dict[str, Any] | None = None
    #: ``predicts: startup_failure``: the finding claims the server fails to start, so it is
    #: dropped on a server seen serving (audit.kb.evidence_of_serving).
    predicts: str | None = None


_FORMATTER = MessageFormatter()


# ----------------------------------------------------------------------------- validation


class _Validator:
    """Compiles and checks the expressions and fields of one rule."""

    def __init__(self, file: str, rule_id: str | None, settings: dict[str, Any]) -> None:
        self.file, self.rule_id = file, rule_id
        self.fields: dict[str, list[str]] = settings.get("context_fields") or {}
        self.metric_names = set(settings.get("metric_names") or [])

    def fail(self, problem: str) -> RuleError:
        return RuleError(self.file, self.rule_id, problem)

    def program(self, expr: Any, what: str) -> cel.Program:
        if not isinstance(expr, str) or not expr.strip():
            raise self.fail(f"{what}: expected a non-empty CEL expression string")
        try:
            program = cel.compile(expr)
        except ValueError as exc:
            raise self.fail(f"{what}: CEL syntax error: {exc}") from exc
        if too_costly := cel_cost.problem(expr):  # cel has no budget: bound it before it runs
            raise self.fail(f"{what}: {too_costly}")
        self._check_names(program, expr, what)
        self._check_fields(expr, what)
        self._check_version_literals(expr, what)
        return program

    def _check_names(self, program: cel.Program, expr: str, what: str) -> None:
        bound = set(BINDER_RE.findall(_strip_strings(expr)))
        unknown_vars = sorted(set(program.variables()) - TOP_LEVEL - bound)
        if unknown_vars:
            raise self.fail(f"{what}: unknown variable(s) {unknown_vars}; allowed: "
                            f"{sorted(TOP_LEVEL)}")
        named = {f for f in program.functions() if not f.startswith(("_", "@", "!", "-"))}
        unknown_fns = sorted(named - fn.CEL_BUILTINS - fn.FUNCTION_NAMES)
        if unknown_fns:
            raise self.fail(f"{what}: unknown function(s) {unknown_fns}")

    def _check_fields(self, expr: str, what: str) -> None:
        if not self.fields:
            return
        for top, key, sub in FIELD_RE.findall(_strip_strings(expr)):
            known = self.fields.get(top)
            if known is not None and key not in known:
                raise self.fail(f"{what}: unknown context key {top}.{key}")
            nested = self.fields.get(f"{top}.{key}")
            if sub and nested is not None and sub not in nested:
                raise self.fail(f"{what}: unknown context key {top}.{key}.{sub}")

    def _check_version_literals(self, expr: str, what: str) -> None:
        for match in CALL_RE.finditer(expr):
            args = _call_arguments(expr, match.end())
            for index, arg in enumerate(args):
                literal = _string_literal(arg)
                if literal is None:
                    continue
                try:
                    if index == 1 and match.group(1) in fn.SPECIFIER_FUNCTIONS:
                        fn.check_specifier(literal)
                    else:
                        fn.check_version(literal)
                except ValueError as exc:
                    raise self.fail(f"{what}: {match.group(1)}(): {exc}") from exc

    def metric_list(self, names: Any) -> list[str]:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise self.fail("needs: expected a list of canonical metric names")
        unknown = sorted(set(names) - self.metric_names) if self.metric_names else []
        if unknown:
            raise self.fail(f"needs: unknown metric name(s) {unknown}")
        return names


def _strip_strings(expr: str) -> str:
    return STRING_RE.sub('""', expr)


def _string_literal(arg: str) -> str | None:
    arg = arg.strip()
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "\"'" and STRING_RE.fullmatch(arg):
        return arg[1:-1]
    return None


def _call_arguments(expr: str, start: int) -> list[str]:
    """Split the argument list that starts right after ``(`` at ``start`` at depth 1."""
    args, depth, current, quote, i = [], 0, [], None, start
    while i < len(expr):
        ch = expr[i]
        if quote:
            current.append(ch)
            if ch == "\\" and i + 1 < len(expr):
                current.append(expr[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            current.append(ch)
        elif ch in "([{":
            depth += 1
            current.append(ch)
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
            current.append(ch)
        elif ch == "," and depth == 0:
            args.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    args.append("".join(current))
    return args


def _check_placeholders(message: str, evidence: dict[str, Any], v: _Validator) -> None:
    try:
        parsed = list(string.Formatter().parse(message))
    except ValueError as exc:
        raise v.fail(f"message: bad placeholder syntax: {exc}") from exc
    for _literal, name, spec, _conversion in parsed:
        if name is None:
            continue
        if name not in evidence:
            raise v.fail(f"message: placeholder {{{name}}} is not an evidence name "
                         f"(evidence: {sorted(evidence)})")
        if spec and "{" in spec:
            raise v.fail(f"message: nested placeholder in format spec of {{{name}}}")


def _check_reference(ref: Any, v: _Validator) -> str:
    if isinstance(ref, str) and (ref.startswith("https://") or SEED_REF_RE.match(ref)):
        return ref
    raise v.fail(f"references: {ref!r} is neither an https URL nor a seed:<file>#<section> ref")


def _as_date(value: Any, v: _Validator) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError as exc:
        raise v.fail(f"last_verified: {value!r} is not a YYYY-MM-DD date") from exc


def _choice(value: Any, allowed: Iterable[str], what: str, v: _Validator) -> str:
    if value not in allowed:
        raise v.fail(f"{what}: {value!r} is not one of {sorted(allowed)}")
    return value


def _text(raw: dict[str, Any], key: str, v: _Validator) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise v.fail(f"{key}: expected a non-empty string")
    return value.strip()


def _check_shape(raw: Any, v: _Validator) -> None:
    if not isinstance(raw, dict):
        raise v.fail("a rule must be a mapping")
    unknown = sorted(set(raw) - REQUIRED_FIELDS - OPTIONAL_FIELDS)
    if unknown:
        raise v.fail(f"unknown field(s) {unknown}")
    missing = sorted(REQUIRED_FIELDS - set(raw))
    if missing:
        raise v.fail(f"missing required field(s) {missing}")
    if not isinstance(raw["id"], str) or not ID_RE.match(raw["id"]):
        raise v.fail(f"id: {raw['id']!r} is not a lower-case slug")


def _escalations(raw: Any, v: _Validator) -> list[tuple[cel.Program, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise v.fail("escalate: expected a list of {when, severity}")
    out = []
    for index, step in enumerate(raw):
        if not isinstance(step, dict) or set(step) != {"when", "severity"}:
            raise v.fail(f"escalate[{index}]: expected exactly the keys when and severity")
        severity = _choice(step["severity"], SEVERITIES, f"escalate[{index}].severity", v)
        out.append((v.program(step["when"], f"escalate[{index}].when"), severity))
    return out


def _evidence(raw: Any, v: _Validator) -> dict[str, cel.Program]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise v.fail("evidence: expected a mapping of name -> CEL expression")
    for name in raw:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise v.fail(f"evidence: {name!r} is not an identifier")
    return {name: v.program(expr, f"evidence.{name}") for name, expr in raw.items()}


def _optional_fields(raw: dict[str, Any], v: _Validator) -> dict[str, Any]:
    fixed_in = raw.get("fixed_in")
    if fixed_in is not None:
        try:
            fn.check_version(str(fixed_in))
        except ValueError as exc:
            raise v.fail(f"fixed_in: {exc}") from exc
    confirmed = raw.get("confirmed_upstream")
    if confirmed is not None and not isinstance(confirmed, bool):
        raise v.fail("confirmed_upstream: expected true or false")
    # Interface doc: a rule citing an upstream issue must say whether its cause was confirmed.
    cites_issue = any(ISSUE_RE.search(str(ref)) for ref in raw.get("references") or [])
    if cites_issue and confirmed is None:
        raise v.fail("confirmed_upstream: required (true/false) when citing an upstream "
                     "issue or PR")
    checklist = raw.get("checklist") or []
    if not isinstance(checklist, list) or not all(
        isinstance(c, str) and CHECKLIST_RE.match(c) for c in checklist
    ):
        raise v.fail("checklist: expected a list like [K01, R2]")
    families = raw.get("families") or []
    if not isinstance(families, list) or not all(
        isinstance(f, str) and ID_RE.match(f) for f in families
    ):
        raise v.fail("families: expected a list of lower-case slugs like [gemma4, qwen3]")
    supersedes = raw.get("supersedes") or []
    if not isinstance(supersedes, list) or not all(
        isinstance(r, str) and ID_RE.match(r) and r != raw.get("id") for r in supersedes
    ):
        raise v.fail("supersedes: expected a list of other rule ids")
    applies = raw.get("applies")
    try:
        predicts = parse_predicts(raw.get("predicts"))
    except ValueError as exc:
        raise v.fail(str(exc)) from exc
    return {
        "predicts": predicts, "steer": _steer(raw.get("steer"), v),
        "supersedes": list(supersedes),
        "families": list(families),
        "fixed_in": None if fixed_in is None else str(fixed_in),
        "confirmed_upstream": confirmed,
        "checklist": list(checklist),
        "applies": None if applies is None else v.program(applies, "applies"),
        "needs": v.metric_list(raw["needs"]) if "needs" in raw else [],
        "scope": _scope(raw, v),
        "log_signatures": compile_signatures(raw.get("log_signatures"), v.fail),
    }


def _steer(raw: Any, v: _Validator) -> dict[str, Any] | None:
    """``steer: {flag: --x, direction: lower|raise|set|off, value: CEL}``; ``value`` is
    required except for ``off`` (drop the flag)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not set(raw) <= {"flag", "direction", "value"}:
        raise v.fail("steer: expected a mapping with flag, direction and value")
    flag, direction = raw.get("flag"), raw.get("direction")
    if not isinstance(flag, str) or not re.match(r"^--[a-z0-9][a-z0-9-]*$", flag):
        raise v.fail("steer.flag: expected a long option like --max-num-seqs")
    if direction not in STEER_DIRECTIONS:
        raise v.fail(f"steer.direction: expected one of {sorted(STEER_DIRECTIONS)}")
    if direction != "off" and "value" not in raw:
        raise v.fail("steer.value: required unless direction is off")
    value = raw.get("value")
    program = None if value is None else v.program(str(value), "steer.value")
    return {"flag": flag, "direction": direction, "value": program}


def _scope(raw: dict[str, Any], v: _Validator) -> cel.Program | None:
    if raw.get("applies") is None or not isinstance(raw.get("condition"), str):
        return None
    text = scope_text(raw["condition"])
    return None if text is None else v.program(text, "condition (terms without metrics)")


def build_rule(raw: Any, file: str, settings: dict[str, Any]) -> Rule:
    """Validate one raw rule mapping and compile it; raises :class:`RuleError`."""
    rule_id = raw.get("id") if isinstance(raw, dict) else None
    v = _Validator(file, rule_id if isinstance(rule_id, str) else None, settings)
    _check_shape(raw, v)
    evidence = _evidence(raw.get("evidence"), v)
    message = _text(raw, "message", v)
    _check_placeholders(message, evidence, v)
    references = raw["references"]
    if not isinstance(references, list) or not references:
        raise v.fail("references: expected a non-empty list")
    return Rule(
        id=raw["id"], title=_text(raw, "title", v),
        kind=_choice(raw["kind"], KINDS, "kind", v),
        severity=_choice(raw["severity"], SEVERITIES, "severity", v),
        cadence=_choice(raw["cadence"], CADENCES, "cadence", v),
        condition=v.program(raw["condition"], "condition"), message=message,
        version_gated=bool(re.search(r"vllm\.(version|installed)\b", str(raw["condition"]))),
        remediation=_text(raw, "remediation", v),
        references=[_check_reference(r, v) for r in references],
        last_verified=_as_date(raw["last_verified"], v), file=file,
        escalate=_escalations(raw.get("escalate"), v), evidence=evidence,
        condition_text="\n".join(str(raw.get(k) or "") for k in ("condition", "applies")),
        **_optional_fields(raw, v),
    )


# ----------------------------------------------------------------------------- loading


def _rule_files(paths: Sequence[str | Path] | None) -> list[Path]:
    if paths is None:
        paths = [active_kb_dirs().rules]
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(p for p in path.iterdir() if p.suffix in {".yaml", ".yml"})
        else:
            files.append(path)
    return sorted(set(files), key=lambda p: (p.name, str(p)))


def _read_yaml(path: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        data = path.read_bytes()
        doc = safe_load_yaml(data) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RuleError(path, None, f"cannot read rule file: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) - {"settings", "rules"}:
        raise RuleError(path, None, "top level must be a mapping with `rules` and/or "
                                    "`settings` only")
    return data, doc


@dataclass
class KnowledgeBase:
    """Validated rules plus KB-level settings.

    ``version`` is the content hash: sha256 over the loaded files sorted by file name, each
    fed as ``name NUL length NUL bytes``, so any byte change, rename or added file changes it.
    """

    rules: list[Rule]
    settings: dict[str, Any]
    version: str
    files: list[str]

    @property
    def verified_through(self) -> str | None:
        """Newest vLLM release the KB was verified against (``_kb.yaml``)."""
        value = self.settings.get("verified_through")
        return None if value is None else str(value)

    def rule(self, rule_id: str) -> Rule:
        """The rule with this id; raises ``KeyError``."""
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def match_log(self, lines: Sequence[str]) -> list[tuple[Rule, str]]:
        """Rules whose ``log_signatures`` match one of ``lines`` (a failed start's error
        lines), each with the last matching line (the cause is at the end of a traceback)."""
        out = []
        for rule in self.rules:
            if not rule.log_signatures:
                continue
            hit = next((line for line in reversed(lines)
                        if any(p.search(line) for p in rule.log_signatures)), None)
            if hit is not None:
                out.append((rule, hit))
        return out

    def evaluate(self, ctx: dict[str, Any], cadence: str | None = None) -> Evaluation:
        """Evaluate every rule (or only ``cadence`` "config"/"metrics") on one context.

        ``ctx`` is the dict of audit.kb.context.build_context. Returns an
        :class:`Evaluation` (a sorted ``list[FindingResult]``) whose ``failures`` lists
        the rules that raised; a failing rule never stops the others.
        """
        if cadence is not None and cadence not in CADENCES:
            raise ValueError(f"cadence must be None, 'config' or 'metrics', not {cadence!r}")
        activation = self._activation(ctx, roots_of(self, cadence))
        findings: list[FindingResult] = []
        failures: list[RuleFailure] = []
        for rule in self.rules:
            if cadence is None or rule.cadence == cadence:
                _run_rule(rule, activation, ctx, findings, failures)
        self._note_unverified(ctx, findings)
        return Evaluation(self._drop_superseded(findings), failures)

    def _drop_superseded(self, findings: list[FindingResult]) -> list[FindingResult]:
        """Findings minus those a fired rule's ``supersedes`` names (one cause, one finding)."""
        by_id = {r.id: r for r in self.rules}
        fired = {f.rule_id for f in findings if not f.evidence.get("cannot_check")}
        gone = {x for rid in fired for x in getattr(by_id.get(rid), "supersedes", [])}
        return [f for f in findings if f.rule_id not in gone] if gone else findings

    def _note_unverified(self, ctx: dict[str, Any], findings: list[FindingResult]) -> None:
        """On a release past ``verified_through``, a version-gated finding says so: the rule
        still applies (open upstream issues keep open ranges) but nobody re-checked it."""
        version = (ctx.get("vllm") or {}).get("version")
        if not fn.version_gt(version, self.verified_through):
            return
        gated = {r.id for r in self.rules if r.version_gated}
        for index, finding in enumerate(findings):
            if finding.rule_id in gated:
                findings[index] = dataclasses.replace(
                    finding, evidence={**finding.evidence, "unverified_on": version},
                    message=finding.message + f" (Not yet verified on vLLM {version}: this "
                    f"knowledge base was last checked against {self.verified_through}.)")

    def _activation(self, ctx: dict[str, Any],
                    roots: frozenset[str] | None = None) -> cel.Context:
        """The CEL activation of ``ctx``: its blocks named in ``roots`` (None: all)."""
        vllm = dict(ctx.get("vllm") or {})
        vllm["newer_than_vetted"] = fn.version_gt(vllm.get("version"), self.verified_through)
        activation = cel.Context()
        for name, function in fn.functions(self.settings).items():
            activation.add_function(name, function)
        activation.update({key: value for key, value in {**ctx, "vllm": vllm}.items()
                           if roots is None or key in roots})
        return activation


def load_rules(paths: Sequence[str | Path] | None = None) -> KnowledgeBase:
    """Load and validate rule files (default: every *.yaml in audit/rules/).

    ``paths`` may name files or directories. Settings come from the file(s) with a
    top-level ``settings`` key; when none is given, from audit/rules/_kb.yaml.
    Raises :class:`RuleError` naming the file and rule on the first invalid rule.
    """
    files = _rule_files(paths)
    docs = [(path, *_read_yaml(path)) for path in files]
    if not any("settings" in doc for _, _, doc in docs):
        default = RULES_DIR / SETTINGS_FILE
        docs.append((default, *_read_yaml(default)))
        docs[-1][2].pop("rules", None)
    settings = _merge_settings(docs)
    rules, seen = [], {}
    for path, _data, doc in docs:
        for raw in doc.get("rules") or []:
            rule = build_rule(raw, str(path), settings)
            if rule.id in seen:
                raise RuleError(path, rule.id, f"duplicate id (first defined in {seen[rule.id]})")
            seen[rule.id] = str(path)
            rules.append(rule)
    # A whole knowledge base (folders) must resolve every ``supersedes``; a hand-picked file
    # subset (tests, `--rules FILE`) may leave the superseded rule out.
    whole = not paths or all(Path(p).is_dir() for p in paths)
    for rule in rules if whole else []:
        unknown = [r for r in rule.supersedes if r not in seen]
        if unknown:
            raise RuleError(rule.file, rule.id, f"supersedes: no rule {unknown[0]!r}")
    digest = hashlib.sha256()
    for path, data, _doc in sorted(docs, key=lambda d: d[0].name):
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return KnowledgeBase(rules, settings, digest.hexdigest(), [str(p) for p, _, _ in docs])


def _merge_settings(docs: list[tuple[Path, bytes, dict[str, Any]]]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for path, _data, doc in docs:
        block = doc.get("settings") or {}
        if not isinstance(block, dict):
            raise RuleError(path, None, "settings must be a mapping")
        clash = sorted(set(block) & set(settings))
        if clash:
            raise RuleError(path, None, f"settings {clash} are defined in two files")
        settings.update(block)
    verified = settings.get("verified_through")
    if verified is not None:
        try:
            fn.check_version(str(verified))
        except ValueError as exc:
            raise RuleError(RULES_DIR / SETTINGS_FILE, None, f"verified_through: {exc}") from exc
    return settings


# ----------------------------------------------------------------------------- evaluation


def _run_rule(rule: Rule, activation: cel.Context, ctx: dict[str, Any],
              findings: list[FindingResult], failures: list[RuleFailure]) -> None:
    try:
        if rule.applies is not None and rule.applies.execute(activation) is not True:
            return
        fired = rule.condition.execute(activation)
    except Exception as exc:  # noqa: BLE001 - any CEL/runtime error is a recorded failure
        failures.append(RuleFailure(rule.id, f"condition: {_short(exc)}"))
        return
    if fired is True:
        if not refuted(rule.predicts, ctx):
            findings.append(_finding(rule, activation, failures))
        return
    if fired is not False:
        failures.append(RuleFailure(rule.id, f"condition returned {fired!r}, not a bool"))
        return
    # Silent on partial data is not healthy: say what could not be checked.
    gap = _missing_data(rule, ctx) if rule.applies is not None else None
    if gap is not None and _in_scope(rule, activation):
        findings.append(_cannot_check(rule, gap, ctx))


def _in_scope(rule: Rule, activation: cel.Context) -> bool:
    """The rule's server part holds (it would apply if the metric were there)."""
    try:
        return rule.scope is None or rule.scope.execute(activation) is True
    except Exception:  # noqa: BLE001 - a term that cannot be read does not hold
        return False


def _missing_data(rule: Rule, ctx: dict[str, Any]) -> dict[str, Any] | None:
    metrics = ctx.get("metrics") or {}
    if not metrics.get("available"):
        return {"metrics_available": False, "missing": list(rule.needs)}
    # A counter the window reports under its canonical name (spec_drafts, preemptions, ...)
    # is 0 when present but idle, so None there means absent: metrics.window lists spec-decode
    # counters in `missing` only when some spec family exists, not when all are gone.
    listed = set(metrics.get("missing") or [])
    missing = sorted(n for n in rule.needs
                     if n in listed or (n in metrics and metrics[n] is None))
    return {"metrics_available": True, "missing": missing} if missing else None


def _cannot_check(rule: Rule, gap: dict[str, Any], ctx: dict[str, Any]) -> FindingResult:
    why = missing_reason(ctx, gap)
    return FindingResult(
        rule_id=rule.id, severity="info", kind=rule.kind, title=f"Cannot check: {rule.title}",
        message=f"Cannot check \"{rule.title}\": {why}. This is missing data, not a "
                "healthy reading.",
        remediation=f"{why[0].upper()}{why[1:]}. Until then check this by hand: "
                    + " ".join(rule.remediation.split()),
        references=list(rule.references),
        evidence={"cannot_check": True, **gap}, checklist=list(rule.checklist),
    )


def _finding(rule: Rule, activation: cel.Context,
             failures: list[RuleFailure]) -> FindingResult:
    severity = rule.severity
    for when, level in rule.escalate:
        try:
            if when.execute(activation) is True:
                severity = level
                break
        except Exception as exc:  # noqa: BLE001 - recorded, base severity kept
            failures.append(RuleFailure(rule.id, f"escalate: {_short(exc)}"))
    evidence = {name: _safe(program, activation) for name, program in rule.evidence.items()}
    try:
        message = _FORMATTER.vformat(rule.message, (), evidence)
    except Exception as exc:  # noqa: BLE001 - keep the finding, record the bug
        failures.append(RuleFailure(rule.id, f"message: {_short(exc)}"))
        message = rule.message
    steer = None
    if rule.steer is not None:
        value = rule.steer["value"]
        steer = {"flag": rule.steer["flag"], "direction": rule.steer["direction"],
                 "value": None if value is None else _safe(value, activation)}
    return FindingResult(
        rule_id=rule.id, severity=severity, kind=rule.kind, title=rule.title,
        message=" ".join(message.split()), remediation=" ".join(rule.remediation.split()),
        references=list(rule.references), evidence=evidence, checklist=list(rule.checklist),
        steer=steer,
    )


def _safe(program: cel.Program, activation: cel.Context) -> Any:
    try:
        return _jsonable(program.execute(activation))
    except Exception:  # noqa: BLE001 - a failing evidence expression yields null (contract)
        return None


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def _short(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."
