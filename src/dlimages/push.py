"""Push built images to registries, prove each push by pulling its digest back, and report what was published.

Deciding is pure (`registry_ref`, `plan_push`, `failure_kind`, `parse_digest`, `build_report`); only `push_image`,
`image_manifest` and `write_report` have side effects, and the first two run every command through an injectable
`run` (subprocess.run's signature) so unit tests need no Docker.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dlimages.errors import InputError, Problem

Run = Callable[..., "subprocess.CompletedProcess[str]"]
Sleep = Callable[[float], None]
Failure = Literal["auth", "transient", "unreachable", "other"]

PUSH_TIMEOUT_S = 3600.0  # a multi-GB CUDA image over a slow uplink; a hang beyond this counts as transient
INSPECT_TIMEOUT_S = 30.0
MANIFEST_TIMEOUT_S = 300.0
VENV_PYTHON = "/opt/venv/bin/python"
REGISTRY_ALLOWED = "host[:port][/path], e.g. 127.0.0.1:5000 or registry.example.com/team"

# docker's reference grammar (distribution/reference): what `docker tag` accepts.
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9A-Fa-f:.]+\]")
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_MAX_NAME = 255  # docker refuses repository names longer than this
_DIGEST_LINE = re.compile(r"^(?P<tag>\S+): digest: (?P<digest>sha256:[0-9a-f]{64}) size: \d+\s*$", re.MULTILINE)

# Order matters: an engine problem is neither the registry's fault nor worth retrying, and a refusal of
# credentials must not be mistaken for a flaky network just because the text also says "EOF" or "timeout".
_ENGINE = re.compile(r"cannot connect to the docker daemon|error during connect|docker daemon socket", re.I)
_AUTH = re.compile(r"unauthorized|no basic auth credentials|authentication required|\bdenied\b|\b40[13]\b", re.I)
_UNREACHABLE = re.compile(r"no such host|server misbehaving", re.I)  # a typo'd host does not heal by waiting
_TRANSIENT = re.compile(
    r"connection refused|connection reset|broken pipe|no route to host|network is unreachable"
    r"|TLS handshake timeout|i/o timeout|timed? ?out|timeout|\bEOF\b|too many requests|\b429\b"
    r"|status(?: code)?:? *5\d\d\b"
    r"|\b5\d\d (?:internal server error|bad gateway|service unavailable|gateway time-?out|insufficient storage)",
    re.I,
)


class PushError(Exception):
    """A push that could not be done or not be proven; the message says what to do, results say what happened."""

    def __init__(self, message: str, results: Sequence[PushResult] = ()) -> None:
        super().__init__(message)
        self.results = tuple(results)


@dataclass(frozen=True)
class PushResult:
    """One local ref pushed to one registry, and whether the registry provably serves that very image."""

    registry: str
    ref: str
    remote_ref: str
    digest: str | None = None
    verified: bool = False
    attempts: int = 0
    error: str | None = None
    push_seconds: float = 0.0
    verify_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.verified and self.error is None

    def as_json(self) -> dict[str, object]:
        return {
            "registry": self.registry,
            "ref": self.ref,
            "remote_ref": self.remote_ref,
            "digest": self.digest,
            "verified": self.verified,
            "attempts": self.attempts,
            "error": self.error,
            "push_seconds": round(self.push_seconds, 3),
            "verify_seconds": round(self.verify_seconds, 3),
        }


@dataclass(frozen=True)
class PushTarget:
    registry: str
    ref: str
    remote_ref: str

    @property
    def repository(self) -> str:
        """The remote ref without its tag: what `docker pull REPOSITORY@DIGEST` takes."""
        return _split_tag(self.remote_ref)[0]

    @property
    def tag(self) -> str:
        return _split_tag(self.remote_ref)[1] or "latest"

    def result(self, error: str | None, attempts: int = 0, digest: str | None = None, **seconds: float) -> PushResult:
        """Verified exactly when nothing went wrong."""
        return PushResult(self.registry, self.ref, self.remote_ref, digest, error is None, attempts, error, **seconds)


# --- deciding (pure) -------------------------------------------------------------------------------------------


def registry_problems(registry: str) -> list[Problem]:
    """Everything wrong with one --registry value, worded for the person who typed it."""

    def problem(message: str) -> list[Problem]:
        return [Problem("--registry", f"'{registry}' {message}", REGISTRY_ALLOWED)]

    if not registry:
        return problem("is empty")
    if "://" in registry:
        return problem("has a scheme: give the address only (docker picks https, or http for 127.0.0.1)")
    if any(ch.isspace() for ch in registry):
        return problem("contains whitespace")
    if registry.endswith("/"):
        return problem("ends with '/'")
    host_port, _, path = registry.partition("/")
    host, port = host_port, ""
    if not host_port.endswith("]") and ":" in host_port:
        host, _, port = host_port.rpartition(":")
    if not _HOST.fullmatch(host):
        return problem(f"has no valid host name ('{host}')")
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        return problem(f"has port '{port}', not a number from 1 to 65535")
    if not port and "." not in host and not host.startswith("[") and host != "localhost":
        # docker reads a first component without '.' or ':' as a Docker Hub namespace, so the push
        # would silently go to docker.io/<registry>/...
        return problem(
            "would be read by docker as a Docker Hub namespace: give a host with a dot, a port, or localhost"
        )
    bad = [part for part in path.split("/") if not _PATH_PART.fullmatch(part)] if path else []
    if bad:
        return problem(f"has path part '{bad[0]}': lowercase letters, digits and single '.', '_' or '-' between them")
    return []


def ref_problems(image_ref: str) -> list[Problem]:
    """Everything wrong with a local image ref that is to be pushed under a registry prefix."""

    def problem(message: str, allowed: str = "repository[:tag], e.g. lab/pytorch-universal-dev:v1.0") -> list[Problem]:
        return [Problem(f"image '{image_ref}'", message, allowed)]

    if "@" in image_ref:
        return problem("is a digest reference: push a tag")
    name, tag = _split_tag(image_ref)
    if tag is not None and not _TAG.fullmatch(tag):
        return problem(f"has tag '{tag}': letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-'")
    parts = name.split("/")
    if not name or any(not _PATH_PART.fullmatch(part) for part in parts):
        return problem("is not a repository name: lowercase path parts separated by '/'")
    if len(parts) > 1 and ("." in parts[0] or parts[0] == "localhost"):
        return problem(f"already names a registry ('{parts[0]}'): give the repository without it")
    return []


def registry_ref(registry: str, image_ref: str) -> str:
    """The ref `image_ref` gets in `registry`: ("127.0.0.1:5000", "lab/x:v1") -> "127.0.0.1:5000/lab/x:v1"."""
    problems = registry_problems(registry) + ref_problems(image_ref)
    remote = f"{registry}/{image_ref}"
    if not problems and len(_split_tag(remote)[0]) > _MAX_NAME:
        problems.append(Problem(f"image '{image_ref}'", f"with '{registry}' is longer than {_MAX_NAME} characters"))
    if problems:
        raise InputError(problems)
    return remote


def plan_push(refs: Sequence[str], registries: Sequence[str]) -> list[PushTarget]:
    """Every (registry, ref) pair in push order, registries outermost; every input problem reported at once."""
    problems: list[Problem] = []
    if not refs:
        problems.append(Problem("images", "nothing to push", "at least one built image ref"))
    if not registries:
        problems.append(Problem("--registry", "no registry given", REGISTRY_ALLOWED))
    for registry in dict.fromkeys(registries):
        problems += registry_problems(registry)
    for ref in dict.fromkeys(refs):
        problems += ref_problems(ref)
    if problems:
        raise InputError(problems)
    return [
        PushTarget(registry, ref, registry_ref(registry, ref))
        for registry in dict.fromkeys(registries)
        for ref in dict.fromkeys(refs)
    ]


def failure_kind(output: str) -> Failure:
    """How a failed docker command failed: only "transient" is worth retrying."""
    if _AUTH.search(output):
        return "auth"
    if _UNREACHABLE.search(output):
        return "unreachable"
    if _TRANSIENT.search(output):
        return "transient"
    return "other"


def parse_digest(output: str, tag: str | None = None) -> str | None:
    """The manifest digest from `docker push` output ("TAG: digest: sha256:... size: N"), for `tag` if given."""
    found = [(m["tag"], m["digest"]) for m in _DIGEST_LINE.finditer(output)]
    if tag is not None:
        found = [item for item in found if item[0] == tag] or found
    return found[-1][1] if found else None


def build_report(results: Iterable[PushResult], manifests: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per local ref: its manifest (`image_manifest`) and where it was pushed, in a stable order."""
    pushed: dict[str, list[dict[str, object]]] = {}
    for result in results:
        pushed.setdefault(result.ref, []).append(result.as_json())
    refs = sorted(set(pushed) | set(manifests))
    return [
        {
            "ref": ref,
            "image": dict(manifests.get(ref, {})),
            "pushed": sorted(pushed.get(ref, []), key=lambda item: str(item["remote_ref"])),
        }
        for ref in refs
    ]


