"""The vulnerability scan: a report only when pip-audit audited every package; otherwise "not scanned", why."""

from __future__ import annotations

import json

from dlimages.core.runner import Runner
from dlimages.publish.audit import audit

LOCK = "anyio==4.16.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"


def answering(code: int, out: str = "", err: str = "") -> Runner:
    seen: list[list[str]] = []

    def run(argv: list[str], **_: object) -> object:
        seen.append(argv)

        class Completed:
            returncode, stdout, stderr = code, out, err

        return Completed()

    return Runner(run=run)  # type: ignore[arg-type]


def test_a_full_report_is_a_scan_even_when_it_finds_vulnerabilities() -> None:
    report = {"dependencies": [{"name": "anyio", "version": "4.16.0", "vulns": [{"id": "PYSEC-1"}]}], "fixes": []}
    scan = audit(LOCK, answering(1, json.dumps(report)))  # --strict exits 1 on a finding
    assert scan.summary == "scanned: 1 Python packages, 1 known vulnerabilities (pip-audit)"
    assert scan.predicate is not None
    predicate = json.loads(scan.predicate)
    assert predicate["scanner"]["result"] == report
    assert "--strict" in predicate["invocation"]["parameters"]


def test_an_unreachable_advisory_service_is_not_scanned_never_a_pass() -> None:
    err = "ERROR:pip_audit._cli:anyio: Dependency not found on PyPI and could not be audited: anyio (4.16.0)"
    scan = audit(LOCK, answering(1, "", err))
    assert scan.predicate is None
    assert scan.summary == (
        "not scanned: pip-audit could not audit every package (anyio: Dependency not found on PyPI and could not be "
        "audited: anyio (4.16.0))"
    )


def test_no_lock_or_no_pip_audit_is_said() -> None:
    assert audit(None, answering(0)).summary == "not scanned: the image has no Python lock"
    missing = answering(1, "", "/usr/bin/python3: No module named pip_audit")
    assert audit(LOCK, missing).summary == "not scanned: pip-audit is not installed here"
