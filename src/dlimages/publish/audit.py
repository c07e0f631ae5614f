"""The vulnerability scan of a pushed image's Python lock: pip-audit in strict mode, or the reason it was not scanned.

Without --strict, pip-audit prints "No known vulnerabilities found" and exits 0 when its advisory service cannot be
reached, having audited nothing. Here a scan counts only when pip-audit printed its report, which it does only when
it audited every package. Its result is then attached as cosign's `vuln` attestation. That one carries the scan's
times, unlike the SBOM and provenance: a scan is of a moment.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlimages.core.runner import DEFAULT, Runner, run_folder

VULN_TYPE = "vuln"  # https://cosign.sigstore.dev/attestation/vuln/v1
AUDIT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Scan:
    """A scan's predicate (None: not scanned) and one line for people."""

    predicate: bytes | None
    summary: str


def audit(lock: str | None, runner: Runner = DEFAULT) -> Scan:
    """pip-audit --strict over `lock` (hashed pins, so no resolution and no pip run)."""
    if lock is None:
        return Scan(None, "not scanned: the image has no Python lock")
    with tempfile.TemporaryDirectory(dir=run_folder()) as folder:
        path = Path(folder) / "requirements.lock"
        path.write_text(lock, encoding="utf-8")
        argv = [sys.executable, "-m", "pip_audit", "--strict", "--disable-pip", "--require-hashes", "-r", str(path)]
        started = _now()
        done = runner([*argv, "--format", "json", "--progress-spinner", "off"], timeout=AUDIT_TIMEOUT_S)
        finished = _now()
    if "No module named pip_audit" in done.err:
        return Scan(None, "not scanned: pip-audit is not installed here")
    try:
        report: dict[str, Any] = json.loads(done.out)
        dependencies = report["dependencies"]
    except (ValueError, KeyError, TypeError):
        reason = done.last_line.removeprefix("ERROR:pip_audit._cli:")
        return Scan(None, f"not scanned: pip-audit could not audit every package ({reason})")
    found = sum(len(item.get("vulns") or ()) for item in dependencies)
    predicate = {
        "invocation": {"parameters": argv[1:], "uri": "", "event_id": "", "builder.id": ""},
        "scanner": {"uri": "pkg:pypi/pip-audit", "version": "", "db": {"uri": "", "version": ""}, "result": report},
        "metadata": {"scanStartedOn": started, "scanFinishedOn": finished},
    }
    summary = f"scanned: {len(dependencies)} Python packages, {found} known vulnerabilities (pip-audit)"
    return Scan(json.dumps(predicate, sort_keys=True).encode(), summary)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
