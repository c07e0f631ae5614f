"""Signed pushes and `invoke verify` against the real engine, real cosign and real registries on 127.0.0.1
(.ci/registry.sh, open and with basic auth): a signed push verifies; an unsigned image, a tag moved to another
manifest, a signature by another key, an SBOM that no longer describes the image and a missing attestation each fail
with their reason; two pushes attach the same SBOM and provenance bytes; smoke and bench refuse what does not
verify and run what does by its digest.

The images are small: the offline base (`dlimages/base:debian12`) with stand-in `dl-smoke` and `dl-bench` commands
(the CI images' own signed push and verify are steps of `invoke ci`). Credentials and keys go to throwaway folders.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import free_port, require_engine

from dlimages.core.runner import DEFAULT as RUNNER
from dlimages.publish import attest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SH = REPO / ".ci" / "registry.sh"
BASE = "dlimages/base:debian12"
NAME = f"lab/test-signing-{os.getpid()}"
PASSWORD = "not-a-secret"  # noqa: S105 (throwaway keys and registries)
STAND_IN = '#!/bin/sh\necho "stand-in $(basename "$0") $*"\n'


def docker(*args: str, stdin: str | None = None) -> str:
    done = RUNNER.docker(*args, timeout=600, stdin=stdin)
    if not done.ok:
        pytest.fail(f"docker {' '.join(args)} failed: {done.err.strip()}", pytrace=False)
    return done.out.strip()


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args, "--no-engine-setup"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "COSIGN_PASSWORD": PASSWORD},
    )


def cosign(*args: str, folder: Path) -> None:
    done = RUNNER(["cosign", *args], cwd=folder, env={**os.environ, "COSIGN_PASSWORD": PASSWORD}, timeout=300)
    if not done.ok:
        pytest.fail(f"cosign {' '.join(args)} failed: {done.err.strip()}", pytrace=False)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A throwaway DOCKER_CONFIG, two key pairs (ours and another's), and a tiny .deb to add to an image."""
    require_engine()
    if RUNNER.image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: make it with `invoke base`", pytrace=False)
    folder = tmp_path_factory.mktemp("signing")
    keys = {}
    for who in ("ours", "other"):
        (folder / who).mkdir()
        cosign("generate-key-pair", folder=folder / who)
        keys[who] = folder / who / "cosign.key"
    package = folder / "package"
    (package / "DEBIAN").mkdir(parents=True)
    control = "Package: dlimages-extra\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n"
    (package / "DEBIAN/control").write_text(control)
    done = RUNNER(["dpkg-deb", "--build", str(package), str(folder / "extra.deb")])
    assert done.ok, done.err
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_CONFIG", str(folder / "docker-config"))
        yield {"folder": folder, **keys}


@pytest.fixture(scope="module")
def registries(setup: dict[str, Path]) -> Iterator[dict[str, str]]:
    """An open registry and one with basic auth (logged in through the throwaway DOCKER_CONFIG)."""
    env = {**os.environ, "REGISTRY_STATE_DIR": str(setup["folder"] / "registries")}
    started = {}
    for kind, options in (("open", []), ("auth", ["--auth", f"user:{PASSWORD}"])):
        name, port = f"pytest-{os.getpid()}-sign-{kind}", free_port()
        done = RUNNER([str(REGISTRY_SH), "start", name, str(port), *options], env=env)
        if not done.ok:
            pytest.fail(f"registry.sh start {name} failed:\n{done.out}{done.err}", pytrace=False)
        started[kind] = (name, f"127.0.0.1:{port}")
    docker("login", started["auth"][1], "-u", "user", "--password-stdin", stdin=PASSWORD)
    yield {kind: address for kind, (_, address) in started.items()}
    for name, _ in started.values():
        RUNNER([str(REGISTRY_SH), "stop", name], env=env)


