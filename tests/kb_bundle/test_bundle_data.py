"""An installed KB bundle's data tables reach the product, not only its rules.

Each test installs (``manage.py kb_update``) a signed bundle of the built-in KB with one data
file edited, and checks that what the product says changes with it: the tables are read
through :func:`audit.kb.paths.load_data` (and the per-bundle memo of the vLLM tables), never
from an import-time copy. A bundle lacking a table fails loudly, naming the file.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from advice.recommend import data as recommend_data
from advice.recommend.plan import Plan, render_argv
from audit.kb import backends, catalogue
from audit.kb.context import build_context
from audit.kb.engine import load_rules
from audit.kb.paths import active_kb_dirs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recommend"))
from rkit import host_report, serve  # noqa: E402

pytestmark = pytest.mark.django_db

QWEN_HERMES = serve("Qwen/Qwen3-8B", "--tool-call-parser", "hermes",
                    "--enable-auto-tool-choice")


def _install(make_bundle, edit: Callable[[dict[str, bytes]], None]) -> None:
    err = io.StringIO()
    try:
        call_command("kb_update", str(make_bundle(edit)), stderr=err, stdout=io.StringIO())
    except SystemExit as exc:
        raise AssertionError(f"kb_update refused the bundle: {err.getvalue()}") from exc
    assert active_kb_dirs().bundle is not None


def _edit_yaml(name: str, change: Callable[[Any], None]) -> Callable[[dict[str, bytes]], None]:
    def edit(files: dict[str, bytes]) -> None:
        document = yaml.safe_load(files[f"data/{name}"])
        change(document)
        files[f"data/{name}"] = yaml.safe_dump(document).encode()
    return edit


def _qwen_context() -> dict[str, Any]:
    report = host_report("NVIDIA H100 80GB HBM3", 1, QWEN_HERMES, version="0.30.0",
                         template=None)
    return build_context(report["servers"][0], report, None)


def test_a_bundle_s_parser_table_changes_the_parser_finding(kb_settings, make_bundle):
    assert _qwen_context()["model"]["parsers"]["mismatch"] == []  # hermes: generic

    _install(make_bundle, _edit_yaml(
        "parsers.yaml", lambda doc: doc["tool_call_parsers"].update(hermes=["llama"])))

    ctx = _qwen_context()
    assert ctx["model"]["parsers"]["mismatch"] == ["--tool-call-parser hermes (fits llama)"]
    fired = {f.rule_id for f in load_rules().evaluate(ctx)}
    assert "mf-parser-family-mismatch" in fired


def test_a_bundle_s_vllm_table_changes_the_recommended_command(kb_settings, make_bundle):
    plan = Plan(model="m", values={"enable_prefix_caching": True}, version="0.33.0")
    assert "--enable-prefix-caching" in render_argv(plan)

    def edit(files: dict[str, bytes]) -> None:
        document = json.loads(files["data/vllm/0.33.0.json"])
        document["options"]["--enable-prefix-caching"]["default"] = True
        files["data/vllm/0.33.0.json"] = json.dumps(document).encode()

    _install(make_bundle, edit)

    assert "--enable-prefix-caching" not in render_argv(plan)  # now that release's default
    report = host_report("NVIDIA H100 80GB HBM3", 1, serve("Qwen/Qwen3-8B"), version="0.33.0",
                         template=None)
    ctx = build_context(report["servers"][0], report, None)
    assert ctx["flags"]["enable_prefix_caching"] is True


@pytest.mark.parametrize("name, change, probe", [
    ("model_catalogue.yaml", lambda doc: doc["model_types"].update(zz_bundle_test="llama"),
     lambda: catalogue.family_of_config({"model_type": "zz_bundle_test"})[0]),
    ("attention_backends.yaml",
     lambda doc: doc["backends"]["FLASH_ATTN"].update(head_size_max=64),
     lambda: backends.problems("FLASH_ATTN", {"head_dims": [128]}, 9.0, None, "0.30.0")),
    ("operating_points.yaml", lambda doc: doc["limits"]["util_cliff"].update(value=0.5),
     lambda: recommend_data.limit("util_cliff")),
])
def test_a_bundle_s_table_replaces_the_built_in_one(kb_settings, make_bundle, name, change,
                                                     probe):
    before = probe()

    _install(make_bundle, _edit_yaml(name, change))

    assert probe() != before


def test_a_bundle_without_a_table_fails_naming_the_file(kb_settings, make_bundle):
    _install(make_bundle, lambda files: files.pop("data/parsers.yaml"))

    with pytest.raises(FileNotFoundError, match="parsers.yaml"):
        catalogue.parsers()


def test_a_bundle_s_fixes_index_and_capability_tables_replace_the_built_in_ones(
        kb_settings, make_bundle):
    from audit.kb import fixes, release_caps
    before = len(fixes.index()["fixes"])

    def edit(files: dict[str, bytes]) -> None:
        index = json.loads(files["data/vllm_fixes.json"])
        index["fixes"] = index["fixes"][:1]
        files["data/vllm_fixes.json"] = json.dumps(index).encode()
        table = json.loads(files["data/vllm/capabilities/0.33.0.json"])
        table["tool_parsers"] = ["zz_bundle_only"]
        files["data/vllm/capabilities/0.33.0.json"] = json.dumps(table).encode()

    _install(make_bundle, edit)

    assert len(fixes.index()["fixes"]) == 1 < before
    assert release_caps.caps("0.33.0")["tool_parsers"] == ["zz_bundle_only"]
