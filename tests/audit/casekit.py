"""Turn a shared bug-report case (``demo/data/cases/reports/*.json``) or a seed recipe into a
contract agent report dict (``fleet_agent/schema.py``), for tests of the context builder
and the rules.

Conversion rules (``demo/data/cases/README.md``):

* ``docker run … IMAGE ARGS`` (and bare ``IMAGE ARGS`` container args) becomes the container's
  server process: ``vllm serve ARGS`` for images after the entrypoint change of vLLM PR #25967
  (2025-10-02, taken as >= 0.11.0), else ``python3 -m vllm.entrypoints.openai.api_server ARGS``;
  ``container_image`` is set, and docker ``-v`` bind mounts become the optional
  ``container_mounts`` server field (what /proc/PID/mountinfo would show an agent).
* a ``vllm bench`` line is not a server: ``servers`` is empty unless ``include_bench``.
* ``<...>`` placeholders stay in argv as the unknown values they are.
* GPUs: one NVML entry per ``count`` of each case GPU, ``memory_total_bytes`` from
  ``memory_gib`` (None when not stated), compute capability from the GPU table when known.
* ``vllm_version``: the first PEP 440-looking token of the case string (what ``GET /version``
  would return, e.g. ``0.20.2rc1.dev49+g9b4e83934`` for the gemma4-0505 image), else the
  string's leading word (``latest`` …), left to ``audit.kb.versions`` to map.
* ``error_lines`` (optional): the error text a start-up failure logged, as the report
  quotes it, becomes one ``failed_starts[]`` entry (:func:`failed_start_of`), so the rules'
  ``log_signatures`` see it as ``audit/crashloop.py`` would (:func:`log_matches`).
* ``startup_failure: false`` (sets 3-5) without ``error_lines``: the server started and
  served, so its ``GET /v1/models`` answered: one model card (the served name, context length
  unknown), the agent's evidence that the server is serving.
* ``chat_template_note`` saying the checkpoint ships no chat template: the agent's
  ``server.errors`` line for model files read without a template
  (``chat template: no chat template in HF cache snapshot M@<rev>``,
  ``fleet_agent/ondisk.py``), as it reports a server whose files hold none.
* metrics: :data:`CASE_METRICS` holds, per case, the numbers its ``metrics_note`` gives (read
  by hand, quoted in comments); :func:`metrics_text` writes them in the naming era of the
  case's version (V0 < 0.8.0: ``gpu_cache_usage_perc``, no ``engine`` label; V1-early 0.8.x:
  no ``engine`` label; V1 >= 0.9: ``engine="0"``, ``_total`` counters, ``kv_cache_usage_perc``).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from audit.kb.flags import parse_argv
from audit.kb.gpus import lookup
from audit.kb.versions import parse_version
from demo.paths import report_paths, reports_dir
from fleet_agent.ondisk import NO_TEMPLATE_IN_FILES

CASES_DIR = reports_dir()  # FileNotFoundError (collection error) when the data is missing
_GIB = 2**30
_VERSION_RE = re.compile(
    r"(?<![\w.])v?(\d+\.\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?"
    r"(?:\+[0-9a-z.]+)?)", re.IGNORECASE)
_ENTRYPOINT_SERVE = Version("0.11.0")  # vLLM PR #25967 (2025-10-02): ENTRYPOINT vllm serve
COLLECTED_AT = "2026-09-30T12:00:00+00:00"

# Numbers from each case's metrics_note (only cases whose note gives numbers for a running
# server; startup failures 006/011/031 never served /metrics; 038's log is from a different
# utilisation than its argv, so it is left out).
CASE_METRICS: dict[str, dict[str, Any]] = {
    # 002: "Accepted 25 vs Drafted 3652 tokens", k=4 -> 913 drafts; per-position 0.027/0/0/0
    # (25/913); "GPU KV cache usage ~36-41%"; "prefix cache hit rate ~20-27%".
    "002": {"drafts": 913, "draft_tokens": 3652, "accepted": 25, "per_pos": [25, 0, 0, 0],
            "kv_cache_usage": 0.38, "prefix_queries": 10000, "prefix_hits": 2300},
    # 017: "Accepted 0 tokens, Drafted 40 tokens", num_speculative_tokens=1.
    "017": {"drafts": 40, "draft_tokens": 40, "accepted": 0, "per_pos": [0]},
    # 027: acceptance length (1 + accepted/drafts) "declined smoothly to ~2.8", k=4.
    "027": {"drafts": 10000, "draft_tokens": 40000, "accepted": 18000,
            "per_pos": [8000, 5000, 3000, 2000]},
    # 032: "near zero (same as the 0.2% in the original report)", k=1.
    "032": {"drafts": 1000, "draft_tokens": 1000, "accepted": 2, "per_pos": [2]},
}


def case_id(path: Path | str) -> str:
    """``…/002-gemma4-….json`` -> ``"002"``."""
    return Path(path).name.split("-", 1)[0]


def extract_version(text: str | None) -> str | None:
    """What ``GET /version`` would have said for a case's free-text version string."""
    if not text:
        return None
    for match in _VERSION_RE.finditer(text):
        try:
            Version(match[1])
        except InvalidVersion:
            continue
        return match[1]
    # "not stated ..." is the collectors' marker for a fact the report does not give: with no
    # version in it, the server's /version is unknown, not a version (or tag) called "not".
    if text.strip().lower().startswith("not stated"):
        return None
    return text.split()[0]


