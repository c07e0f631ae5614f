"""Push built images to registries and prove each push by pulling its digest back.

Deciding is pure (`plan_push`, `failure_kind`, `parse_digest`); `push_image` runs every command through a
`Runner`, so unit tests hand in a fake docker and need no engine.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from dlimages.errors import InputError, Problem
from dlimages.references import REGISTRY_ALLOWED, ref_problems, registry_problems, registry_ref, split_tag
from dlimages.runner import DEFAULT, Result, Runner

Sleep = Callable[[float], None]
Failure = Literal["auth", "transient", "unreachable", "other"]

PUSH_TIMEOUT_S = 3600.0  # a multi-GB CUDA image over a slow uplink; a hang beyond this counts as transient
INSPECT_TIMEOUT_S = 30.0

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
        return split_tag(self.remote_ref)[0]

    @property
    def tag(self) -> str:
        return split_tag(self.remote_ref)[1] or "latest"

    def result(self, error: str | None, attempts: int = 0, digest: str | None = None, **seconds: float) -> PushResult:
        """Verified exactly when nothing went wrong."""
        return PushResult(self.registry, self.ref, self.remote_ref, digest, error is None, attempts, error, **seconds)


# --- deciding (pure) -------------------------------------------------------------------------------------------


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


# --- doing (side effects) --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    """A command's last try, how many tries it took, and (when it failed) how."""

    last: Result
    attempts: int
    kind: Failure | None = None

    @property
    def ok(self) -> bool:
        return self.last.ok


