"""Hosts built from the seed recipes (``demo/data/seeds``), with the workloads they measured.

* seed 000 (Gemma 4 31B operating-point reference, 2x H100 SXM5 80GB, vLLM 0.20.0):
  LIGHT = 2 replicas TP=1, 408 output tok/s per H100, TPOT mean 141 ms at concurrency
  64-80, EAGLE3 acceptance ~43% on random prompts, KV ~85K tokens; PUSH = TP=2,
  745 tok/s, ~78 ms TPOT, KV 244K tokens, "maximum concurrency 6.11x" at 262144.
* seed 001 (31B NVFP4 + EAGLE3, concurrency 1): decode 14.78 tok/s, TPOT median 68.1 ms,
  acceptance ~47% (per position ~0.70/0.47/0.26, mean length ~2.4), 108.2 GB used; its
  GPU is not named, so it is treated as the 121 GB unified-memory GB10 class.
* seed 003 (26B-A4B NVFP4 + MTP on GB10, ctx 65536): c128 last healthy point, 1380 tok/s,
  114.4 GB; c256 collapse, TTFT median 13.3 s, TPOT median 252 ms, 512 of 1000 requests
  timed out, ~290 tok/s in bursts, MTP acceptance ~58% (0.77/0.57/0.41), 118.3 GB.

Figures the seeds do not give (TTFT of healthy points, prompt/output lengths of chat
traffic, GPU power) are assumptions, marked ``assumed`` where they are set.
"""

from __future__ import annotations

from demo.specs import (
    GB10_BYTES,
    GB10_NAME,
    H100_BYTES,
    H100_NAME,
    Container,
    GpuSpec,
    HostSpec,
    ServerSpec,
    spec_config,
    stand_in_template,
)
from demo.traffic import Workload

MODEL_AWQ = "cyankiwi/gemma-4-31B-it-AWQ-4bit"
EAGLE3 = spec_config(3, "eagle3", "RedHatAI/gemma-4-31B-it-speculator.eagle3")
MTP = spec_config(3, "mtp", "google/gemma-4-26B-A4B-it-assistant")
TEMPLATE_PATH = "/path/to/google-31b-chat-template.jinja"
#: Current head of the cyankiwi AWQ repo is 6f1b616c (seed 000); the rest is synthetic.
CYANKIWI_COMMIT = "6f1b616c" + "0" * 32
H100 = GpuSpec(H100_NAME, H100_BYTES, "9.0", 700.0)
GB10 = GpuSpec(GB10_NAME, GB10_BYTES, "12.1", None, unified=True)
#: Nightly images report a dev version; the exact one is not in the seeds (assumed).
NIGHTLY = "0.23.1.dev0+nightly"

# seed 000 LIGHT: 408 tok/s/H100, TPOT 141 ms, 4K in / 512 out, EAGLE3 ~43% on random.
LIGHT_LOAD = Workload(gen_tps=408, prompt_len=4096, gen_len=512, ttft_s=2.5, tpot_s=0.141,
                      running=58, waiting=8, kv_usage=0.88,
                      per_position=(0.62, 0.43, 0.24), prefix_hit_rate=0.05,
                      source="seed 000 LIGHT (ttft assumed)")
# seed 000 PUSH short context: 745 tok/s, ~78 ms TPOT.
PUSH_LOAD = LIGHT_LOAD.with_changes(gen_tps=745, tpot_s=0.078, running=58, waiting=0,
                                    kv_usage=0.42, source="seed 000 PUSH (ttft assumed)")
# #50158: TP ranks build different drafters, ~0.45 accepted tokens per draft.
COLLAPSED_EAGLE = (0.30, 0.11, 0.04)
SEED001_LOAD = Workload(gen_tps=14.78, prompt_len=220, gen_len=234, ttft_s=0.4, tpot_s=0.0681,
                        running=1, kv_usage=0.03, per_position=(0.70, 0.47, 0.26),
                        prefix_hit_rate=0.1, source="seed 001 (ttft, lengths assumed)")
C128_LOAD = Workload(gen_tps=1380, prompt_len=220, gen_len=250, ttft_s=1.5, tpot_s=0.093,
                     running=128, kv_usage=0.82, per_position=(0.77, 0.57, 0.41),
                     prefix_hit_rate=0.1, source="seed 003 c128 (ttft, kv assumed)")
C256_COLLAPSE = Workload(gen_tps=145, prompt_len=220, gen_len=250, ttft_s=13.35,
                         tpot_s=0.2521, running=150, waiting=106, kv_usage=0.99,
                         per_position=(0.77, 0.57, 0.41), abort_fraction=0.98,
                         preemptions_per_s=0.5, queue_s=11.0, prefix_hit_rate=0.1,
                         source="seed 003 c256 collapse")
# The c256 host before its load ramps up: half the healthy c128 point (assumed).
C256_BEFORE = C128_LOAD.with_changes(gen_tps=700, running=64, kv_usage=0.55,
                                     source="seed 003 recipe at c64 (assumed)")