def _era(version: str | None) -> str:
    try:
        parsed = Version(version) if version else None
    except InvalidVersion:
        parsed = None
    if parsed is None or parsed >= Version("0.9.0"):
        return "v1"
    return "v1-early" if parsed >= Version("0.8.0") else "v0"


def metrics_text(values: dict[str, Any], version: str | None, model_name: str) -> str:
    """Prometheus text for ``values`` (keys as in :data:`CASE_METRICS`) in the naming era of
    ``version``. Spec-decode families are V1-only (V0 printed them only to the log)."""
    era = _era(version)
    base = f'model_name="{model_name}"' + (',engine="0"' if era == "v1" else "")
    lines = [f"vllm:num_requests_running{{{base}}} {values.get('running', 1)}",
             f"vllm:num_requests_waiting{{{base}}} {values.get('waiting', 0)}"]
    usage = "gpu_cache_usage_perc" if era != "v1" else "kv_cache_usage_perc"
    lines.append(f"vllm:{usage}{{{base}}} {values.get('kv_cache_usage', 0.1)}")
    if "prefix_queries" in values and era == "v1":
        lines += [f"vllm:prefix_cache_queries_total{{{base}}} {values['prefix_queries']}",
                  f"vllm:prefix_cache_hits_total{{{base}}} {values['prefix_hits']}"]
    if "drafts" in values and era != "v0":
        lines += _spec_lines(values, base)
    return "\n".join(lines) + "\n"


def _spec_lines(values: dict[str, Any], base: str) -> list[str]:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{{{base}}} {values['drafts']}",
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{base}}} {values['draft_tokens']}",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{base}}} {values['accepted']}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    for position, count in enumerate(values.get("per_pos", [])):
        lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                     f'{{{base},position="{position}"}} {count}')
    return lines


