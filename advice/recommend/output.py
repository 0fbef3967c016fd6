"""The answer for one server: replicas' commands, per-flag diff, expected figures, notes.

:func:`server_result` keys: ``pid``, ``base_url``, ``model``, ``status`` ("ok" |
"does_not_fit" | "no_safe_command" | "not_applicable"), ``workload`` ({profile, source,
evidence}), ``layout`` (e.g. "2 x TP=1"), ``version`` ({current, recommended, reason,
references}), ``replicas`` ([{argv, docker, gpus (NVML indices), gpu_uuids, port, env}]),
``diff`` ([{flag, current, current_is_default, recommended, reason, references,
extrapolated}]), ``expected`` ([{figure, value, unit, source, conditions, measured}]),
``notes`` ([str]), ``self_check`` ({version, clean, max_severity, findings}),
``does_not_fit`` (None or {reason, numbers}), ``chat_template`` (the fingerprint of the
template the command serves, as a report's ``chat_template`` entry, or None), ``explained``
([{rule_id, severity, title, why}]: each finding at medium or above the command still raises
at its release, with why no flag clears it; advice.recommend.audit), ``cannot_size`` (None
or what is missing to size the command), ``prediction`` (predicted and calibrated TTFT/TPOT/
tokens per second for the current and the recommended command, or the reason there are
none: :func:`advice.perfmodel.predict_commands`).
"""

from __future__ import annotations

from typing import Any

from advice.perfmodel import predict_commands
from advice.recommend import asif, data
from advice.recommend.plan import (
    Plan,
    display,
    docker_argv,
    env_assignment,
    image_for,
    left_out,
    ordered_keys,
    render_argv,
    render_flag,
    shell_join,
    target_release,
    visible_devices_var,
)
from audit.kb.engine import KnowledgeBase
from audit.kb.flags import parse_argv
from audit.kb.gpus import bandwidth_knee, lookup
from audit.kb.vllm_tables import dest_index

_H100_NAME = "NVIDIA H100 80GB HBM3"  # the seeds' measurement GPU (data/gpus.yaml row)


def _base(server: dict, ctx: dict, profile: dict, status: str) -> dict[str, Any]:
    return {"pid": server.get("pid"), "base_url": server.get("base_url"),
            "model": ctx["flags"].get("model"), "status": status, "workload": profile,
            "layout": None, "version": {"current": ctx["vllm"].get("version"),
                                        "recommended": None, "reason": None, "references": []},
            "replicas": [], "diff": [], "expected": [], "notes": [],
            "self_check": None, "does_not_fit": None, "chat_template": None,
            "explained": [], "cannot_size": None,
            "prediction": {"status": "none", "load": None,
                           "reason": f"no prediction: no command is recommended ({status})"}}


def refused(server: dict, ctx: dict, profile: dict, why: str) -> dict[str, Any]:
    """No command at all: ``status`` "not_applicable" and the reason in ``notes``."""
    out = _base(server, ctx, profile, "not_applicable")
    out["layout"] = "not applicable"
    out["notes"] = [f"No recommendation: {why}."]
    return out


def does_not_fit(server: dict, ctx: dict, profile: dict, misfit: dict) -> dict[str, Any]:
    """The model cannot be served on these GPUs: the numbers say why."""
    out = _base(server, ctx, profile, "does_not_fit")
    out["layout"] = "does not fit"
    out["does_not_fit"] = misfit
    out["notes"] = [f"Does not fit: {misfit['reason']}.", "Options: more or larger GPUs, or "
                    "a smaller model / quantization."]
    return out


