"""The commands that use built images: test them (test), run the GPU smoke test and the benchmark inside them (smoke,
bench), push them with their build report (push), compare two sets of build reports (package_diff)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from invoke.context import Context

from dlimages.artifacts.ledger import LEDGER_FILE, Ledger
from dlimages.commands import ci_plan
from dlimages.commands.flags import NO_TRUST_FLAG, NO_VERIFY_SKIPS, REGISTRY, Help, NoEngineSetup, TrustFlags
from dlimages.commands.session import Failed, engine, say
from dlimages.core import usage
from dlimages.core.engines import Need
from dlimages.core.errors import InputError, Problem
from dlimages.core.imagestore import CONTAINERD, image_store
from dlimages.core.references import names_registry
from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.generate.project import Project
from dlimages.gpu import inimage
from dlimages.model import tags as tag_rules
from dlimages.publish import reportdiff
from dlimages.publish.daemonregistry import insecure_registry
from dlimages.publish.push import PUSH_TIMEOUT_S, PushError, PushInterrupted, push_image
from dlimages.publish.pushplan import MAX_RETRIES, PushResult, plan_push, retries_from_flag
from dlimages.publish.report import build_report, image_manifest, report_target, stored_layers, write_report
from dlimages.publish.scratch import Scratch, sweep
from dlimages.publish.signing import PUSH_HELP, Signing, SigningError, Trust, sign_pushed
from dlimages.publish.verification import Verified
from dlimages.publish.verification import verify as verify_image
from dlimages.publish.zstdpush import COMPRESSIONS, Archives, tag_digest

SKOPEO = "`sudo apt-get install skopeo` (Debian 11+, Ubuntu 20.10+), nothing was pushed"
NOTHING_BUILT = f"no image given and no successful `{usage.BUILD}` recorded"
TEST_TOOLS = ("pytest", "testinfra", "selenium", "packageurl")  # pyproject.toml's `test` extra, by import name


def test(
    root: Path,
    shell: Context,
    *,
    image: Annotated[
        Sequence[str], Help(f"image to test (repeatable); default: the images the last `{usage.BUILD}` made")
    ],
    no_engine_setup: NoEngineSetup = False,
) -> None:
    """Run the image tests (pytest + testinfra) against `image`, or the images the last builds made."""
    missing = [name for name in TEST_TOOLS if importlib.util.find_spec(name) is None]
    if missing:
        needs = ", ".join(missing)
        raise Failed(f"error: `{usage.TEST}` needs {needs}, not installed here: {usage.INSTALL_TEST_TOOLS}", code=2)
    images = inimage.check_images(image) if image else inimage.check_images(Ledger(root).built_refs(), str(LEDGER_FILE))
    if not images:
        raise InputError([Problem("--image", NOTHING_BUILT)])
    engine(root, no_engine_setup, need=Need.DOCKER)  # the image tests run containers, build none
    shell.run(ci_plan.image_tests(root, sys.executable, images, gpu=False).command + " -m image", pty=False)


def push(
    root: Path,
    *,
    registry: Annotated[Sequence[str], Help("registry to push to (repeatable)", REGISTRY)],
    image: Annotated[
        Sequence[str],
        Help("local image ref to push (repeatable); default: every tag of the cells the last builds made"),
    ],
    report: Annotated[
        str,
        Help("where to write the JSON build report (cell, tags, digest, sizes per layer as stored, packages)", "FILE"),
    ] = ".work/build-report.json",
    retries: Annotated[  # text, checked by the package: a wrong type is exit 2, not Invoke's traceback
        str, Help(f"retries for transient failures, 0 to {MAX_RETRIES} (backoff doubles from 2 s)", "N")
    ] = "3",
    force_overwrite: Annotated[
        bool,
        Help(
            "replace another image a registry already has under an immutable tag (never needed for moving tags "
            "such as v1.0)"
        ),
    ] = False,
    git_ref: Annotated[str | None, Help(tag_rules.ORIGIN_HELP["git_ref"], "REF")] = None,
    default_branch: Annotated[str | None, Help(tag_rules.ORIGIN_HELP["default_branch"], "BRANCH")] = None,
    commit: Annotated[str | None, Help(tag_rules.ORIGIN_HELP["commit"], "SHA")] = None,
    sign_key: Annotated[str | None, Help(PUSH_HELP["sign_key"], "KEY")] = None,
    keyless: Annotated[bool, Help(PUSH_HELP["keyless"])] = False,
    no_sign: Annotated[bool, Help(PUSH_HELP["no_sign"])] = False,
    trust: Annotated[TrustFlags, TrustFlags.help("tlog")] = NO_TRUST_FLAG,
    compression: Annotated[str, Help(PUSH_HELP["compression"], "gzip|zstd")] = "gzip",
    no_engine_setup: NoEngineSetup = False,
) -> str:
    """Push the images (default: what the last builds made) to every registry, each digest verified by pulling it
    back (said as it goes), sign and attest each pushed digest when a key or identity is given, then write the
    build report; where it went."""
    ledger = Ledger(root)
    signing = Signing.from_flags(sign_key, keyless, no_sign, trust.tlog)
    if compression not in COMPRESSIONS:
        raise InputError([Problem("--compression", f"is {compression!r}", " or ".join(COMPRESSIONS))])
    if not registry:
        raise InputError([Problem("--registry", "give at least one registry", "HOST[:PORT], e.g. 127.0.0.1:5000")])
    attempts, report_path = retries_from_flag(retries), report_target(ledger.root, report)
    origin = tag_rules.Origin.from_flags(git_ref, default_branch, commit)
    moving = ledger.moving_refs()
    names = tag_rules.published_refs(image or ledger.built_refs(every_tag=True), moving, origin)
    if not names:
        raise InputError([Problem("--image", NOTHING_BUILT)])
    refs = list(names)
    plan_push(refs, list(registry), names)  # every bad ref or registry is exit 2 before anything starts
    signing.check(RUNNER)  # so is a key that does not load
    engine(root, no_engine_setup, need=Need.DOCKER)
    # The containerd store keeps the layers as built, uncompressed (core.imagestore.EXPORT), and `docker push` sends
    # them as stored: there the gzip push, like the zstd one, compresses them as the engine saves the image.
    layouts = compression == "zstd" or image_store(RUNNER) == CONTAINERD
    if layouts and shutil.which("skopeo") is None:
        why = "--compression zstd" if compression == "zstd" else "a push from the containerd image store"
        raise Failed(f"error: {why} copies the compressed layers with skopeo, not installed here: {SKOPEO}", code=2)
    for line in sweep(root, RUNNER):
        say(f"removed {line}")
    scratch = Scratch(root)
    archives = Archives(scratch.folder / "layouts", compression=compression) if layouts else None
    stage = signing.enabled and layouts  # to REPOSITORY@DIGEST, tagged once signed: never an unsigned release tag
    try:
        results = push_image(
            refs,
            list(registry),
            retries=attempts,
            moving=moving,
            force_overwrite=force_overwrite,
            names=names,
            archives=archives,
            configs=ledger.configs(),
            stage=stage,
            scratch=scratch,
        )
        manifests = {ref: image_manifest(ref) for ref in dict.fromkeys(r.ref for r in results)}
    except PushInterrupted as stopped:
        raise Failed(f"error: {stopped}", code=stopped.exit_code) from None
    except PushError as error:
        raise Failed(f"error: {error}\nNothing local was changed.", code=1) from None
    finally:
        scratch.close()
    insecure = {r.registry for r in results if insecure_registry(r.registry)}
    for r in results:
        said = f"{r.repository}@{r.digest}, to be tagged {r.tag} once signed" if stage else f"{r.remote_ref} {r.digest}"
        say(f"pushed {said} (verified by pulling it back)")
    if not signing.enabled:
        why = "--no-sign" if no_sign else "no key and no identity given: --sign-key (or $DLIMAGES_SIGN_KEY), --keyless"
        say(f"not signed, no SBOM or provenance attached ({why})")
    else:
        _sign_and_tag(results, signing, root, stage, insecure)
    try:
        stored = {r.remote_ref: stored_layers(f"{r.repository}@{r.digest}", r.registry in insecure) for r in results}
        write_report(report_path, build_report(results, manifests, ledger.cells_by_ref(), stored))
    except OSError as error:
        raise Failed(f"error: pushed, but the build report {report} could not be written: {error}", code=1) from None
    return f"build report: {report}"


def _sign_and_tag(
    results: Sequence[PushResult], signing: Signing, root: Path, staged: bool, insecure: set[str]
) -> None:
    """Sign and attest each pushed digest; a staged push's tags are put on only then, so an interrupted or failed
    signing leaves the release tag as it was (absent, or the previous signed image)."""
    untagged = f"; {', '.join(r.remote_ref for r in results)} not tagged: push again" if staged else ""
    try:
        for line in sign_pushed(results, signing, root):
            say(line)
        for r in results if staged else ():
            pinned = f"{r.repository}@{r.digest}"
            tagged = tag_digest(RUNNER, pinned, r.remote_ref, r.registry in insecure, PUSH_TIMEOUT_S)
            if not tagged.ok:
                raise Failed(f"error: pushed and signed {pinned}, but tagging it failed: {tagged.last_line}", code=1)
            say(f"tagged {r.remote_ref} (signed, as {pinned})")
    except SigningError as error:
        raise Failed(f"error: pushed, but {error}{untagged}", code=1) from None
    except KeyboardInterrupt:
        where = untagged or ": the tags name the unsigned digests"
        raise Failed(f"interrupted while signing{where}", code=130) from None


def verify(
    root: Path,
    *,
    image: Annotated[
        str | None,
        Help("the image to verify: REGISTRY/REPOSITORY:TAG (pulled, resolved to its digest) or @sha256:..."),
    ] = None,
    trust: Annotated[TrustFlags, TrustFlags.help("key", "identity", "issuer", "tlog")] = NO_TRUST_FLAG,
    no_engine_setup: NoEngineSetup = False,
) -> str:
    """Verify the image's signature, SBOM and provenance (verification.verify); the report, ending in the verified
    REPOSITORY@DIGEST. Failed (exit 1) with the reason when it does not verify."""
    if image is None:
        raise InputError([Problem("--image", "give the image to verify", "REGISTRY/REPOSITORY:TAG or @sha256:...")])
    [ref] = inimage.check_images([image])
    if not names_registry(ref):
        said = f"{ref!r} names no registry (docker would pull it from Docker Hub)"
        raise InputError([Problem("--image", said, "REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:...")])
    trusted = Trust.from_flags(trust.key, trust.identity, trust.issuer, trust.tlog)
    engine(root, no_engine_setup, need=Need.DOCKER)
    verified = _verified(root, ref, trusted, "does not verify")
    return "\n".join([*verified.lines, f"verified {verified.ref}"])


def _verified(root: Path, ref: str, trust: Trust, refused: str) -> Verified:
    """verification.verify, then the name: the image must be what `ref` names in matrix.yaml (tags.name_problems: a
    signed image of another cell, or of another release, under this tag is refused); Failed (exit 1): `refused`, why."""
    before = RUNNER.image_id(ref)
    try:
        verified = verify_image(ref, trust, RUNNER)
        asked = ref.split("@", 1)[0].split("/", 1)[1]  # its registry dropped: the matrix names images without one
        problems = tag_rules.name_problems(asked, verified.labels, Project(root).expansion.cells)
        if problems:
            raise SigningError(f"{verified.ref}: " + "; ".join(problems))
    except (SigningError, KeyboardInterrupt) as error:
        # What was refused does not stay under the name: the pull is undone, by name only (never another image).
        if before is None:
            RUNNER.docker("rmi", "--no-prune", ref)
        elif RUNNER.image_id(ref) != before:
            RUNNER.docker("tag", before, ref)
        if isinstance(error, SigningError):
            raise Failed(f"error: {refused}: {error}", code=1) from None
        raise
    return verified


def _runnable(root: Path, refs: Sequence[str], trust: Trust | None) -> list[str]:
    """What to run for each ref: the verified REPOSITORY@DIGEST; the ref itself with --no-verify (trust None);
    a local image (no registry in its name: nothing signed it) by its image ID, so no tag can move under the run."""
    runnable = []
    for ref in refs:
        if trust is None:
            say(f"{ref}: not verified (--no-verify): {NO_VERIFY_SKIPS}")
            runnable.append(ref)
        elif not names_registry(ref):
            image_id = RUNNER.image_id(ref)
            if image_id is None:
                runnable.append(ref)  # not local: the run says so (exit 2) and pulls nothing
                continue
            say(f"{ref}: a local image (its name has no registry, so no signature to check); running {image_id}")
            runnable.append(image_id)
        else:
            verified = _verified(root, ref, trust, "refused, does not verify")
            say("\n".join([*verified.lines, f"verified {verified.ref}"]))
            runnable.append(verified.ref)
    return runnable


def smoke(
    root: Path,
    *,
    image: Annotated[Sequence[str], Help("image to smoke-test (repeatable), as bench does")],
    no_gpus: Annotated[bool, Help("without --gpus all (exit 77)")] = False,
    trust: TrustFlags = NO_TRUST_FLAG,
    no_engine_setup: NoEngineSetup = False,
) -> str | None:
    """dl-smoke inside each image, verified first and run by digest (its output shown as it runs); each image's
    exit code and what it means."""
    if not image:
        raise InputError([Problem("--image", "give at least one image")])
    refs = inimage.check_images(image)
    trusted = trust.against(refs)
    engine(root, no_engine_setup, need=Need.DOCKER)
    runs = dict(zip(refs, _runnable(root, refs, trusted), strict=True))
    codes = {
        ref: inimage.run_in_image(RUNNER, run, ["dl-smoke"], gpus=not no_gpus, on_line=say) for ref, run in runs.items()
    }
    verdicts = "\n".join(f"{ref}: exit {code} ({inimage.meaning(code)})" for ref, code in codes.items()) or None
    worst = inimage.worst(codes.values())
    if worst:
        raise Failed(code=worst, output=verdicts)
    return verdicts


def bench(
    root: Path,
    *,
    image: Annotated[str | None, Help("image to benchmark; a registry's is verified first and run by digest")] = None,
    batch_size: Annotated[
        str, Help("batch size, or MODE=N pairs, e.g. 128,amp_fp16_cl=256", "SIZE")
    ] = "128,amp_fp16_cl=256,bf16_cl=256",
    modes: Annotated[
        str, Help("comma-separated modes (fp32,tf32,amp_fp16,amp_fp16_cl,bf16_cl,compile)", "MODE,...")
    ] = "",
    gpus: Annotated[
        str | None,
        Help(
            "all (or a number): also all-reduce bus bandwidth and DDP ResNet-50 scaling across GPUs (PyTorch)",
            "all|N",
        ),
    ] = None,
    trust: TrustFlags = NO_TRUST_FLAG,
    no_engine_setup: NoEngineSetup = False,
) -> None:
    """dl-bench inside the image, verified first and run by digest, its JSON shown as it runs; Failed with
    dl-bench's exit code."""
    if image is None:
        raise InputError([Problem("--image", "give the image to benchmark")])
    [ref] = inimage.check_images([image])
    command = inimage.bench_command(batch_size, modes or None, gpus)  # exit 2 here, not "skipped" in the image
    trusted = trust.against([ref])
    engine(root, no_engine_setup, need=Need.DOCKER)
    [run] = _runnable(root, [ref], trusted)
    code = inimage.run_in_image(RUNNER, run, command, gpus=True, on_line=say)
    if code:
        raise Failed(f"{ref}: dl-bench exit {code} ({inimage.meaning(code)})", code=code)


def package_diff(
    *,
    before: Annotated[
        str,
        Help(
            "folder of the previous build reports (*.json, searched below it); missing or empty: no comparison",
            "FOLDER",
        ),
    ] = "",
    after: Annotated[
        str, Help(f"folder of this build's reports (as `{usage.PUSH} --report` writes them)", "FOLDER")
    ] = "",
) -> str:
    """Markdown (ending in a newline): which pip and dpkg packages each cell's image changed between the build
    reports under `before` and those under `after`."""
    if not after:
        raise InputError([Problem("--after", "give the folder of this build's reports")])
    new = reportdiff.load_reports(after, "--after", required=True)
    old = reportdiff.load_reports(before, "--before", required=False)
    return reportdiff.diff_markdown(reportdiff.report_diff(old, new), compared=bool(old))
