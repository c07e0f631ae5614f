"""Signatures and attestations on pushed digests, with cosign; who signs (`Signing`) and whom `verify` trusts (`Trust`).

`sign_pushed` signs each pushed REPOSITORY@DIGEST and attaches two attestations (attest.py's SBOM and provenance):
with a key (a file, a KMS URI or env://VAR; no transparency log unless asked, as behind a firewall), keyless with
the ambient OIDC identity (GitHub's workflows), or both. cosign stores them beside the image as tags of their own:
the image's digest does not change. verification.py checks them; both run cosign and read an image's files (from a
container that is created and never started) through the helpers here. Every command runs through the Runner.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlimages.artifacts import oslock
from dlimages.core.errors import InputError, Problem
from dlimages.core.references import registry_of
from dlimages.core.runner import DEFAULT, Result, Runner, run_folder
from dlimages.core.watch import Wait
from dlimages.model.spec import MATRIX_FILE, load_matrix
from dlimages.publish import attest
from dlimages.publish.audit import VULN_TYPE, Scan, audit
from dlimages.publish.daemonregistry import insecure_registry
from dlimages.publish.pushplan import PushResult

COSIGN_TIMEOUT_S = 300.0
KEY_CHECK_TIMEOUT_S = 60.0  # loading a key: a file at once, a KMS key one request
READER_LABEL = "io.dlimages.reader"  # HOST:PID of the process whose read_files made the container
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
SIGN_KEY_ENV, KEYLESS_ENV = "DLIMAGES_SIGN_KEY", "DLIMAGES_KEYLESS"
VERIFY_KEY_ENV, IDENTITY_ENV, ISSUER_ENV = "DLIMAGES_VERIFY_KEY", "DLIMAGES_VERIFY_IDENTITY", "DLIMAGES_VERIFY_ISSUER"
PUSH_HELP = {  # `invoke push`'s flags for signing and compression
    "sign_key": "cosign private key to sign and attest each pushed digest: file, KMS URI or env://VAR "
    f"(${SIGN_KEY_ENV}; its password from $COSIGN_PASSWORD)",
    "keyless": "also sign keyless with the ambient OIDC identity (GitHub workflows; needs Sigstore)",
    "no_sign": "push without signature, SBOM and provenance even where a key is configured",
    "compression": "gzip (docker push; every engine) or zstd (level 3, through skopeo: smaller and faster to pull; "
    "Docker 23+, containerd 1.5+)",
}


class SigningError(Exception):
    """A signature or attestation that could not be made or does not verify; the message says which and why."""


@dataclass(frozen=True)
class Signing:
    """Who signs a push: a cosign key reference, the ambient OIDC identity (keyless), or both; none: unsigned."""

    key: str | None = None
    keyless: bool = False
    tlog: bool = False  # upload to the transparency log with a key too (keyless always does)

    @classmethod
    def from_flags(
        cls, sign_key: str | None, keyless: bool, no_sign: bool, tlog: bool, env: Mapping[str, str] = os.environ
    ) -> Signing:
        if sign_key is not None and not sign_key.strip():
            raise InputError([Problem("--sign-key", "is empty", "a cosign private key: file, KMS URI or env://VAR")])
        key = sign_key or env.get(SIGN_KEY_ENV) or None
        keyless = keyless or env.get(KEYLESS_ENV, "") in {"1", "true"}
        if no_sign:
            if sign_key or keyless:
                given = "--sign-key" if sign_key else "--keyless"
                raise InputError([Problem("--no-sign", f"given with {given}", "one of them")])
            return cls()
        return cls(key, keyless, tlog)

    @property
    def enabled(self) -> bool:
        return bool(self.key or self.keyless)

    def check(self, runner: Runner = DEFAULT) -> None:
        """Before anything is pushed: the key loads (a file, env://VAR or KMS URI, with $COSIGN_PASSWORD), as
        `cosign public-key` loads it. InputError saying why, and what is allowed, when it does not."""
        if not self.key:
            return
        done = cosign(runner, ["public-key", "--key", self.key], "", check=False, timeout=KEY_CHECK_TIMEOUT_S)
        if done.ok:
            return
        reason = cosign_reason(done)
        if "decrypt" in reason and "COSIGN_PASSWORD" in os.environ:
            reason += " ($COSIGN_PASSWORD is not this key's password)"
        elif "decrypt" in reason:
            reason += " (set $COSIGN_PASSWORD to the key's password: unset, the empty one is tried)"
        allowed = "a cosign private key: file, KMS URI or env://VAR, with its password in $COSIGN_PASSWORD"
        said = f"cannot be loaded: {reason}; nothing was pushed"
        raise InputError([Problem(f"--sign-key {self.key!r}", said, allowed)])

    def signers(self) -> list[list[str]]:
        """cosign's flags for each signer: the key's, then keyless."""
        found = [["--key", self.key, *([] if self.tlog else ["--tlog-upload=false"])]] if self.key else []
        return found + ([[]] if self.keyless else [])


@dataclass(frozen=True)
class Trust:
    """What `verify` accepts: a signature by the public key, or by an identity (keyless certificate) matching the
    regular expression, issued by `issuer`. Without the transparency log (`tlog` False) a key's signature is taken
    as the registry holds it; a keyless one always needs the log."""

    key: str | None = None
    identity: str | None = None
    issuer: str = GITHUB_ISSUER
    tlog: bool = False

    @classmethod
    def from_flags(
        cls, key: str | None, identity: str | None, issuer: str | None, tlog: bool, env: Mapping[str, str] = os.environ
    ) -> Trust:
        key = key or env.get(VERIFY_KEY_ENV) or None
        identity = identity or env.get(IDENTITY_ENV) or None
        issuer = issuer or env.get(ISSUER_ENV) or GITHUB_ISSUER
        problems = []
        if not key and not identity:
            said = f"no key and no identity to verify against (nor {VERIFY_KEY_ENV} or {IDENTITY_ENV})"
            keyless = "--identity REGEX [--issuer URL] for a keyless signature; --no-verify to run without checking"
            problems.append(Problem("--key", said, f"--key cosign.pub (a file, KMS URI or env://VAR), or {keyless}"))
        if key and identity:
            problems.append(Problem("--identity", "given with --key", "one of them"))
        if key and "://" not in key and (why := _not_a_public_key(Path(key))):
            problems.append(Problem(f"--key {key!r}", why, "a cosign public key (cosign.pub), KMS URI or env://VAR"))
        if identity:
            anchored = r"a regex anchored at both ends, e.g. ^https://github\.com/ORG/REPO/\.github/workflows/X\.yml@refs/heads/main$"
            try:
                re.compile(identity)
            except re.error as error:
                problems.append(Problem("--identity", f"{identity!r} is not a regular expression ({error})", anchored))
            else:
                if not (identity.startswith("^") and identity.endswith("$") and not identity.endswith("\\$")):
                    said = f"{identity!r} is not anchored at both ends (^...$): it would also match other workflows"
                    problems.append(Problem("--identity", said, anchored))
        if problems:
            raise InputError(problems)
        return cls(key, identity, issuer, tlog)

    def flags(self) -> list[str]:
        if self.key:
            return ["--key", self.key, *([] if self.tlog else ["--insecure-ignore-tlog=true"])]
        return ["--certificate-identity-regexp", str(self.identity), "--certificate-oidc-issuer", self.issuer]

    def describe(self) -> str:
        return f"key {self.key}" if self.key else f"identity {self.identity} ({self.issuer})"


def sign_pushed(results: Sequence[PushResult], signing: Signing, root: Path, runner: Runner = DEFAULT) -> list[str]:
    """Sign and attest each distinct pushed REPOSITORY@DIGEST (an image pushed under several tags once): the SBOM,
    the provenance, and the vulnerability scan where one could be made; a line per digest. Raises SigningError
    naming the digest and cosign's reason."""
    done: dict[str, str] = {}
    made: dict[str, tuple[attest.ImageFacts, Scan]] = {}
    for result in results:
        ref = f"{result.repository}@{result.digest}"
        if not result.ok or ref in done:
            continue
        if result.ref not in made:
            facts = image_facts(result.ref, root, runner)
            made[result.ref] = (facts, audit(facts.files.get(attest.PYTHON_LOCK), runner))
        facts, scan = made[result.ref]
        http = ["--allow-http-registry"] if insecure_registry(result.registry, runner) else []
        with tempfile.TemporaryDirectory(dir=run_folder()) as folder:
            documents = {attest.SBOM_TYPE: attest.sbom(facts), attest.PROVENANCE_TYPE: attest.provenance(facts)}
            if scan.predicate is not None:
                documents[VULN_TYPE] = scan.predicate
            for number, flags in enumerate(signing.signers()):
                cosign(runner, ["sign", "--yes", *flags, *http, ref], f"signing {ref}")
                for kind, document in documents.items():
                    predicate = Path(folder, f"{kind}.json")
                    predicate.write_bytes(document)
                    replace = ["--replace"] if number == 0 else []  # a push again replaces, not piles up
                    argv = ["attest", "--yes", *flags, *http, *replace, "--type", kind, "--predicate", str(predicate)]
                    cosign(runner, [*argv, ref], f"attaching the {kind} attestation to {ref}")
        done[ref] = f"signed {ref}, its SBOM and provenance attached; vulnerability scan {scan.summary}"
    return list(done.values())


def image_facts(ref: str, root: Path, runner: Runner = DEFAULT) -> attest.ImageFacts:
    """What the SBOM and provenance say of a local image: its labels and `Created`, its files (attest.IMAGE_FILES),
    the lock files of its cell at its commit (the working tree's for a commit marked -dirty or unknown), and the
    engine and buildx that hold it."""
    info = inspect_image(ref, runner)
    labels = dict((info.get("Config") or {}).get("Labels") or {})
    locks = _lock_digests(root, labels, runner)
    files = read_files(ref, runner)
    if files.get(attest.DPKG_STATUS) and attest.distribution(files.get(attest.OS_RELEASE)) is None:
        raise SigningError(
            f"cannot name the distribution of {ref}'s Debian packages: its {attest.OS_RELEASE} is missing or gives no "
            "ID and VERSION_ID, which their package URLs (pkg:deb/ID/...?distro=ID-VERSION_ID) need for scanners"
        )
    return attest.ImageFacts(labels, str(info.get("Created", "")), files, locks, _builder(runner))


def read_files(ref: str, runner: Runner = DEFAULT, paths: Sequence[str] = attest.IMAGE_FILES) -> dict[str, str | None]:
    """The text of each file in the image (None where it has none), copied out of a container that is created
    and removed without ever running. A symlink is followed inside the image (Debian's /etc/os-release is one, to
    ../usr/lib/os-release, which the host may not have or have of another distribution)."""
    owner = f"{socket.gethostname()}:{os.getpid()}"
    _remove_dead_readers(runner)
    created = runner(["docker", "create", "--label", f"{READER_LABEL}={owner}", "--entrypoint", "/bin/true", ref])
    if not created.ok:
        raise SigningError(f"cannot read {ref}: {created.last_line}")
    container = created.out.strip()
    files: dict[str, str | None] = {}
    try:
        with tempfile.TemporaryDirectory(dir=run_folder()) as folder:  # in the run's private folder
            for number, path in enumerate(paths):
                target = Path(folder, str(number))
                copied = runner(["docker", "cp", "--follow-link", f"{container}:{path}", str(target)])
                files[path] = target.read_text(encoding="utf-8", errors="replace") if copied.ok else None
    finally:
        runner(["docker", "rm", "-f", container])
    return files


def _remove_dead_readers(runner: Runner) -> None:
    """The containers read_files made in processes of this host that were killed before they removed them."""
    label = '{{.ID}} {{.Label "' + READER_LABEL + '"}}'
    listed = runner.docker("ps", "--all", "--filter", f"label={READER_LABEL}", "--format", label)
    for line in listed.out.splitlines() if listed.ok else []:
        container, _, owner = line.partition(" ")
        host, _, pid = owner.rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            runner.docker("rm", "--force", container)


def _not_a_public_key(path: Path) -> str | None:
    """Why the file `path` cannot be the public key a signature is checked against (None: it may be one): found
    before anything is pulled."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    if "PRIVATE KEY" in text:
        return "is a private key: verify with its public half (cosign.pub)"
    return None if "-----BEGIN PUBLIC KEY-----" in text else "is no PEM public key"


def cosign_reason(done: Result) -> str:
    if done.missing:
        return "cosign is not installed: run `sudo bash scripts/engine.sh` (it installs cosign)"
    lines = [line.strip() for line in (done.err or done.out).splitlines() if line.strip().startswith("Error")]
    return lines[-1].removeprefix("Error: ") if lines else done.last_line


def cosign(
    runner: Runner, args: list[str], doing: str, *, check: bool = True, timeout: float = COSIGN_TIMEOUT_S
) -> Result:
    """cosign, never at a terminal: its input is empty, and an unset COSIGN_PASSWORD is the empty password (a key
    made without one loads; one with a password fails at once, where cosign's prompt would wait unseen)."""
    env = {"COSIGN_PASSWORD": "", **os.environ, "COSIGN_YES": "true"}
    target = args[-1] if args[0] in ("sign", "attest", "verify", "verify-attestation") else ""
    what = doing or f"cosign {args[0]}{' ' + target if target else ''}"
    where = registry_of(target) if target else "the key's service"
    done = runner.watched(["cosign", *args], Wait(what, where, timeout, tty=False), env=env)
    if check and not done.ok:
        raise SigningError(f"{doing} failed: {cosign_reason(done)}")
    return done


def inspect_image(ref: str, runner: Runner) -> dict[str, Any]:
    done = runner(["docker", "image", "inspect", ref])
    if not done.ok:
        raise SigningError(f"cannot inspect {ref}: {done.last_line}")
    return dict(json.loads(done.out)[0])


def _lock_digests(root: Path, labels: Mapping[str, str], runner: Runner) -> dict[str, str]:
    cell, framework = labels.get("io.dlimages.cell"), labels.get("io.dlimages.framework")
    if not cell or not framework:
        return {}
    folder = f"images/{framework}/{cell}"
    revision = labels.get("org.opencontainers.image.revision", "")
    wanted = [folder, *_base_locks(root, labels)]
    digests = {}
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        listed = runner(["git", "-C", str(root), "ls-tree", "-r", "--name-only", revision, "--", *wanted])
        for path in listed.out.split() if listed.ok else ():
            if path.endswith(".lock"):
                shown = runner(["git", "-C", str(root), "show", f"{revision}:{path}"])
                if shown.ok:
                    digests[path] = hashlib.sha256(shown.out.encode()).hexdigest()
        if digests:
            return digests
    for path in wanted:
        found = [root / path] if (root / path).is_file() else sorted((root / path).glob("*.lock"))
        digests |= {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in found}
    return digests


def _base_locks(root: Path, labels: Mapping[str, str]) -> list[str]:
    """The lock of the offline base the image was built on, whose image is its base's name (matrix.yaml); none for a
    pulled base, which has a digest instead."""
    if labels.get("org.opencontainers.image.base.digest"):
        return []
    matrix, name = load_matrix(root / MATRIX_FILE), labels.get("org.opencontainers.image.base.name")
    return [oslock.base_lock_path(each) for each in oslock.offline_bases(matrix) if matrix.os[each].image == name]


def _builder(runner: Runner) -> dict[str, str]:
    """Who pushed: the workflow on GitHub (its ref names the workflow file and branch), else this tool; and the
    engine and buildx versions."""
    server, workflow = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_WORKFLOW_REF")
    builder = {"id": f"{server}/{workflow}" if server and workflow else attest.BUILD_TYPE}
    engine = runner(["docker", "version", "--format", "{{.Server.Version}}"])
    buildx = runner(["docker", "buildx", "version"])
    if engine.ok:
        builder["docker"] = engine.out.strip()
    if buildx.ok and len(buildx.out.split()) > 1:
        builder["buildx"] = buildx.out.split()[1]
    return builder