@pytest.fixture(scope="module")
def images(setup: dict[str, Path]) -> Iterator[dict[str, str]]:
    """Local images: `good` (the base with stand-in dl-smoke and dl-bench), `other` (another file), `extra`
    (good plus a Debian package); tags removed at the end."""
    made = {}
    for kind, lines in (
        ("good", []),
        ("other", ["RUN echo other > /other"]),
        ("extra", ["COPY extra.deb /tmp/", "RUN dpkg -i /tmp/extra.deb && rm /tmp/extra.deb"]),
    ):
        context = setup["folder"] / f"context-{kind}"
        context.mkdir()
        (context / "stand-in").write_text(STAND_IN)
        (context / "extra.deb").write_bytes((setup["folder"] / "extra.deb").read_bytes())
        copy = "COPY --chmod=0755 stand-in /usr/local/bin/dl-smoke\nCOPY --chmod=0755 stand-in /usr/local/bin/dl-bench"
        # Labels as a cell's: the image's own version is its tag (verify checks the name against them).
        label = f"LABEL io.dlimages.cell={kind} org.opencontainers.image.version={kind}"
        (context / "Dockerfile").write_text("\n".join([f"FROM {BASE}", copy, label, *lines]) + "\n")
        made[kind] = f"{NAME}:{kind}"
        docker("buildx", "build", "--load", "--provenance=false", "--tag", made[kind], str(context))
    yield made
    # Every image of this run, under any name: the local tags, and what pushes and verify pulled from the registries.
    # By name, never by ID: another xdist worker's images of the same content share the ID, and --force would take
    # its tags too.
    listed = RUNNER.docker("image", "ls", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}").out
    names = set()
    for repository, tag, digest in (line.split() for line in listed.splitlines() if len(line.split()) == 3):
        if NAME in repository:
            names.add(f"{repository}:{tag}" if tag != "<none>" else f"{repository}@{digest}")
    if names:
        RUNNER.docker("image", "rm", *sorted(names))


def push(image: str, registry: str, tmp_path: Path, *flags: str) -> str:
    """`invoke push` of one local image; the registry ref it is under."""
    done = invoke("push", "--image", image, "--registry", registry, "--report", str(tmp_path / "report.json"), *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    return f"{registry}/{image}"


def verify(ref: str, key: Path) -> subprocess.CompletedProcess[str]:
    return invoke("verify", "--image", ref, "--key", str(key.with_suffix(".pub")))


def digest_of(ref: str) -> str:
    done = RUNNER(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}", "--format", "{{.Digest}}"],
        env={**os.environ, "REGISTRY_AUTH_FILE": str(Path(os.environ["DOCKER_CONFIG"]) / "config.json")},
    )
    assert done.ok, done.err
    return done.out.strip()