def server_result(server: dict, ctx: dict, profile: dict, outcome: Any,
                  kb: KnowledgeBase) -> dict[str, Any]:
    """Full answer from a version-search outcome (advice.recommend.core.Outcome)."""
    plan: Plan = outcome.plan
    out = _base(server, ctx, profile, "ok" if outcome.clean else "no_safe_command")
    out["self_check"] = _self_check(plan, outcome)
    out["version"] = _version(ctx, plan, kb, outcome.explained)
    out["notes"] = [f"Workload: {profile['profile']} ({profile['source']})."]
    if not outcome.clean:
        out["layout"] = "no safe command"
        out["notes"].append("No command the knowledge base knows clears these findings by "
                            "flags or release: " + "; ".join(
                                f"{f.rule_id} ({f.severity}): {f.title}"
                                for f in outcome.unexplained) + ".")
        out["notes"] += plan.notes
        return out
    out["explained"] = list(outcome.explained)
    for item in outcome.explained:
        out["notes"].append(f"Still raised by this command: {item['rule_id']} "
                            f"({item['severity']}, {item['title']}): {item['why']}.")
    out["layout"] = layout(plan)
    out["chat_template"] = plan.template
    out["replicas"] = _replicas(plan)
    out["diff"] = diff(server, ctx, plan, outcome.contexts[0])
    for row in out["diff"]:
        if row["flag"] == "vLLM version":  # one reason for the release, wherever shown
            row["reason"] = out["version"]["reason"]
    out["expected"] = expected(ctx, plan, profile["profile"])
    out["prediction"] = predict_commands(ctx, outcome.contexts[0], len(plan.groups))
    out["notes"] += plan.notes + left_out(plan) + arithmetic_notes(plan, outcome.contexts[0])
    image_note = image_for(plan)[1]
    if image_note:
        out["notes"].append(image_note + ".")
    return out


def layout(plan: Plan) -> str:
    """``"2 x TP=1"``; pipeline and data parallel sizes appended when above 1."""
    text = f"{len(plan.groups)} x TP={plan.tp}"
    for key, name in (("pipeline_parallel_size", "PP"), ("data_parallel_size", "DP")):
        value = plan.values.get(key)
        if isinstance(value, int) and value > 1:
            text += f" x {name}={value}"
    return text


def _self_check(plan: Plan, outcome: Any) -> dict[str, Any]:
    findings = [{"rule_id": f.rule_id, "severity": f.severity, "title": f.title}
                for f in outcome.findings]
    return {"version": plan.version, "clean": outcome.clean,
            "max_severity": findings[0]["severity"] if findings else None,
            "findings": findings, "explained": [e["rule_id"] for e in outcome.explained],
            "unexplained": [f.rule_id for f in outcome.unexplained]}


