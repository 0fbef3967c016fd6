"""Operating point for Gemma 4 31B / 26B-A4B (seed 000 recipes, 001, 003; R1-R6).

:func:`apply_operating_point` changes a :class:`~advice.recommend.plan.Plan` in place:
layout (replicas x TP), ``--gpu-memory-utilization``, ``--max-model-len`` (KV estimate
minus 5%, never above the model maximum), ``--max-num-seqs`` (bandwidth knee x TP, or a
measured recipe ceiling), ``--max-num-batched-tokens``, ``--kv-cache-dtype``, speculator,
vetted template, parsers and an explicit ``enable_thinking``. Fit is judged with the same
geometry estimate the rules use (audit.kb.geometry through audit.kb.context).
"""

from __future__ import annotations

from typing import Any

from advice.recommend import asif, data
from advice.recommend.plan import Plan
from audit.kb import templates as kb_templates

TEMPLATE_REF = "seed:000_ffb301503ad246f2.txt#Three load-bearing facts"
KNEE_REF = "seed:000_ffb301503ad246f2.txt#Three load-bearing facts"
GUIDE_REF = "seed:000_ffb301503ad246f2.txt#Decision guide — which TP for which workload"
PITFALL_KV = ("seed:000_ffb301503ad246f2.txt#`--max-model-len 262144` will refuse to boot "
              "if KV doesn't fit")
TP_CHOICES = (1, 2, 4, 8)


def vetted_template() -> dict[str, Any]:
    """The vetted row of data/templates.yaml (identity, prefix, suffix, size, revision)."""
    return next(row for row in kb_templates.active_rows() if row["identity"] == "vetted")


def template_fingerprint(row: dict[str, Any], path: str) -> dict[str, Any]:
    """A chat_template report entry matching ``row``. The seed publishes the hash only as
    prefix…suffix + size, so the middle digits are zero-filled (only the self-check uses it)."""
    middle = "0" * (64 - len(row["prefix"]) - len(row["suffix"]))
    return {"source": path, "sha256": row["prefix"] + middle + row["suffix"],
            "size_bytes": int(row["size_bytes"])}


def valid_tps(n_gpus: int, geometry: dict[str, Any]) -> list[int]:
    """TP sizes <= n_gpus that Gemma4Attention accepts (vllm-facts §6.3: heads % TP == 0;
    per layer type kv_heads % TP == 0 or TP % kv_heads == 0)."""
    heads = geometry.get("num_attention_heads")
    kv_sets = [k for k in (geometry.get("kv_heads"), geometry.get("global_kv_heads")) if k]
    found = []
    for tp in TP_CHOICES:
        if tp > n_gpus or (heads and heads % tp):
            continue
        if all(kv % tp == 0 or tp % kv == 0 for kv in kv_sets):
            found.append(tp)
    return found