def _light_argv(port: int | None = None, tp: int = 1) -> tuple[str, ...]:
    light = tp == 1
    argv = ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", MODEL_AWQ,
            "--tensor-parallel-size", str(tp),
            "--max-model-len", "32768" if light else "262144",
            "--gpu-memory-utilization", "0.85" if light else "0.94",
            "--max-num-seqs", "64" if light else "256",
            "--max-num-batched-tokens", "8192" if light else "16384",
            "--kv-cache-dtype", "fp8", "--chat-template", TEMPLATE_PATH,
            "--trust-request-chat-template", "--enable-auto-tool-choice",
            "--reasoning-parser", "gemma4", "--tool-call-parser", "gemma4",
            "--speculative-config", EAGLE3, "--no-scheduler-reserve-full-isl"]
    return tuple(argv + (["--port", str(port)] if port is not None else []))


def _gemma_server(key: str, argv: tuple[str, ...], version: str, load: Workload, *,
                  tp: int = 1, gpus: tuple[int, ...] = (0,), port: int = 8000,
                  **extra) -> ServerSpec:
    long = "262144" in argv
    cache = {"cache_dtype": "fp8", "gpu_memory_utilization": "0.94" if long else "0.85",
             "kv_cache_size_tokens": "244000" if long else "85000",
             "num_gpu_blocks": "15250" if long else "5312",
             "kv_cache_max_concurrency": "6.11" if long else "2.59"}
    template = stand_in_template("google/gemma-4-31B-it chat template 68abe480 (vetted)",
                                 18683)
    env = (("PATH", "/opt/vllm/bin:/usr/bin:/bin"), ("HOME", "/home/ml"),
           ("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in gpus)))
    base = ServerSpec(key=key, argv=argv, version=version, model_id=MODEL_AWQ, root=MODEL_AWQ,
                      workload=load, port=port, max_model_len=262144 if long else 32768,
                      tp=tp, env=env, cwd="/home/ml", files=((TEMPLATE_PATH, template),),
                      gpus=gpus, mem_fraction=0.94 if long else 0.85,
                      cache=tuple(cache.items()))
    return base.changed(**extra) if extra else base


def light_host(hostname: str = "h100-light-01") -> HostSpec:
    """seed 000 LIGHT: two TP=1 replicas on ports 8000/8001, one per H100."""
    servers = tuple(_gemma_server(f"replica-{i}", _light_argv(8000 + i), "0.25.1", LIGHT_LOAD,
                                  gpus=(i,), port=8000 + i) for i in range(2))
    return HostSpec(hostname, (H100, H100), servers, role="seed 000 LIGHT (2x TP=1)")


def push_host(hostname: str = "h100-push-01", version: str = "0.25.1",
              docker: bool = False, probed: bool = False) -> HostSpec:
    """seed 000 PUSH: one TP=2 server over both H100s (optionally in a container)."""
    server = _gemma_server("main", _light_argv(tp=2), version, PUSH_LOAD, tp=2, gpus=(0, 1))
    if probed:
        # Issue 17: this server answers a forced tool_choice with prose (#50477) and its
        # operator turned live probes on, so the advisory shows as confirmed on it.
        server = server.changed(faults=("tool_choice_prose",))
    if docker:
        server = as_container(server, f"vllm/vllm-openai:v{version}", hostname)
    return HostSpec(hostname, (H100, H100), (server,), role="seed 000 PUSH (TP=2)",
                    probes=("forced_tool_choice", "stream_control_tokens") if probed else ())


def as_container(server: ServerSpec, image: str, name: str) -> ServerSpec:
    """Run ``server`` as the ``vllm serve`` entrypoint of a Docker ``image``."""
    args = server.argv[3:]
    return server.changed(
        argv=("/usr/bin/python3", "/usr/local/bin/vllm", "serve", *args),
        container=Container(image, ((server.port, server.port),), name=f"{name}-{image}"),
        prefix="/usr/local", site="lib/python3.12/dist-packages", cwd="/vllm-workspace",
        env=(("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/root")),
        files=tuple(server.files))


def single_light(hostname: str, role: str, version: str = "0.25.1",
                 installed: str | None = None) -> HostSpec:
    """One LIGHT replica (TP=1 on GPU 0) on a 2x H100 box."""
    server = _gemma_server("main", _light_argv(), version, LIGHT_LOAD, installed=installed)
    return HostSpec(hostname, (H100, H100), (server,), role=role)


def tp_change_host(hostname: str = "h100-spec-04") -> HostSpec:
    """31B AWQ + EAGLE3 at TP=1; the timeline restarts it at TP=2 (see :func:`tp2_server`)."""
    return single_light(hostname, "EAGLE3 TP=1 -> TP=2 (acceptance collapse, #50158)")


def tp2_server(server: ServerSpec) -> ServerSpec:
    """The same server restarted with ``--tensor-parallel-size 2`` only, acceptance collapsed."""
    argv = list(server.argv)
    argv[argv.index("--tensor-parallel-size") + 1] = "2"
    load = LIGHT_LOAD.with_changes(gen_tps=520, tpot_s=0.11, per_position=COLLAPSED_EAGLE,
                                   source="#50158 collapse (~0.45 accepted per draft)")
    env = tuple((k, "0,1" if k == "CUDA_VISIBLE_DEVICES" else v) for k, v in server.env)
    return server.changed(argv=tuple(argv), tp=2, gpus=(0, 1), workload=load, env=env)


def frozen_template_host(hostname: str = "h100-awq-07") -> HostSpec:
    """cyankiwi AWQ served with the template bundled in its HF snapshot (no --chat-template)."""
    argv = tuple(a for a in _light_argv() if a not in ("--chat-template", TEMPLATE_PATH))
    template = stand_in_template(
        "cyankiwi/gemma-4-31B-it-AWQ-4bit bundled chat_template.jinja (frozen 2026-04-30, "
        "sha256 94899c0f...25bff413)", 16934)
    files = (("chat_template.jinja", template), ("config.json", "{}"))
    server = _gemma_server("main", argv, "0.25.1", LIGHT_LOAD, files=(),
                           hf=(("/home/ml/.cache/huggingface/hub", MODEL_AWQ, CYANKIWI_COMMIT,
                                files),))
    return HostSpec(hostname, (H100, H100), (server,),
                    role="cyankiwi bundled (frozen) chat template")


def seed001_host(hostname: str = "gb10-spark-01") -> HostSpec:
    """seed 001: ``docker run ... vllm/vllm-openai:cu130-nightly`` NVFP4 + EAGLE3, conc 1."""
    model = "nvidia/Gemma-4-31B-IT-NVFP4"
    args = (model, "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "65536",  # noqa: S104 - the seed's argv
            "--gpu-memory-utilization", "0.85", "--max-num-seqs", "1", "--speculative-config",
            spec_config(3, "eagle3", "RedHatAI/gemma-4-31B-it-speculator.eagle3"))
    server = ServerSpec(
        key="main", argv=("/usr/bin/python3", "/usr/local/bin/vllm", "serve", *args),
        version=NIGHTLY, model_id=model, root=model, workload=SEED001_LOAD,
        max_model_len=65536, prefix="/usr/local", site="lib/python3.12/dist-packages",
        cwd="/vllm-workspace", env=(("PATH", "/usr/local/bin:/usr/bin"), ("HOME", "/root"),
                                    ("HF_TOKEN", "hf_simulatedTokenNotReal000000")),
        container=Container("vllm/vllm-openai:cu130-nightly", ((8000, 8000),), hostname),
        hf=(("/root/.cache/huggingface/hub", model, "a" * 40,
             (("chat_template.jinja", stand_in_template(f"{model} chat template", 16934)),)),),
        mem_fraction=108.16e9 / GB10_BYTES)
    return HostSpec(hostname, (GB10,), (server,), role="seed 001 31B NVFP4 + EAGLE3, conc 1")


def seed003_host(hostname: str, max_num_seqs: int, load: Workload, used_gb: float) -> HostSpec:
    """seed 003 recipe on GB10 (``nightly-aarch64`` image; server argv reconstructed from the
    bench script's arguments: ctx 65536, util 0.85, max_num_seqs = the run's concurrency)."""
    model = "nvidia/Gemma-4-26B-A4B-NVFP4"
    args = (model, "--max-model-len", "65536", "--gpu-memory-utilization", "0.85",
            "--max-num-seqs", str(max_num_seqs), "--speculative-config", MTP)
    server = ServerSpec(
        key="main", argv=("/usr/bin/python3", "/usr/local/bin/vllm", "serve", *args),
        version=NIGHTLY, model_id=model, root=model, workload=load, max_model_len=65536,
        prefix="/usr/local", site="lib/python3.12/dist-packages", cwd="/vllm-workspace",
        env=(("PATH", "/usr/local/bin:/usr/bin"), ("HOME", "/root")),
        container=Container("vllm/vllm-openai:nightly-aarch64", ((8000, 8000),), hostname),
        mem_fraction=used_gb * 1e9 / GB10_BYTES)
    return HostSpec(hostname, (GB10,), (server,),
                    role=f"seed 003 26B-A4B NVFP4 + MTP at c{max_num_seqs}")


def seed_hosts() -> list[HostSpec]:
    """Every seed-recipe host of the demo fleet, in a stable order."""
    return [
        light_host("h100-light-01"),
        push_host("h100-push-01", probed=True),
        push_host("h100-push-02", docker=True),
        single_light("h100-chat-03", "pending upgrade (0.28.0 installed, 0.25.1 running)",
                     installed="0.28.0"),
        tp_change_host("h100-spec-04"),
        single_light("h100-chat-05", "restarts without a config change"),
        single_light("h100-batch-06", "goes silent"),
        frozen_template_host("h100-awq-07"),
        seed001_host("gb10-spark-01"),
        seed003_host("gb10-spark-02", 128, C128_LOAD, 114.4),
        seed003_host("gb10-spark-03", 256, C256_BEFORE, 110.6),
        single_light("h100-upgrade-08", "upgrade to 0.27.1 installed; fails to start "
                     "(crash loop)", installed="0.27.1"),
    ]