@pytest.mark.parametrize("kind", ["open", "auth"])
def test_a_signed_push_verifies_and_names_its_digest(
    kind: str, registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    ref = push(images["good"], registries[kind], tmp_path, "--sign-key", str(setup["ours"]))
    done = verify(ref, setup["ours"])
    assert done.returncode == 0, done.stdout + done.stderr
    repository = ref.rsplit(":", 1)[0]
    assert done.stdout.strip().splitlines()[-1] == f"verified {repository}@{digest_of(ref)}"
    assert f"0 Python packages = {attest.PYTHON_LOCK}" in done.stdout
    assert f"Debian packages = {attest.DPKG_STATUS}" in done.stdout


def test_two_pushes_attach_the_same_sbom_and_provenance(
    registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    documents = []
    for registry in registries.values():  # one image, two pushes: the same commit, the same bytes
        ref = push(images["good"], registry, tmp_path, "--sign-key", str(setup["ours"]))
        for kind in (attest.SBOM_TYPE, attest.PROVENANCE_TYPE):
            done = RUNNER(
                [
                    "cosign",
                    "verify-attestation",
                    "--key",
                    str(setup["ours"].with_suffix(".pub")),
                    "--type",
                    kind,
                    "--insecure-ignore-tlog=true",
                    "--allow-http-registry",
                    ref,
                ],
                timeout=300,
            )
            assert done.ok, done.err
            payloads = [json.loads(base64.b64decode(json.loads(line)["payload"])) for line in done.out.splitlines()]
            assert len(payloads) == 1  # pushed again: replaced, not piled up
            documents.append(json.dumps(payloads[0]["predicate"], sort_keys=True))
    assert documents[0:2] == documents[2:4]


@pytest.mark.parametrize(
    ("key", "password", "says"),
    [
        ("missing.key", PASSWORD, "no such file or directory"),
        ("env://DLIMAGES_TEST_NO_SUCH_KEY", PASSWORD, "env var $DLIMAGES_TEST_NO_SUCH_KEY not found"),
        ("awskms://garbage", PASSWORD, "kms specification should be in the format"),
        ("extra.deb", PASSWORD, "invalid pem block"),  # a file that is not a key
        ("ours", "wrong", "decryption failed ($COSIGN_PASSWORD is not this key's password)"),
        ("ours", None, "decryption failed (set $COSIGN_PASSWORD to the key's password"),  # unset: no prompt
    ],
)
def test_a_signing_key_that_does_not_load_stops_the_push_before_anything_is_sent(
    key: str,
    password: str | None,
    says: str,
    registries: dict[str, str],
    images: dict[str, str],
    setup: dict[str, Path],
) -> None:
    """Each was found by cosign only after the image was pushed and pulled back, leaving the release's immutable tag
    unsigned in the registry; an unset password made cosign prompt, unseen, for 300 s on a terminal. Now the key is
    loaded first: exit 2, the reason, and the registry never hears of the image (here on a terminal: no prompt)."""
    tag = f"key-{hashlib.sha256(f'{key} {password}'.encode()).hexdigest()[:12]}"
    docker("tag", images["good"], f"{NAME}:{tag}")
    key_ref = str(setup.get(key, setup["folder"] / key)) if "://" not in key else key
    env = {name: value for name, value in os.environ.items() if name != "COSIGN_PASSWORD"}
    env |= {"COSIGN_PASSWORD": password} if password is not None else {}
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "push", "--image", f"{NAME}:{tag}"]
    terminal, other = os.openpty()
    try:
        done = subprocess.run(
            [*argv, "--registry", registries["open"], "--sign-key", key_ref, "--no-engine-setup"],
            stdin=other,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
    finally:
        os.close(terminal)
        os.close(other)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "nothing was pushed" in done.stderr, done.stderr
    manifest = f"http://{registries['open']}/v2/{NAME}/manifests/{tag}"
    accept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
    asked = RUNNER(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", f"Accept: {accept}", manifest])
    assert asked.out == "404", f"the registry has {NAME}:{tag}: {asked.out}"


def skopeo_copy(source: str, target: str) -> None:
    """What anyone with write access to the registry, and no key, can do: put an image under another tag."""
    argv = ["skopeo", "copy", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false"]
    done = RUNNER([*argv, f"docker://{source}", f"docker://{target}"], timeout=300)
    assert done.ok, done.err


def test_a_signed_image_under_another_cells_tag_an_older_release_or_another_repository_is_refused(
    registries: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    """Finding 1: one cell's signed image copied with its signature under another cell's tag verified, smoke ran
    it; anyone who can write to the registry could roll a tag back to an older signed build. Now the name must hold
    the image its labels say: the cell matrix.yaml gives the tag, this release's version, the signed repository."""
    from dlimages.generate.project import Project

    a, b = [c for c in Project(REPO).expansion.cells if c.framework == "pytorch"][:2]
    registry, key = registries["open"], str(setup["ours"])

    def signed(cell: Any, version: str) -> str:
        """An image labelled as `cell` of the release `version` names, pushed under its own tag and signed."""
        context = tmp_path / version
        context.mkdir()
        labels = f"LABEL io.dlimages.cell={cell.slug} org.opencontainers.image.version={version}"
        (context / "Dockerfile").write_text(f"FROM {BASE}\n{labels}\n")
        local = f"{NAME}/{cell.image}:{version}"  # under the matrix's name, below a prefix of this test's own
        docker("buildx", "build", "--load", "--provenance=false", "--tag", local, str(context))
        return push(local, registry, tmp_path, "--sign-key", key)

    a_ref = signed(a, a.immutable_tag)
    assert verify(a_ref, setup["ours"]).returncode == 0  # its own name: verified
    b_ref = f"{registry}/{NAME}/{b.image}:{b.immutable_tag}"
    skopeo_copy(a_ref, b_ref)  # substituted: a's image, signed, under b's tag
    done = verify(b_ref, setup["ours"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"names the cell {b.slug} ({b.immutable_tag}), but the image is {a.slug} ({a.immutable_tag})" in done.stderr
    older = signed(a, a.immutable_tag.replace(a.immutable_tag.split("-", 1)[0], "v0.9", 1))
    assert verify(older, setup["ours"]).returncode == 0
    skopeo_copy(older, a_ref)  # rolled back: the older release's signed build under this release's tag
    done = verify(a_ref, setup["ours"])
    assert done.returncode == 1 and f"names the cell {a.slug} ({a.immutable_tag}), but the image is" in done.stderr
    elsewhere = f"{registry}/{NAME}-copy/{a.image}:{a.immutable_tag}"
    cosign("copy", "--allow-http-registry", older, elsewhere, folder=tmp_path)  # image and signature, elsewhere
    done = verify(elsewhere, setup["ours"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"signed as {older.rsplit(':', 1)[0]}, not as {elsewhere.rsplit(':', 1)[0]}" in done.stderr


def test_an_unsigned_image_fails(
    registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    ref = push(images["other"], registries["open"], tmp_path, "--no-sign")
    done = verify(ref, setup["ours"])
    assert done.returncode == 1
    assert f"{ref.rsplit(':', 1)[0]}@{digest_of(ref)}: not signed" in done.stderr


def test_a_tag_moved_to_another_manifest_fails(
    registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    registry = registries["open"]
    moved = f"{NAME}-moved:good"  # its own repository, under its own version (verify checks the name)
    docker("tag", images["good"], moved)
    ref = push(moved, registry, tmp_path, "--sign-key", str(setup["ours"]))
    assert verify(ref, setup["ours"]).returncode == 0
    docker("rmi", "--no-prune", ref)  # verify pulled the tag; the push below makes it again
    docker("tag", images["other"], moved)
    push(moved, registry, tmp_path, "--no-sign", "--force-overwrite")
    done = verify(ref, setup["ours"])
    RUNNER.docker("rmi", "--no-prune", moved)
    assert done.returncode == 1
    assert "not signed" in done.stderr and f"{ref} names this digest now: the tag was moved" in done.stderr


def test_a_signature_by_another_key_fails(
    registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    ref = push(images["other"], registries["auth"], tmp_path, "--sign-key", str(setup["other"]))
    done = verify(ref, setup["ours"])
    assert done.returncode == 1
    assert f"signed, but not by key {setup['ours'].with_suffix('.pub')}" in done.stderr


def test_an_sbom_that_does_not_match_the_image_fails(
    registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    """The SBOM was made, then a package was added to the image, then the image was signed and attested."""
    registry = registries["open"]
    good = push(images["good"], registry, tmp_path, "--no-sign")
    extra = push(images["extra"], registry, tmp_path, "--no-sign")
    from dlimages.publish.signing import image_facts

    facts = image_facts(images["good"], REPO)
    digest = f"{extra.rsplit(':', 1)[0]}@{digest_of(extra)}"
    key = ["--key", str(setup["ours"]), "--tlog-upload=false", "--allow-http-registry", "--yes"]
    cosign("sign", *key, digest, folder=tmp_path)
    for kind, document in ((attest.SBOM_TYPE, attest.sbom(facts)), (attest.PROVENANCE_TYPE, attest.provenance(facts))):
        (tmp_path / kind).write_bytes(document)
        cosign("attest", *key, "--type", kind, "--predicate", str(tmp_path / kind), digest, folder=tmp_path)
    assert good != extra
    done = verify(extra, setup["ours"])
    assert done.returncode == 1
    assert "the attestations do not describe this image" in done.stderr
    assert "in the image, not in the SBOM: dlimages-extra=1.0" in done.stderr


@pytest.mark.parametrize("change", ["purl", "duplicate", "malformed", "base"])
def test_signed_attestations_that_do_not_describe_the_image_to_the_purl_fail_without_a_traceback(
    change: str, registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    """Signed by our key, made from this very image, then changed: a Debian purl as it was before the os-release fix
    (pkg:deb/linux), a component listed twice, a document of another shape, another base in the provenance. Before,
    verify compared names and versions only (the first two passed), crashed on the third and never read the base."""
    from dlimages.publish.signing import image_facts

    alone = f"{NAME}-attest-{change}:v1"  # a repository of its own: its attestations stay its own
    docker("tag", images["good"], alone)
    ref = push(alone, registries["open"], tmp_path, "--no-sign")
    digest = f"{ref.rsplit(':', 1)[0]}@{digest_of(ref)}"
    facts = image_facts(alone, REPO)
    sbom, provenance = json.loads(attest.sbom(facts)), json.loads(attest.provenance(facts))
    deb = next(c for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/"))
    if change == "purl":
        deb["purl"] = deb["purl"].replace("pkg:deb/debian/", "pkg:deb/linux/").split("&distro=")[0] + "&distro=linux-"
    elif change == "duplicate":
        sbom["components"].append(dict(deb))
    elif change == "malformed":
        sbom = {"components": "none"}
    else:
        provenance["buildDefinition"]["internalParameters"]["BASE_NAME"] = "docker.io/library/debian:12"
    key = ["--key", str(setup["ours"]), "--tlog-upload=false", "--allow-http-registry", "--yes"]
    cosign("sign", *key, digest, folder=tmp_path)
    for kind, document in ((attest.SBOM_TYPE, sbom), (attest.PROVENANCE_TYPE, provenance)):
        (tmp_path / kind).write_text(json.dumps(document))
        cosign(
            "attest", *key, "--replace", "--type", kind, "--predicate", str(tmp_path / kind), digest, folder=tmp_path
        )
    done = verify(ref, setup["ours"])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    says = {
        "purl": "components whose purl, version or hashes differ: pkg:deb/debian/",
        "duplicate": "components listed twice: pkg:deb/debian/",
        "malformed": "an SBOM that is no CycloneDX document of ours",
        "base": "the provenance names the base docker.io/library/debian:12",
    }[change]
    assert "the attestations do not describe this image" in done.stderr and says in done.stderr, done.stderr


def test_a_missing_attestation_fails(
    registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    ref = push(images["extra"], registries["auth"], tmp_path, "--no-sign")
    digest = f"{ref.rsplit(':', 1)[0]}@{digest_of(ref)}"
    cosign(
        "sign",
        "--key",
        str(setup["ours"]),
        "--tlog-upload=false",
        "--allow-http-registry",
        "--yes",
        digest,
        folder=tmp_path,
    )
    done = verify(ref, setup["ours"])
    assert done.returncode == 1
    assert f"{digest}: no cyclonedx attestation signed by key" in done.stderr


@pytest.mark.parametrize("task", ["smoke", "bench"])
def test_smoke_and_bench_refuse_what_does_not_verify_and_run_the_verified_digest(
    task: str, registries: dict[str, str], images: dict[str, str], setup: dict[str, Path], tmp_path: Path
) -> None:
    registry = registries["open"]
    good = push(images["good"], registry, tmp_path, "--sign-key", str(setup["ours"]))
    unsigned = f"{NAME}:unsigned-{task}"
    docker("tag", images["other"], unsigned)
    bad = push(unsigned, registry, tmp_path, "--no-sign")
    RUNNER.docker("rmi", "--no-prune", unsigned)
    key = str(setup["ours"].with_suffix(".pub"))
    gpus = ["--no-gpus"] if task == "smoke" else []
    refused = invoke(task, "--image", bad, "--key", key, *gpus)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refused, does not verify" in refused.stderr and "stand-in" not in refused.stdout
    ran = invoke(task, "--image", good, "--key", key, *gpus)
    digest_ref = f"{good.rsplit(':', 1)[0]}@{digest_of(good)}"
    assert f"verified {digest_ref}" in ran.stdout
    if task == "smoke":  # --no-gpus: the stand-in runs
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "stand-in dl-smoke" in ran.stdout
    else:  # dl-bench always asks for the GPUs: this host has none, so the run of the digest is a skip
        assert ran.returncode == 77, ran.stdout + ran.stderr
        assert f"{digest_ref}: no NVIDIA container runtime on this host: skipped (exit 77)" in ran.stdout