def groups_for(gpus: list[dict[str, Any]], tp: int) -> list[list[dict[str, Any]]]:
    """Replica GPU groups: ``len(gpus) // tp`` replicas of ``tp`` consecutive GPUs."""
    return [gpus[i * tp:(i + 1) * tp] for i in range(len(gpus) // tp)]


def target_context(profile: str, geometry: dict[str, Any], unified: bool) -> tuple[int, str]:
    """(tokens wanted before the KV cap, reason)."""
    top = int(geometry.get("max_position_embeddings") or 0)
    if unified:
        value, src = data.unified("max_model_len")
        return min(value, top or value), src
    if profile == "chat":
        light = data.recipe("LIGHT")
        return min(light["max_model_len"], top or light["max_model_len"]), light["source"]
    return top, "model maximum (max_position_embeddings, data/models.yaml)"


def mm_traffic(ctx: dict[str, Any]) -> bool:
    """Whether images were served (multimodal cache queries moved) in the window or lifetime."""
    metrics = ctx.get("metrics") or {}
    items = metrics.get("mm_items")
    if items is None:
        items = (metrics.get("lifetime") or {}).get("mm_items")
    return bool(ctx["model"].get("multimodal")) and bool(items) and items > 0


def utilisations(profile: str, ctx: dict[str, Any], unified: bool) -> list[tuple[float, str]]:
    """Utilisation candidates in preference order, each with its source."""
    cliff = data.limit("util_cliff")
    if unified:
        value, src = data.unified("gpu_memory_utilization")
        first = [(value, src)]
    elif profile == "chat":
        light = data.recipe("LIGHT")
        first = [(light["gpu_memory_utilization"], light["source"]),
                 (cliff, data.source("limits", "util_cliff"))]
    else:
        first = [(min(data.recipe("PUSH")["gpu_memory_utilization"], cliff),
                  data.recipe("PUSH")["source"])]
    if mm_traffic(ctx):
        memory = ctx["gpu"].get("memory_gib") or 0
        small = data.ops()["limits"]["util_multimodal_small_card"]
        mm_cap = small["value"] if memory and memory <= small["max_card_gib"] \
            else data.limit("util_multimodal")
        first = [(min(u, mm_cap), data.source("limits", "util_multimodal")) for u, _ in first]
    seen, out = set(), []
    for value, src in first:
        if value not in seen:
            seen.add(value)
            out.append((value, src))
    return out


def batched_tokens(profile: str, ctx: dict[str, Any], unified: bool) -> tuple[int, str, str | None]:
    """(max_num_batched_tokens, source, extrapolated-or-None)."""
    memory = ctx["gpu"].get("memory_gib") or 0
    light, push = data.recipe("LIGHT"), data.recipe("PUSH")
    if unified:
        return light["max_num_batched_tokens"], light["source"], \
            "the GB10 runs did not state max_num_batched_tokens; LIGHT's 8192 is assumed"
    if memory >= 70:
        if profile == "chat":
            return light["max_num_batched_tokens"], light["source"], None
        return push["max_num_batched_tokens"], push["source"], None
    return 4096, light["source"], (
        "card under 70 GiB: half of LIGHT's 8192 to keep activation memory for KV; "
        "kept >= 2496 so one Gemma 4 image fits a prefill chunk "
        "(rule up-gemma4-mm-batched-tokens-below-image)")


def speculator_options(ctx: dict[str, Any]) -> list[dict[str, Any] | None]:
    """Speculative configs to try, best first (R5), ending with None (no speculator).

    31B: EAGLE3 (RedHatAI speculator, k=3) on every target the seeds ran; 26B-A4B: MTP
    only on NVFP4 (measured ~58%, seed 003). Never parallel_drafting, never DFlash/DSpark.
    """
    model = ctx["model"]
    quant = model.get("quantization")
    options: list[dict[str, Any] | None] = []
    for method, entry in data.speculators(model.get("family")).items():
        if quant in entry["targets"]:
            options.append({"method": method, "config": dict(entry["config"]),
                            "source": entry["source"]})
    return options + [None]


def _probe(plan: Plan, report: dict, server: dict) -> dict[str, Any]:
    """Geometry + GPU of the first replica as if the plan ran."""
    ctx = asif.contexts(plan, report, server)[0]
    return {"geometry": ctx["geometry"], "gpu": ctx["gpu"]}


def tp_preference(tps: list[int], profile: str) -> list[int]:
    """TP sizes in the order the seed decision guide prefers them: chat -> one replica per
    GPU (TP=1 first); long context, mixed traffic, single-user latency -> TP=2 first (PUSH),
    then larger (unmeasured), then TP=1."""
    if profile == "chat":
        return sorted(tps)
    return [t for t in tps if t == 2] + sorted(t for t in tps if t > 2) + \
        [t for t in tps if t < 2]


def fit_layout(plan: Plan, ctx: dict, report: dict, server: dict, gpus: list[dict],
               profile: str, want: int) -> dict[str, Any]:
    """Pick (TP, util) and return {tp, util, util_source, probe, single, fits_target, fits}.

    TPs are tried in :func:`tp_preference` order, utilisations in :func:`utilisations`
    order; the first whose single-request KV estimate (minus 5%) holds ``want`` wins, else
    the one with the most KV. ``fits`` means a short prompt (4K) fits at all.
    """
    unified = bool(ctx["gpu"].get("unified_memory"))
    margin = 1 - data.limit("kv_margin")
    best: dict[str, Any] | None = None
    for tp in tp_preference(valid_tps(len(gpus), ctx["geometry"]), profile):
        for util, src in utilisations(profile, ctx, unified):
            trial = plan.clone()
            trial.values["tensor_parallel_size"] = tp
            trial.values["gpu_memory_utilization"] = util
            trial.groups = groups_for(gpus, tp)
            probe = _probe(trial, report, server)
            single = probe["geometry"].get("single_request_max_tokens_estimate") or 0
            found = {"tp": tp, "util": util, "util_source": src, "probe": probe,
                     "single": single, "fits_target": single * margin >= want,
                     "fits": single * margin >= data.workload_value("short_prompt_tokens")}
            if found["fits_target"]:
                return found
            if best is None or single >= best["single"]:
                best = found
    return best or {"tp": 1, "util": None, "util_source": None, "probe": None,
                    "single": 0, "fits_target": False, "fits": False}


def set_static_flags(plan: Plan, ctx: dict[str, Any], profile: str,
                     spec: dict[str, Any] | None) -> None:
    """Flags that do not depend on the layout: speculator, KV dtype, template, parsers,
    explicit enable_thinking, batched tokens, attention backend, parallel layout flags."""
    unified = bool(ctx["gpu"].get("unified_memory"))
    _set_speculator(plan, ctx, spec)
    _set_kv_dtype(plan, ctx, spec)
    _set_template(plan, ctx)
    _set_parsers(plan, ctx)
    tokens, src, extra = batched_tokens(profile, ctx, unified)
    plan.set("max_num_batched_tokens", tokens,
             f"prefill chunk per step ({profile} profile; recipe value)", [src], extra)
    backend = plan.values.get("attention_backend")
    if backend is not None and str(backend).upper() != "TRITON_ATTN":
        plan.drop("attention_backend", "Gemma 4's heterogeneous head dims need TRITON_ATTN, "
                  "which vLLM picks by itself; another backend is rejected at start",
                  [TEMPLATE_REF])
    for key in ("pipeline_parallel_size", "data_parallel_size"):
        if plan.values.get(key) not in (None, 1):
            plan.drop(key, "the layout is replicas x tensor parallel (seed decision guide); "
                      "each replica is its own server", [GUIDE_REF])
    light = data.recipe("LIGHT")
    plan.set("scheduler_reserve_full_isl", False, "both seed recipes run without reserving "
             "the full input length in the scheduler", [light["source"]])


def _set_speculator(plan: Plan, ctx: dict[str, Any], spec: dict[str, Any] | None) -> None:
    current = ctx["model"]["speculative"]
    if spec is None:
        if current.get("enabled"):
            plan.drop("speculative_config", "no speculator the seeds measured as good exists "
                      f"for a {ctx['model'].get('quantization')} {ctx['model'].get('family')} "
                      "target at a clean vLLM release", ["seed:000_ffb301503ad246f2.txt#MTP "
                      "(`gemma-4-31B-it-assistant`) — 0% acceptance on quantized targets"])
        return
    refs = [spec["source"]]
    reason = f"{spec['method'].upper()} speculator for a {ctx['model'].get('quantization')} target"
    if current.get("method") == "mtp" and ctx["model"].get("is_int4"):
        zero = data.measurement("mtp_int4_zero_acceptance")
        reason += f"; replaces MTP: {zero['text']}"
        refs.append(zero["source"])
    plan.set("speculative_config", dict(spec["config"]), reason, refs,
             f"num_speculative_tokens {spec['config']['num_speculative_tokens']}: "
             + data.not_measured("num_speculative_tokens"))


def _set_kv_dtype(plan: Plan, ctx: dict[str, Any], spec: dict[str, Any] | None) -> None:
    light = data.recipe("LIGHT")
    if ctx["gpu"].get("fp8") and not (spec and spec["method"] == "mtp"):
        plan.set("kv_cache_dtype", "fp8", f"{ctx['gpu'].get('name')} has native FP8; fp8 KV "
                 "halves KV bytes per token (both seed recipes)", [light["source"]])
    elif plan.values.get("kv_cache_dtype") not in (None, "auto"):
        why = ("the MTP drafter path mis-handles fp8 KV scales (rule up-gemma4-mtp-fp8-kv-scales)"
               if spec and spec["method"] == "mtp" else "this GPU has no native FP8")
        plan.drop("kv_cache_dtype", why, [light["source"]])


def _set_template(plan: Plan, ctx: dict[str, Any]) -> None:
    row = vetted_template()
    if ctx["template"].get("identity") == "vetted" and plan.values.get("chat_template"):
        return  # plan.template already holds the served (vetted) fingerprint
    path = f"/templates/gemma-4-chat-template-{row['revision']}.jinja"
    extra = None
    if ctx["model"].get("family") != "gemma4-31b":
        extra = "the vetted template was hashed from google/gemma-4-31B-it; assumed to be " \
                "the one this Gemma 4 size ships"
    plan.set("chat_template", path,
             f"vetted canonical template pinned by revision {row['revision']} (sha256 "
             f"{row['prefix']}…{row['suffix']}, {row['size_bytes']} bytes): fetch "
             f"chat_template.jinja of google/gemma-4-31B-it at revision {row['revision']}, "
             "check the hash, mount it read-only", [row["source"]], extra)
    plan.template = template_fingerprint(row, path)


def _set_parsers(plan: Plan, ctx: dict[str, Any]) -> None:
    light = data.recipe("LIGHT")["source"]
    plan.set("reasoning_parser", "gemma4", "Gemma 4 reasoning parser (both recipes)", [light])
    plan.set("tool_call_parser", "gemma4", "Gemma 4 tool-call parser (both recipes)", [light])
    plan.set("enable_auto_tool_choice", True, "auto tool choice with the gemma4 parser "
             "(both recipes; forced tool_choice stays unvalidated, #50477)", [light])
    kwargs = dict(plan.values.get("default_chat_template_kwargs") or {})
    if "_raw" in kwargs:
        kwargs = {}
    thinking = bool(kwargs.get("enable_thinking", False))
    kwargs["enable_thinking"] = thinking
    plan.set("default_chat_template_kwargs", kwargs,
             f"enable_thinking set explicitly ({str(thinking).lower()}): the parser and the "
             "template disagree on its default, which leaks <turn|> into streamed output",
             ["https://github.com/vllm-project/vllm/issues/49955",
              "seed:000_ffb301503ad246f2.txt#A trailing <turn|> can leak into streamed output"])


def apply_operating_point(plan: Plan, ctx: dict[str, Any], profile: str,
                          gpus: list[dict[str, Any]], report: dict, server: dict,
                          spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """Fill ``plan`` with the Gemma 4 operating point; return None, or a "does not fit"
    dict ``{"reason", "numbers"}`` when no layout leaves room for a short prompt."""
    set_static_flags(plan, ctx, profile, spec)
    unified = bool(ctx["gpu"].get("unified_memory"))
    want, want_src = target_context(profile, ctx["geometry"], unified)
    fit = fit_layout(plan, ctx, report, server, gpus, profile, want)
    if fit["probe"] is None or not fit["fits"]:
        return does_not_fit(ctx, gpus, fit)
    _set_layout(plan, fit, gpus, profile)
    _set_context(plan, ctx, fit, want, want_src)
    _set_max_num_seqs(plan, ctx, fit, spec, unified)
    return None


def does_not_fit(ctx: dict[str, Any], gpus: list[dict[str, Any]],
                 fit: dict[str, Any]) -> dict[str, Any]:
    """The numbers behind "does not fit" (GiB per GPU at the best layout tried)."""
    geo = (fit.get("probe") or {}).get("geometry") or ctx["geometry"]
    memory = ctx["gpu"].get("memory_gib")
    util = fit.get("util") or data.limit("util_cliff")
    tp = fit.get("tp") or 1
    numbers = {"gpus": len(gpus), "gpu": ctx["gpu"].get("name"), "gpu_memory_gib": memory,
               "tensor_parallel_size": tp, "gpu_memory_utilization": util,
               "budget_gib": round(memory * util, 2) if memory else None,
               "weights_gib_per_gpu": round(geo["weight_gib"] / tp, 2)
               if geo.get("weight_gib") else None,
               "drafter_gib_per_gpu": round((geo.get("drafter_gib") or 0) / tp, 2),
               "overhead_gib": geo.get("overhead_gib"),
               "kv_gib_left": geo.get("kv_memory_gib_estimate"),
               "longest_request_tokens": fit.get("single", 0)}
    reason = (f"{ctx['model'].get('id')} ({ctx['model'].get('quantization')}) does not fit on "
              f"{len(gpus)} x {numbers['gpu']} ({memory} GiB): at TP={tp} and "
              f"gpu_memory_utilization {util} the budget is {numbers['budget_gib']} GiB per GPU, "
              f"weights take {numbers['weights_gib_per_gpu']} GiB, the drafter "
              f"{numbers['drafter_gib_per_gpu']} GiB and activations/CUDA graphs about "
              f"{numbers['overhead_gib']} GiB, leaving {numbers['kv_gib_left']} GiB of KV "
              f"(longest request {numbers['longest_request_tokens']} tokens, need >= "
              f"{data.workload_value('short_prompt_tokens')})")
    return {"reason": reason, "numbers": numbers}


def _set_layout(plan: Plan, fit: dict[str, Any], gpus: list[dict], profile: str) -> None:
    tp = fit["tp"]
    plan.groups = groups_for(gpus, tp)
    extra = f"TP={tp}: " + data.not_measured("tp4") if tp > 2 else None
    plan.set("tensor_parallel_size", tp,
             f"{len(plan.groups)} replica(s) x TP={tp} for the {profile} profile on "
             f"{len(gpus)} GPU(s) (seed decision guide: one replica per GPU for short chat, "
             "TP=2 for long context, mixed traffic and single-user latency)", [GUIDE_REF], extra)
    idle = len(gpus) - tp * len(plan.groups)
    if idle:
        plan.notes.append(f"{idle} GPU(s) stay idle: {len(gpus)} is not a multiple of TP={tp}.")
    plan.set("gpu_memory_utilization", fit["util"],
             f"{fit['util']} ({profile} profile; never above the 0.95 capture cliff, "
             "0.92 or less with image traffic)", [fit["util_source"],
                                                 data.source("limits", "util_cliff")])


def _set_context(plan: Plan, ctx: dict[str, Any], fit: dict[str, Any], want: int,
                 want_src: str) -> None:
    """max_model_len = min(target, KV single-request figure x 0.95), rounded down."""
    margin, step = data.limit("kv_margin"), int(data.limit("max_model_len_step"))
    single, basis = fit["single"], "geometry estimate (audit.kb.geometry)"
    engine = _engine_single_request(ctx, plan)
    if engine is not None and engine < single:
        single, basis = engine, "engine's cache_config_info (kv_cache_max_concurrency)"
    capped = int(single * (1 - margin)) // step * step
    value = min(want, capped)
    top = ctx["geometry"].get("max_position_embeddings")
    value = min(value, top) if top else value
    why = (f"{value} tokens: target {want}; one request can hold about {single} tokens "
           f"({basis}) at TP={fit['tp']}, minus {int(margin * 100)}% = {capped}")
    extra = data.not_measured("real_text_long_context") if value > 2 * 16384 else None
    capacity = fit["probe"]["geometry"].get("kv_capacity_tokens_estimate")
    if fit["tp"] == 1 and capacity and value > capacity:
        # The seeds show TP=1 cannot serve documents past its KV size (tp1_long_doc_limit):
        # the command never asks for more than its own note says TP=1 can hold.
        limit = data.measurement("tp1_long_doc_limit")
        value = max(step, int(capacity) // step * step)
        why += f"; held at {value}, the {capacity}-token KV size at TP=1"
        extra = data.not_measured("real_text_long_context") if value > 2 * 16384 else None
        plan.notes.append(f"--max-model-len {value}: TP=1 holds about {capacity} tokens of KV "
                          f"cache; longer documents need TP=2 ({limit['text']}, "
                          f"{limit['source']}).")
    plan.set("max_model_len", value, why, [want_src, PITFALL_KV], extra)


def _engine_single_request(ctx: dict[str, Any], plan: Plan) -> int | None:
    """One request's capacity from cache_config_info, only when the KV-relevant settings of
    the plan equal the running ones (otherwise the engine's figure describes another setup)."""
    metrics, flags = ctx.get("metrics") or {}, ctx.get("flags") or {}
    conc, length = metrics.get("kv_max_concurrency"), flags.get("max_model_len")
    same = all(plan.values.get(k) == flags.get(k) for k in (
        "tensor_parallel_size", "gpu_memory_utilization", "kv_cache_dtype",
        "max_num_batched_tokens"))
    if not same or not conc or not isinstance(length, int):
        return None
    return int(conc * length)


def _set_max_num_seqs(plan: Plan, ctx: dict[str, Any], fit: dict[str, Any],
                      spec: dict[str, Any] | None, unified: bool) -> None:
    gpu = fit["probe"]["gpu"]
    knee = gpu.get("bandwidth_knee_max_num_seqs")
    gb10 = data.recipe("GB10-26B-MTP")
    measured = gb10["measured_on"]
    if unified and ctx["model"].get("family") == measured["family"] and \
            ctx["model"].get("quantization") == measured["quantization"] and \
            spec is not None and spec["method"] == measured["speculative"]:
        plan.set("max_num_seqs", gb10["max_num_seqs"], "measured ceiling of this recipe on "
                 "unified memory: c128 was the last healthy point (1380 tok/s), c256 "
                 "collapsed (9/1000 completed)", [gb10["source"]])
        return
    if knee is None:
        plan.notes.append(f"No bandwidth figure for {gpu.get('name')}: --max-num-seqs left "
                          "as it is (the knee cannot be computed).")
        return
    value = knee * fit["tp"]
    reason = (f"HBM-bandwidth knee {knee} per {gpu.get('name')} x TP={fit['tp']}: past it "
              "decode is bandwidth-bound and extra sequences only inflate TPOT/TTFT")
    refs = [KNEE_REF]
    if unified:
        ceiling, src = data.unified("max_num_seqs_ceiling")
        value = min(value, ceiling)
        refs.append(src)
    label = str(gpu.get("label") or "")
    extra = None if ("H100 SXM" in label or "H200" in label) and fit["tp"] <= 2 else \
        f"knee scaled by bandwidth from the H100 measurement ({gpu.get('bandwidth_tbs')} TB/s)"
    plan.set("max_num_seqs", value, reason, refs, extra)