def _version(ctx: dict, plan: Plan, kb: KnowledgeBase,
             explained: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    current = ctx["vllm"].get("version")
    same = current == plan.version
    clear = ("raises nothing at medium or above that a flag could clear" if explained
             else "raises nothing above medium")
    reason = (f"the running release {clear} with this command" if same
              else f"the newest release the knowledge base knows (verified through "
                   f"{kb.verified_through}) at which this command {clear}")
    if explained:
        reason += "; it still carries " + "; ".join(
            f"{e['rule_id']} ({e['severity']}): {e['why']}" for e in explained)
    return {"current": current, "recommended": plan.version, "reason": reason,
            "references": ["seed:000_ffb301503ad246f2.txt#Version ceiling"]}


def _replicas(plan: Plan) -> list[dict[str, Any]]:
    out = []
    for index, group in enumerate(plan.groups):
        port = asif.replica_port(plan, index)
        indices = [g.get("index") for g in group]
        pinned = len(plan.groups) > 1 or "port" in plan.values
        argv = render_argv(plan, port if pinned else None)
        docker = docker_argv(plan, indices, port)
        devices = ",".join(str(i) for i in indices)
        var = visible_devices_var(plan)
        out.append({"argv": argv, "docker": docker, "gpus": indices,
                    "gpu_uuids": [g.get("uuid") for g in group], "port": port,
                    "env": {var: devices, **plan.env},
                    # Paste-ready lines: JSON flag values quoted for the shell.
                    "command": " ".join(env_assignment(k, v) for k, v in
                                        [(var, devices), *sorted(plan.env.items())]) + " "
                               f"{shell_join(argv)}",
                    "docker_command": shell_join(docker)})
    return out


def _current(key: str, parsed_values: dict, ctx: dict) -> tuple[str, bool]:
    """(display text of the running value, whether it is vLLM's default)."""
    if key in parsed_values:
        return display(parsed_values[key]), False
    version = ctx["vllm"].get("version") or "unknown version"
    value = ctx["flags"].get(key)
    shown = "unset" if value is None else display(value)
    return f"{shown} (vLLM {version} default)", True


def diff(server: dict, ctx: dict, plan: Plan, rec_ctx: dict) -> list[dict[str, Any]]:
    """One row per flag whose recommended value differs from the running one, or that the
    target release cannot take (the command leaves it out; the row says so). The running
    argv is read with the running release's table, the flag named as the target spells it."""
    parsed = parse_argv(server.get("argv") or [], ctx["vllm"].get("table_release")).values
    release = target_release(plan)
    rows = []
    if plan.version != ctx["vllm"].get("version"):
        rows.append({"flag": "vLLM version", "current": str(ctx["vllm"].get("version")),
                     "current_is_default": False, "recommended": str(plan.version),
                     "reason": "the newest release the knowledge base knows at which this "
                               "command raises nothing above medium",
                     "references": ["seed:000_ffb301503ad246f2.txt#Version ceiling"],
                     "extrapolated": None})
    keys = ordered_keys({**{k: None for k in parsed if k != "model"}, **plan.values})
    for key in keys:
        rec = plan.values.get(key)
        cur_text, is_default = _current(key, parsed, ctx)
        dropped = render_flag(key, rec, release)[1]
        if dropped is None and _unchanged(key, rec, parsed, ctx, is_default):
            continue
        row = _row(key, cur_text, is_default, rec, plan, rec_ctx)
        if dropped:
            row["recommended"] = f"(left out: not writable on vLLM {release})"
            row["reason"] = dropped if key not in plan.why else f"{row['reason']}; {dropped}"
        row["flag"] = dest_index(release).get(key, row["flag"])
        rows.append(row)
    return rows


def _unchanged(key: str, rec: Any, parsed: dict, ctx: dict, is_default: bool) -> bool:
    if not is_default and rec is not None and display(parsed[key]) == display(rec):
        return True
    if is_default and rec is None:
        return True
    return is_default and display(ctx["flags"].get(key)) == display(rec)


def _row(key: str, cur_text: str, is_default: bool, rec: Any, plan: Plan,
         rec_ctx: dict) -> dict[str, Any]:
    choice = plan.why.get(key)
    if rec is None:
        default = rec_ctx["flags"].get(key)
        shown = "unset" if default is None else display(default)
        rec_text = f"(remove; vLLM {plan.version} default: {shown})"
    else:
        rec_text = display(rec)
    reason = choice.reason if choice else "kept from the current command"
    if choice and choice.extrapolated:
        reason += f" [extrapolated: {choice.extrapolated}]"
    refs = list(choice.references) if choice else []
    if choice and choice.extrapolated:
        refs.append(data.NOT_MEASURED_REF)
    return {"flag": "--" + key.replace("_", "-"), "current": cur_text,
            "current_is_default": is_default, "recommended": rec_text, "reason": reason,
            "references": list(dict.fromkeys(refs)),
            "extrapolated": choice.extrapolated if choice else None}


def _recipe_matches(name: str, ctx: dict, plan: Plan, profile: str) -> bool:
    recipe = data.recipe(name)
    measured = recipe["measured_on"]
    spec = (plan.values.get("speculative_config") or {}).get("method")
    gpu = ctx["gpu"]
    checks = [ctx["model"].get("family") == measured["family"],
              ctx["model"].get("quantization") == measured["quantization"],
              profile in recipe["workloads"],
              measured.get("speculative") in (None, spec),
              recipe.get("tensor_parallel_size") in (None, plan.tp)]
    if measured.get("unified_memory"):
        checks.append(bool(gpu.get("unified_memory")))
    else:
        checks.append(measured["gpu_label"] == gpu.get("label"))
    return all(checks)


def expected(ctx: dict, plan: Plan, profile: str) -> list[dict[str, Any]]:
    """Seed figures when a measured recipe matches; else bandwidth-scaled figures for the
    same model and quantization, labelled extrapolated; else nothing."""
    for name in ("LIGHT", "PUSH", "GB10-26B-MTP", "GB10-31B-EAGLE3"):
        if _recipe_matches(name, ctx, plan, profile):
            recipe = data.recipe(name)
            return [{**item, "source": recipe["source"], "measured": True,
                     "conditions": f"{item['conditions']} (recipe {name}, vLLM "
                                   f"{recipe['measured_on']['vllm']})"}
                    for item in recipe["expected"]]
    return _scaled(ctx, plan, profile)


def _scaled(ctx: dict, plan: Plan, profile: str) -> list[dict[str, Any]]:
    name = "LIGHT" if plan.tp == 1 else "PUSH" if plan.tp == 2 else None
    bandwidth = ctx["gpu"].get("bandwidth_tbs")
    if name is None or not bandwidth or ctx["gpu"].get("unified_memory"):
        return []
    recipe = data.recipe(name)
    measured = recipe["measured_on"]
    if ctx["model"].get("family") != measured["family"] or \
            ctx["model"].get("quantization") != measured["quantization"]:
        return []
    anchor = lookup(_H100_NAME)["bandwidth_tbs"]
    ratio = bandwidth / anchor
    first = recipe["expected"][0]
    return [{"figure": f"{first['figure']} (extrapolated)", "value": round(first["value"] * ratio),
             "unit": first["unit"], "source": recipe["source"], "measured": False,
             "conditions": f"{first['value']} {first['unit']} measured on H100 SXM5 x "
                           f"{bandwidth}/{anchor} TB/s (decode is HBM-bandwidth-bound); "
                           f"{first['conditions']}"}]


def arithmetic_notes(plan: Plan, rec_ctx: dict) -> list[str]:
    """KV and knee arithmetic from the GPU table and the geometry, for the operator."""
    geo, gpu = rec_ctx["geometry"], rec_ctx["gpu"]
    notes = []
    if geo.get("kv_memory_gib_estimate") is not None:
        util = rec_ctx["flags"].get("gpu_memory_utilization")
        g_kib = (geo.get("kv_bytes_per_token_global") or 0) / 1024
        s_kib = (geo.get("kv_bytes_per_token_sliding") or 0) / 1024
        notes.append(
            f"KV per GPU ≈ {gpu.get('memory_gib')} GiB x {util} - {geo.get('weight_gib')} GiB "
            f"weights / TP {plan.tp} - {geo.get('drafter_gib')} GiB drafter / TP - "
            f"{geo.get('overhead_gib')} GiB activations/CUDA graphs = "
            f"{geo.get('kv_memory_gib_estimate')} GiB; {g_kib:.1f} KiB/token on global layers"
            f" + {s_kib:.1f} KiB/token on sliding layers (capped at window + one chunk) -> "
            f"about {geo.get('kv_capacity_tokens_estimate')} tokens of KV, one request up to "
            f"{geo.get('single_request_max_tokens_estimate')} tokens (estimate; the engine's "
            "startup log is authoritative).")
    bandwidth, knee = gpu.get("bandwidth_tbs"), gpu.get("bandwidth_knee_max_num_seqs")
    anchor = lookup(_H100_NAME)
    if bandwidth and knee and gpu.get("label") not in (anchor["label"],):
        raw = bandwidth_knee(anchor["bandwidth_tbs"]) * bandwidth / anchor["bandwidth_tbs"]
        notes.append(f"Bandwidth knee for {gpu.get('name')}: 64 x {bandwidth}/"
                     f"{anchor['bandwidth_tbs']} TB/s = {raw:.1f} -> {knee} sequences per GPU "
                     "(nearest power of two; audit.kb.gpus).")
    return notes