def _split_tag(ref: str) -> tuple[str, str | None]:
    """("host:5000/a/b:t") -> ("host:5000/a/b", "t"): a ':' after the last '/' starts the tag."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    return (ref[:colon], ref[colon + 1 :]) if colon > slash else (ref, None)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# --- doing (side effects) --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    ok: bool
    output: str
    error_output: str
    attempts: int
    kind: Failure | None = None

    @property
    def last_line(self) -> str:
        return _last_line(self.error_output or self.output)


def push_image(
    refs: Sequence[str],
    registries: Sequence[str],
    *,
    retries: int = 3,
    backoff: float = 2.0,
    run: Run = subprocess.run,
    sleep: Sleep = time.sleep,
    timeout: float = PUSH_TIMEOUT_S,
) -> list[PushResult]:
    """Push every local ref to every registry and prove each push by pulling its digest back.

    Per (registry, ref): `docker tag REF REGISTRY/REF`, `docker push` (a transient failure is tried again
    up to `retries` more times, sleeping backoff, 2*backoff, 4*backoff...; a refusal of credentials never
    is), then `docker pull REGISTRY/REPO@DIGEST` must give the local image ID. The registry-prefixed tag
    is removed afterwards if this call made it (kept, and reported, if REF was rebuilt meanwhile: it is then
    the pushed image's last tag); local tags and images are never touched. Once a registry refuses the
    credentials or cannot be reached, its remaining refs are not tried.

    Returns the results when every push was verified; otherwise raises PushError whose message names each
    failure and what to do, with all results attached. Raises InputError for bad refs or registries, or
    refs that are not local images.
    """
    problems = []
    if retries < 0:
        problems.append(Problem("--retries", f"is {retries}", "0 or more"))
    if backoff < 0:
        problems.append(Problem("--backoff", f"is {backoff}", "0 or more seconds"))
    if problems:
        raise InputError(problems)
    targets = plan_push(refs, registries)
    local_ids = _local_ids(run, list(dict.fromkeys(refs)))

    results: list[PushResult] = []
    given_up: dict[str, str] = {}  # registry -> why the rest of its refs are not tried
    for target in targets:
        if target.registry in given_up:
            results.append(PushResult(target.registry, target.ref, target.remote_ref, error=given_up[target.registry]))
            continue
        result, give_up = _push_one(target, local_ids[target.ref], run, sleep, retries, backoff, timeout)
        if give_up and result.error:
            given_up[target.registry] = result.error
        results.append(result)

    failed = [result for result in results if not result.ok]
    if failed:
        lines = [f"{len(failed)} of {len(results)} pushes failed:"]
        lines += [f"- {error}" for error in dict.fromkeys(str(r.error) for r in failed)]
        raise PushError("\n".join(lines), results)
    return results


def _local_ids(run: Run, refs: list[str]) -> dict[str, str]:
    """The image ID of each local ref; InputError naming every ref that is not a local image."""
    ids: dict[str, str] = {}
    missing: list[Problem] = []
    for ref in refs:
        done = _call(run, ["docker", "image", "inspect", "--format", "{{.Id}}", ref], INSPECT_TIMEOUT_S)
        if done.returncode == 0 and done.stdout.strip():
            ids[ref] = done.stdout.strip()
            continue
        text = done.stderr or done.stdout
        if _ENGINE.search(text) or done.returncode in (124, 127):
            raise PushError(f"the Docker engine is not reachable ({_last_line(text)}): is dockerd running?")
        missing.append(Problem(f"image '{ref}'", "is not a local image", "a ref built by `invoke build`"))
    if missing:
        raise InputError(missing)
    return ids


def _push_one(
    target: PushTarget, local_id: str, run: Run, sleep: Sleep, retries: int, backoff: float, timeout: float
) -> tuple[PushResult, bool]:
    """The result, and whether the registry's other refs are not worth trying (credentials refused, unreachable)."""
    ref, remote, result = target.ref, target.remote_ref, target.result

    existing = _image_id(run, remote)
    if existing is not None and existing != local_id:
        return result(f"{remote} already tags another local image ({existing[:19]}); remove that tag first"), False
    made_tag = existing is None
    if made_tag:
        done = _call(run, ["docker", "tag", ref, remote], INSPECT_TIMEOUT_S)
        if done.returncode != 0:
            return result(f"`docker tag {ref} {remote}` failed: {_last_line(done.stderr or done.stdout)}"), False
    try:
        pushed, give_up = _push_tagged(target, local_id, run, sleep, retries, backoff, timeout)
    finally:
        left = _untag(run, ref, remote, local_id) if made_tag else None  # also when interrupted
    if left:
        pushed = dataclasses.replace(pushed, error=f"{pushed.error}; {left}" if pushed.error else left)
    return pushed, give_up


def _push_tagged(
    target: PushTarget, local_id: str, run: Run, sleep: Sleep, retries: int, backoff: float, timeout: float
) -> tuple[PushResult, bool]:
    registry, ref, remote, result = target.registry, target.ref, target.remote_ref, target.result

    started = time.monotonic()
    pushed = _with_retries(run, ["docker", "push", remote], retries, backoff, sleep, timeout)
    push_seconds = time.monotonic() - started
    if not pushed.ok:
        give_up = pushed.kind in ("auth", "transient", "unreachable")
        return result(_push_message(target, pushed), pushed.attempts, push_seconds=push_seconds), give_up
    digest = parse_digest(pushed.output, target.tag)
    if digest is None:
        no_digest = f"`docker push {remote}` succeeded but printed no digest: {pushed.last_line}"
        return result(no_digest, pushed.attempts, push_seconds=push_seconds), False

    # The daemon checks that the manifest it fetches hashes to `digest`, and the image ID is the digest
    # of the config that manifest names: equal IDs prove the registry serves exactly the local image.
    # Layers are not downloaded again (they are local); the registry refused the manifest had any been missing.
    started = time.monotonic()
    pinned = f"{target.repository}@{digest}"
    pulled = _with_retries(run, ["docker", "pull", pinned], retries, backoff, sleep, timeout)
    pulled_id = _image_id(run, pinned) if pulled.ok else None
    verify_seconds = time.monotonic() - started
    error: str | None = None
    if not pulled.ok:
        error = f"{registry} took {ref} as {digest}, but pulling it back failed: {pulled.last_line}"
    elif pulled_id != local_id:
        error = f"verification failed: {pinned} is image {pulled_id}, but {ref} is {local_id}"
    seconds = {"push_seconds": push_seconds, "verify_seconds": verify_seconds}
    return result(error, pushed.attempts, digest, **seconds), False


def _push_message(target: PushTarget, outcome: _Outcome) -> str:
    registry, ref = target.registry, target.ref
    if outcome.kind == "auth":
        return f"{registry} refused the credentials for {ref}: run `docker login {registry}` (or check --registry)"
    if outcome.kind in ("transient", "unreachable"):
        return f"{registry} is not reachable ({outcome.last_line}): is it running? nothing local was changed"
    return f"{registry} rejected {ref}: {outcome.last_line}"


def _with_retries(run: Run, argv: list[str], retries: int, backoff: float, sleep: Sleep, timeout: float) -> _Outcome:
    attempt = 0
    while True:
        attempt += 1
        done = _call(run, argv, timeout)
        if done.returncode == 0:
            return _Outcome(True, done.stdout, done.stderr, attempt)
        kind = failure_kind(done.stderr or done.stdout)  # stdout holds progress lines, which say nothing
        if kind != "transient" or attempt > retries:
            return _Outcome(False, done.stdout, done.stderr, attempt, kind)
        sleep(backoff * 2 ** (attempt - 1))


def _call(run: Run, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run one command; a missing docker or a hang becomes a failed result (rc 127 / 124) instead of a traceback."""
    try:
        return run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} {argv[1]} timed out after {timeout:g} s")
    except OSError as error:
        return subprocess.CompletedProcess(argv, 127, "", f"cannot run {argv[0]}: {error}")


def _image_id(run: Run, ref: str) -> str | None:
    done = _call(run, ["docker", "image", "inspect", "--format", "{{.Id}}", ref], INSPECT_TIMEOUT_S)
    return done.stdout.strip() or None if done.returncode == 0 else None


def _untag(run: Run, ref: str, remote: str, local_id: str) -> str | None:
    """Remove the registry-prefixed tag this run made; None when done, else why it stays.

    Only while `ref` still holds the image, so rmi can only untag: if `ref` was rebuilt meanwhile, the temporary
    tag is the image's last name and removing it would delete the image.
    """
    if _image_id(run, remote) != local_id:
        return None  # someone else moved or removed it: no longer ours
    if _image_id(run, ref) != local_id:
        return (
            f"{ref} now names another image (rebuilt during the push?), so what was pushed is not what {ref} is; "
            f"{remote} was kept because it is the pushed image's last tag: `docker rmi {remote}` deletes it"
        )
    done = _call(run, ["docker", "rmi", "--no-prune", remote], INSPECT_TIMEOUT_S)
    if done.returncode != 0:
        return f"could not remove the temporary tag {remote}: {_last_line(done.stderr or done.stdout)}"
    return None


def image_manifest(image_ref: str, run: Run = subprocess.run, *, python: str | None = VENV_PYTHON) -> dict[str, Any]:
    """What a published image is: ID, size in bytes, labels, pip packages (via `python`) and installed dpkg packages.

    `python=None` records "pip": None for images without a Python environment. Raises PushError when the
    image cannot be inspected or a listing fails.
    """
    done = _call(run, ["docker", "image", "inspect", image_ref], INSPECT_TIMEOUT_S)
    if done.returncode != 0:
        raise PushError(f"cannot inspect {image_ref}: {_last_line(done.stderr or done.stdout)}")
    info = json.loads(done.stdout)[0]
    manifest: dict[str, Any] = {
        "ref": image_ref,
        "id": info["Id"],
        "size": int(info["Size"]),
        "repo_digests": sorted(info.get("RepoDigests") or []),
        "labels": dict(sorted(((info.get("Config") or {}).get("Labels") or {}).items())),
        "pip": None,
    }
    if python is not None:
        argv = ["docker", "run", "--rm", "--entrypoint", python, image_ref, "-m", "pip", "list", "--format=json"]
        pip = _checked(run, argv, image_ref, "pip list")
        packages = json.loads(pip)
        manifest["pip"] = {item["name"]: item["version"] for item in sorted(packages, key=lambda i: i["name"].lower())}
    # The status column keeps out packages that are only remembered (removed, config files left).
    status_format = "${db:Status-Abbrev}\t${Package}=${Version}\n"
    argv = ["docker", "run", "--rm", "--entrypoint", "dpkg-query", image_ref, "-W", "-f", status_format]
    dpkg = _checked(run, argv, image_ref, "dpkg-query")
    installed = [line.split("\t", 1)[1] for line in dpkg.splitlines() if line.startswith("ii")]
    manifest["dpkg"] = dict(sorted(entry.split("=", 1) for entry in installed))
    return manifest


def _checked(run: Run, argv: list[str], image_ref: str, what: str) -> str:
    done = _call(run, argv, MANIFEST_TIMEOUT_S)
    if done.returncode != 0:
        raise PushError(f"{what} in {image_ref} failed: {_last_line(done.stderr or done.stdout)}")
    return done.stdout


def write_report(path: Path, entries: object) -> None:
    """Write `entries` as JSON with sorted keys, atomically: readers see the old report or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(entries, sort_keys=True, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a report is for reading
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