def push_image(
    refs: Sequence[str],
    registries: Sequence[str],
    *,
    retries: int = 3,
    backoff: float = 2.0,
    runner: Runner = DEFAULT,
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
    local_ids = _local_ids(runner, list(dict.fromkeys(refs)))

    results: list[PushResult] = []
    given_up: dict[str, str] = {}  # registry -> why the rest of its refs are not tried
    for target in targets:
        if target.registry in given_up:
            results.append(PushResult(target.registry, target.ref, target.remote_ref, error=given_up[target.registry]))
            continue
        result, give_up = _push_one(target, local_ids[target.ref], runner, sleep, retries, backoff, timeout)
        if give_up and result.error:
            given_up[target.registry] = result.error
        results.append(result)

    failed = [result for result in results if not result.ok]
    if failed:
        lines = [f"{len(failed)} of {len(results)} pushes failed:"]
        lines += [f"- {error}" for error in dict.fromkeys(str(r.error) for r in failed)]
        raise PushError("\n".join(lines), results)
    return results


def _local_ids(runner: Runner, refs: list[str]) -> dict[str, str]:
    """The image ID of each local ref; InputError naming every ref that is not a local image."""
    ids: dict[str, str] = {}
    missing: list[Problem] = []
    for ref in refs:
        done = runner(["docker", "image", "inspect", "--format", "{{.Id}}", ref], timeout=INSPECT_TIMEOUT_S)
        if done.ok and done.out.strip():
            ids[ref] = done.out.strip()
            continue
        if _ENGINE.search(done.err or done.out) or done.hung or done.missing:
            raise PushError(f"the Docker engine is not reachable ({done.last_line}): is dockerd running?")
        missing.append(Problem(f"image '{ref}'", "is not a local image", "a ref built by `invoke build`"))
    if missing:
        raise InputError(missing)
    return ids


def _push_one(
    target: PushTarget, local_id: str, runner: Runner, sleep: Sleep, retries: int, backoff: float, timeout: float
) -> tuple[PushResult, bool]:
    """The result, and whether the registry's other refs are not worth trying (credentials refused, unreachable)."""
    ref, remote, result = target.ref, target.remote_ref, target.result

    existing = runner.image_id(remote)
    if existing is not None and existing != local_id:
        return result(f"{remote} already tags another local image ({existing[:19]}); remove that tag first"), False
    made_tag = existing is None
    if made_tag:
        done = runner(["docker", "tag", ref, remote], timeout=INSPECT_TIMEOUT_S)
        if not done.ok:
            return result(f"`docker tag {ref} {remote}` failed: {done.last_line}"), False
    try:
        pushed, give_up = _push_tagged(target, local_id, runner, sleep, retries, backoff, timeout)
    finally:
        left = _untag(runner, ref, remote, local_id) if made_tag else None  # also when interrupted
    if left:
        pushed = dataclasses.replace(pushed, error=f"{pushed.error}; {left}" if pushed.error else left)
    return pushed, give_up


def _push_tagged(
    target: PushTarget, local_id: str, runner: Runner, sleep: Sleep, retries: int, backoff: float, timeout: float
) -> tuple[PushResult, bool]:
    registry, ref, remote, result = target.registry, target.ref, target.remote_ref, target.result

    started = time.monotonic()
    pushed = _with_retries(runner, ["docker", "push", remote], retries, backoff, sleep, timeout)
    push_seconds = time.monotonic() - started
    if not pushed.ok:
        give_up = pushed.kind in ("auth", "transient", "unreachable")
        return result(_push_message(target, pushed), pushed.attempts, push_seconds=push_seconds), give_up
    digest = parse_digest(pushed.last.out, target.tag)
    if digest is None:
        no_digest = f"`docker push {remote}` succeeded but printed no digest: {pushed.last.last_line}"
        return result(no_digest, pushed.attempts, push_seconds=push_seconds), False

    # The daemon checks that the manifest it fetches hashes to `digest`, and the image ID is the digest
    # of the config that manifest names: equal IDs prove the registry serves exactly the local image.
    # Layers are not downloaded again (they are local); the registry refused the manifest had any been missing.
    started = time.monotonic()
    pinned = f"{target.repository}@{digest}"
    pulled = _with_retries(runner, ["docker", "pull", pinned], retries, backoff, sleep, timeout)
    pulled_id = runner.image_id(pinned) if pulled.ok else None
    verify_seconds = time.monotonic() - started
    error: str | None = None
    if not pulled.ok:
        error = f"{registry} took {ref} as {digest}, but pulling it back failed: {pulled.last.last_line}"
    elif pulled_id != local_id:
        error = f"verification failed: {pinned} is image {pulled_id}, but {ref} is {local_id}"
    seconds = {"push_seconds": push_seconds, "verify_seconds": verify_seconds}
    return result(error, pushed.attempts, digest, **seconds), False


def _push_message(target: PushTarget, outcome: _Outcome) -> str:
    registry, ref = target.registry, target.ref
    if outcome.kind == "auth":
        return f"{registry} refused the credentials for {ref}: run `docker login {registry}` (or check --registry)"
    if outcome.kind in ("transient", "unreachable"):
        return f"{registry} is not reachable ({outcome.last.last_line}): is it running? nothing local was changed"
    return f"{registry} rejected {ref}: {outcome.last.last_line}"


def _with_retries(
    runner: Runner, argv: list[str], retries: int, backoff: float, sleep: Sleep, timeout: float
) -> _Outcome:
    attempt = 0
    while True:
        attempt += 1
        done = runner(argv, timeout=timeout)
        if done.ok:
            return _Outcome(done, attempt)
        kind = failure_kind(done.err or done.out)  # stdout holds progress lines, which say nothing
        if kind != "transient" or attempt > retries:
            return _Outcome(done, attempt, kind)
        sleep(backoff * 2 ** (attempt - 1))


def _untag(runner: Runner, ref: str, remote: str, local_id: str) -> str | None:
    """Remove the registry-prefixed tag this run made; None when done, else why it stays.

    Only while `ref` still holds the image, so rmi can only untag: if `ref` was rebuilt meanwhile, the temporary
    tag is the image's last name and removing it would delete the image.
    """
    if runner.image_id(remote) != local_id:
        return None  # someone else moved or removed it: no longer ours
    if runner.image_id(ref) != local_id:
        return (
            f"{ref} now names another image (rebuilt during the push?), so what was pushed is not what {ref} is; "
            f"{remote} was kept because it is the pushed image's last tag: `docker rmi {remote}` deletes it"
        )
    done = runner(["docker", "rmi", "--no-prune", remote], timeout=INSPECT_TIMEOUT_S)
    if not done.ok:
        return f"could not remove the temporary tag {remote}: {done.last_line}"
    return None