def _gpus(case_gpus: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for spec in case_gpus:
        row = lookup(spec.get("name")) or {}
        memory = spec.get("memory_gib")
        for _ in range(int(spec.get("count") or 1)):
            out.append({
                "index": len(out), "uuid": f"GPU-{tag}-{len(out)}", "name": spec.get("name"),
                "memory_total_bytes": int(memory * _GIB) if memory else None,
                "memory_used_bytes": None, "compute_capability": row.get("cc"),
                "utilization_gpu_pct": None, "temperature_c": None, "power_draw_w": None,
                "power_limit_w": None,
                # an AMD node's agent sends the gfx target AMD SMI reads
                **({"gfx_arch": row["gfx"], "vendor": "amd"} if row.get("gfx") else {}),
            })
    return out


def _container_argv(argv: list[str], version: str | None) -> tuple[list[str], str | None,
                                                                     dict[str, str]]:
    """(server argv, container image, mounts) for a docker-run or container-args line."""
    parsed = parse_argv(argv)
    if parsed.launcher not in ("docker run", "container args"):
        return list(argv), None, {}
    image = parsed.container_image
    args = argv[argv.index(image) + 1:] if image in argv else []
    known = parse_version(version).version  # None for unknown forms (0.1.devN source builds)
    serve = known is None or Version(known) >= _ENTRYPOINT_SERVE
    head = ["vllm", "serve"] if serve else \
        ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    return head + list(args), image, dict(parsed.mounts)


def _base_url(argv: list[str]) -> str:
    values = parse_argv(argv).values
    if values.get("uds"):
        return f"unix:{values['uds']}"
    port = values.get("port") if isinstance(values.get("port"), int) else 8000
    return f"http://127.0.0.1:{port}"


def report_skeleton(hostname: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Contract report with no servers (fill ``servers`` yourself)."""
    return {
        "schema_version": 1, "report_id": str(uuid.uuid5(uuid.NAMESPACE_URL, hostname)),
        "collected_at": COLLECTED_AT,
        "agent": {"version": "test", "interval_s": 30, "spool_dropped": 0},
        "host": {"hostname": hostname, "machine_id": f"mid-{hostname}", "os": "Linux",
                 "kernel": None, "nvidia_driver_version": "580.95.05",
                 "cuda_driver_version": "13.0"},
        "gpus": gpus, "gpu_error": None, "servers": [],
    }


def server_entry(argv: list[str], version: str | None, *, pid: int = 4242,
                 image: str | None = None, gpu_uuids: list[str] | None = None,
                 template: dict[str, Any] | None = None, metrics: str | None = None,
                 mounts: dict[str, str] | None = None,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """One contract ``servers[]`` element."""
    entry = {
        "pid": pid, "started_at": "2026-09-30T10:00:00+00:00", "argv": list(argv),
        "env": dict(env or {}), "container_image": image, "base_url": _base_url(argv),
        "gpu_uuids": list(gpu_uuids or []), "vllm_version": version,
        "installed_vllm_version": version, "models": [], "chat_template": template,
        "metrics": None if metrics is None else {
            "format": "prometheus-text", "scraped_at": COLLECTED_AT, "text": metrics},
        "errors": [],
    }
    if mounts:
        entry["container_mounts"] = mounts
    return entry


def case_template(case: dict[str, Any]) -> dict[str, Any] | None:
    """A chat_template fingerprint when the case note names a template the seed hashed:
    the cyankiwi AWQ bundled template is the seed's frozen one (prefix/suffix/size from
    seed 000; the middle of the hash is synthetic)."""
    note = (case.get("chat_template_note") or "").lower()
    if "cyankiwi" in note and "bundled" in note:
        return seed_template("frozen")
    return None


def _ships_no_template(case: dict[str, Any]) -> bool:
    """The case note says the checkpoint has no chat template of its own."""
    note = (case.get("chat_template_note") or "").lower()
    return bool(re.search(r"\bships no\b.*\bchat template\b|\bhas no chat template\b", note))


def case_to_report(path: Path | str, include_bench: bool = False) -> dict[str, Any]:
    """Contract report dict for one shared case file (see module docstring).

    The report carries ``x_case`` (id, title, expected_finding, confidence, raw version) for
    test messages; it is an extra field the contract allows.
    """
    case = json.loads(Path(path).read_text(encoding="utf-8"))
    cid = case_id(path)
    version = extract_version(case.get("vllm_version"))
    report = report_skeleton(f"case-{cid}", _gpus(case.get("gpus") or [], cid))
    if case.get("nvidia_driver_version"):  # optional: the host driver the report names
        report["host"]["nvidia_driver_version"] = case["nvidia_driver_version"]
    argv, image, mounts = _container_argv(case["argv"], version)
    parsed = parse_argv(argv)
    report["x_case"] = {"id": cid, "title": case.get("title"), "version_raw":
                        case.get("vllm_version"), "expected_finding":
                        case.get("expected_finding"), "confidence": case.get("confidence"),
                        "launcher": parsed.launcher}
    if parsed.is_server or include_bench:
        names = parsed.values.get("served_model_name") or [parsed.values.get("model") or "m"]
        # metrics_values: numbers a more_cases report quotes from its /metrics (optional)
        values = CASE_METRICS.get(cid) or case.get("metrics_values")
        text = metrics_text(values, version, str(names[0])) if values else None
        report["servers"].append(server_entry(
            argv, version, pid=1000 + int(cid), image=image,
            gpu_uuids=[g["uuid"] for g in report["gpus"]], template=case_template(case),
            metrics=text, mounts=mounts, env=case.get("env") or {}))
        if case.get("model_config"):
            report["servers"][-1]["model_files"] = model_files_of(case)
        if _ships_no_template(case):
            report["servers"][-1].setdefault("errors", []).append(
                f"chat template: {NO_TEMPLATE_IN_FILES}HF cache snapshot "
                f"{parsed.values.get('model')}@<rev>")
        if case.get("startup_failure") is False and not case.get("error_lines"):
            # The case says the server started and served: its GET /v1/models answered, as
            # the agent reads it from a running server (the card's context length unknown).
            report["servers"][-1]["models"] = [{"id": str(names[0])}]
    if case.get("error_lines"):  # optional: the error lines a failed start would log
        report["failed_starts"] = [failed_start_of(cid, argv, image, case["error_lines"])]
    return report


def failed_start_of(cid: str, argv: list[str], image: str | None,
                    lines: list[str]) -> dict[str, Any]:
    """``failed_starts[]`` entry (fleet_agent/schema.py ``FailedStart``) for a case whose
    report quotes the error a start-up failure logged (``"error_lines"``): a systemd unit that
    exited and restarted, with those lines as its error lines."""
    return {"source": "systemd", "unit_or_container": f"vllm-case-{cid}.service",
            "argv": list(argv), "image": image, "restart_count": 3, "exit_code": 1,
            "last_exit_at": COLLECTED_AT, "state": "failed", "lines": list(lines), "errors": []}


def log_matches(kb: Any, path: Path | str) -> dict[str, str]:
    """``{rule_id: matching line}`` for the case's failed start, as the dashboard's
    failed-start evaluation (audit/crashloop.py) would match it; empty without error lines."""
    report = case_to_report(path)
    return {rule.id: line for failed in report.get("failed_starts") or []
            for rule, line in kb.match_log(failed["lines"])}


MODEL_CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def model_files_of(case: dict[str, Any]) -> dict[str, Any]:
    """``servers[].model_files`` as the agent would send it for a case naming a real config
    (``"model_config": "<tests/data/model_configs stem>"``, optional ``"weights_bytes"``).
    A missing fixture is an error, never a skip."""
    config = json.loads((MODEL_CONFIGS / f"{case['model_config']}.json").read_text())
    config.pop("_source", None)
    return {"source": f"hf-cache:{config.get('_repo', case['model_config'])}@{'0' * 40}",
            "config": config, "weights_bytes": case.get("weights_bytes"), "errors": []}


def all_case_paths() -> list[Path]:
    """Every shared case report, sorted by id."""
    return report_paths()


# --------------------------------------------------------------------------- seed recipes

_SEED_HASHES = {  # seed 000 "Three load-bearing facts" #3: prefix, suffix, size
    "frozen": ("94899c0f", "25bff413", 16934),
    "intermediate": ("36e3a42e", "bead3f0", 17466),
    "vetted": ("ae53464b", "8de4c6d4", 18683),
}
H100_BYTES = 85520809984  # NVML total of "NVIDIA H100 80GB HBM3" (contract example)
SPECULATOR = ('{"method":"eagle3","model":"RedHatAI/gemma-4-31B-it-speculator.eagle3",'
              '"num_speculative_tokens":3}')


def seed_template(identity: str) -> dict[str, Any]:
    """A chat_template fingerprint matching a seed row (synthetic middle hex digits)."""
    prefix, suffix, size = _SEED_HASHES[identity]
    middle = "0" * (64 - len(prefix) - len(suffix))
    return {"source": "/templates/google-31b-chat-template.jinja",
            "sha256": prefix + middle + suffix, "size_bytes": size}


def recipe_argv(recipe: str, enable_thinking: bool = True) -> list[str]:
    """Seed 000 LIGHT or PUSH command line (``vllm serve …``), with enable_thinking set
    server-side through --default-chat-template-kwargs."""
    light = recipe.upper() == "LIGHT"
    argv = ["vllm", "serve", "cyankiwi/gemma-4-31B-it-AWQ-4bit",
            "--tensor-parallel-size", "1" if light else "2",
            "--max-model-len", "32768" if light else "262144",
            "--gpu-memory-utilization", "0.85" if light else "0.94",
            "--max-num-seqs", "64" if light else "256",
            "--max-num-batched-tokens", "8192" if light else "16384",
            "--kv-cache-dtype", "fp8",
            "--chat-template", "/templates/google-31b-chat-template.jinja",
            "--trust-request-chat-template", "--enable-auto-tool-choice",
            "--reasoning-parser", "gemma4", "--tool-call-parser", "gemma4",
            "--speculative-config", SPECULATOR, "--no-scheduler-reserve-full-isl"]
    kwargs = json.dumps({"enable_thinking": enable_thinking})
    return argv + ["--default-chat-template-kwargs", kwargs]


def seed_report(recipe: str, version: str = "0.25.1", template: str = "vetted",
                metrics: str | None = None) -> dict[str, Any]:
    """Report of one host running a seed recipe: LIGHT = TP=1 on one H100 80GB HBM3,
    PUSH = TP=2 on two."""
    count = 1 if recipe.upper() == "LIGHT" else 2
    gpus = [{"index": i, "uuid": f"GPU-seed-{i}", "name": "NVIDIA H100 80GB HBM3",
             "memory_total_bytes": H100_BYTES, "memory_used_bytes": None,
             "compute_capability": "9.0", "utilization_gpu_pct": None, "temperature_c": None,
             "power_draw_w": None, "power_limit_w": None} for i in range(count)]
    report = report_skeleton(f"seed-{recipe.lower()}", gpus)
    report["servers"].append(server_entry(
        recipe_argv(recipe), version, gpu_uuids=[g["uuid"] for g in gpus],
        template=seed_template(template), metrics=metrics))
    return report


def evaluate_case(kb: Any, path: Path | str) -> tuple[dict[str, Any], list[Any]]:
    """Evaluate one case file with knowledge base ``kb`` as ``audit_snapshot`` would.

    A ``vllm bench`` line is evaluated on its flags only (cases/README.md). Returns
    ``({rule_id: FindingResult}, rule failures)`` over every server of the report.
    """
    from audit.kb.context import build_contexts

    fired: dict[str, Any] = {}
    failures: list[Any] = []
    for ctx in build_contexts(case_to_report(path, include_bench=True), []):
        evaluation = kb.evaluate(ctx)
        fired.update({f.rule_id: f for f in evaluation})
        failures.extend(evaluation.failures)
    return fired, failures


def at_least(severity: str, minimum: str) -> bool:
    """True when ``severity`` is ``minimum`` or more severe (critical > ... > info)."""
    from audit.kb.engine import SEVERITY_RANK

    return SEVERITY_RANK[severity] <= SEVERITY_RANK[minimum]
