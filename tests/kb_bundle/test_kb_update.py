"""``manage.py kb_update``: installs a signed bundle, refuses a bad one and changes nothing."""

from __future__ import annotations

import http.server
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command

from audit import evaluation
from audit.kb.paths import BUILTIN_RULES_DIR, active_kb_dirs, kb_data_file
from audit.kb_store import active_kb
from audit.models import Finding, KnowledgeBaseInstall
from tests.conftest import iso

pytestmark = pytest.mark.django_db

EXTRA_RULE = b"""
rules:
  - id: bundle-test-every-vllm-server
    title: "Every vLLM server (rule shipped only in the test bundle)"
    kind: pitfall
    severity: low
    cadence: config
    condition: vllm.version != null
    evidence:
      version: vllm.version
    message: "vLLM {version} runs here."
    remediation: "Nothing to do; this rule proves a bundle reached evaluation."
    references: ["https://docs.vllm.ai/en/latest/"]
    last_verified: 2026-11-30
"""

BAD_RULE = EXTRA_RULE.replace(b"cadence: config", b"cadence: config\n    colour: blue")


def _update(source) -> tuple[int, str]:
    """Run kb_update; (exit code, stderr)."""
    import io

    err = io.StringIO()
    try:
        call_command("kb_update", str(source), stderr=err, stdout=io.StringIO())
    except SystemExit as exc:
        return int(exc.code), err.getvalue()
    return 0, err.getvalue()


def _add_rule(body: bytes):
    def edit(files):
        files["rules/zz_bundle_test.yaml"] = body
    return edit


def _unchanged():
    assert not KnowledgeBaseInstall.objects.exists()
    assert active_kb_dirs().bundle is None
    assert active_kb().builtin
    assert active_kb_dirs().rules == BUILTIN_RULES_DIR


def test_kb_update_installs_a_signed_bundle_and_the_readers_follow_it(kb_settings, make_bundle):
    code, err = _update(make_bundle(_add_rule(EXTRA_RULE)))

    assert code == 0, err
    active = active_kb()
    assert not active.builtin and active.verified_through == "0.30.0"
    row = KnowledgeBaseInstall.objects.get()
    assert active.version == row.version and active.content_hash == row.content_hash
    dirs = active_kb_dirs()
    assert dirs.bundle == Path(row.path).resolve()
    assert (dirs.rules / "zz_bundle_test.yaml").is_file()
    assert kb_data_file("gpus.yaml").parent == dirs.data != BUILTIN_RULES_DIR.parent


def test_a_tampered_bundle_is_refused_and_nothing_changes(kb_settings, make_bundle):
    path = make_bundle()
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))

    code, err = _update(path)

    assert code == 1 and "refused" in err
    _unchanged()


def test_a_bundle_with_an_invalid_rule_is_refused_with_the_rule_named(kb_settings, make_bundle):
    code, err = _update(make_bundle(_add_rule(BAD_RULE), validate=False))

    assert code == 1
    assert "bad rule" in err and "zz_bundle_test.yaml" in err and "colour" in err
    _unchanged()
    assert not list(Path(kb_settings.AUDIT_KB_DIR).glob(".staging-*"))


def test_an_older_bundle_than_the_active_one_is_refused(kb_settings, make_bundle):
    older = make_bundle(_add_rule(EXTRA_RULE), days=1)
    newer = make_bundle(_add_rule(EXTRA_RULE.replace(b"severity: low", b"severity: medium")),
                        days=2)
    assert _update(newer)[0] == 0
    before = active_kb()

    code, err = _update(older)

    assert code == 1 and "not newer than the active" in err
    assert active_kb() == before
    assert KnowledgeBaseInstall.objects.count() == 1


def test_a_bundle_older_than_the_built_in_knowledge_is_refused(kb_settings, make_bundle):
    code, err = _update(make_bundle(_add_rule(EXTRA_RULE), days=-400))

    assert code == 1 and "not newer" in err
    _unchanged()


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def file_server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving tmp_path; yields its base URL."""
    handler = lambda *a, **kw: _Files(*a, directory=str(tmp_path), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_kb_update_downloads_from_a_loopback_server_when_allowed(kb_settings, make_bundle,
                                                                  file_server):
    kb_settings.AUDIT_KB_ALLOW_HTTP_LOOPBACK = True
    path = make_bundle(_add_rule(EXTRA_RULE))

    code, err = _update(f"{file_server}/{path.name}")

    assert code == 0, err
    assert KnowledgeBaseInstall.objects.get().source.startswith(file_server)


def test_plain_http_is_refused_unless_loopback_is_allowed(kb_settings, make_bundle,
                                                          file_server):
    path = make_bundle(_add_rule(EXTRA_RULE))

    code, err = _update(f"{file_server}/{path.name}")

    assert code == 1 and "https" in err
    _unchanged()


def test_a_download_over_the_size_cap_is_refused(kb_settings, make_bundle, file_server):
    kb_settings.AUDIT_KB_ALLOW_HTTP_LOOPBACK = True
    kb_settings.AUDIT_KB_MAX_BUNDLE_BYTES = 1024
    path = make_bundle()

    code, err = _update(f"{file_server}/{path.name}")

    assert code == 1 and "larger than AUDIT_KB_MAX_BUNDLE_BYTES" in err
    _unchanged()


def test_the_fleet_is_re_evaluated_under_the_new_bundle(kb_settings, make_bundle, enrolled,
                                                        post_report, make_report,
                                                        django_capture_on_commit_callbacks):
    from fleet.models import Report

    host, token = enrolled()
    report = make_report(server={"vllm_version": "0.27.0"},
                         collected_at=iso(datetime(2026, 11, 29, 8, 0, tzinfo=UTC)))
    assert post_report(report, token).status_code == 202
    evaluation.evaluate_report(report["report_id"])
    assert not Finding.objects.filter(rule_id="bundle-test-every-vllm-server").exists()

    with django_capture_on_commit_callbacks() as queued:
        assert _update(make_bundle(_add_rule(EXTRA_RULE)))[0] == 0
    assert len(queued) == 1
    evaluation.evaluate_report(Report.objects.get().report_id)

    finding = Finding.objects.active().get(rule_id="bundle-test-every-vllm-server")
    assert "0.27.0" in finding.message


def test_a_bundle_nested_100000_deep_is_refused_not_a_traceback(kb_settings, tmp_path):
    import gzip

    path = tmp_path / "deep.kb.json.gz"
    path.write_bytes(gzip.compress(b"[" * 100000 + b"]" * 100000))

    code, err = _update(path)

    assert code == 1 and "nested too deeply" in err
    _unchanged()


@pytest.mark.parametrize("name", ["data/deep.json", "data/deep.yaml", "rules/zz_deep.yaml"])
def test_a_signed_bundle_with_a_deeply_nested_file_is_refused(kb_settings, make_bundle, name):
    def edit(files):
        files[name] = b"[" * 100000 + b"]" * 100000

    code, err = _update(make_bundle(edit, validate=False))

    # Python's recursion limit (json) or libyaml's own depth cap (YAML) says so.
    assert code == 1 and "refused" in err
    assert "nested too deeply" in err or "exceeded maximum nesting depth" in err
    _unchanged()
