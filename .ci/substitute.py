"""CI: a signed CI image put under another name, as anyone with write access to the registry (and no key) can, is
refused by `invoke verify`: copied with its signature to another repository (cosign copy), put under another cell's
tag in its own repository (skopeo copy), and rolled back: an older release of the same cell, signed by the same key,
put under this release's tag. All passed verification before (issue 32, finding 1).

Usage: python .ci/substitute.py REGISTRY IMAGE OTHER-REPOSITORY PUBLIC-KEY
  IMAGE: a signed ref in REGISTRY without it (the PyTorch CI image); OTHER-REPOSITORY: another image's repository
  there (the TensorFlow image's); COSIGN_PASSWORD in the environment unlocks PUBLIC-KEY's private half (cosign.key
  beside it), which signs the older release. Adds the tags it needs under new names, puts IMAGE's tag back where it
  was; removes the pulls verify made and the older release's local image.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

registry, image, other_repository, public_key = sys.argv[1:5]
repository, tag = image.rsplit(":", 1)
source = f"{registry}/{image}"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)


def refused(target: str, says: str, *, ours: bool = True) -> None:
    """`invoke verify` of `target` must fail saying `says`; the local tag goes if this script made the name (`ours`)
    (verify itself puts back what the name was before a refusal)."""
    done = run("invoke", "verify", "--image", target, "--key", public_key, "--no-engine-setup")
    if ours:
        run("docker", "image", "rm", target)
    if done.returncode != 1 or says not in done.stderr or "Traceback" in done.stderr:
        sys.exit(f"substitute.py: FAILED: verify of {target} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    print(f"substitute.py: {target} refused: {done.stderr.strip().splitlines()[-1][:300]}")


# Another cell of the same image, as matrix.yaml names it.
cells = json.loads(run("invoke", "matrix", "--json").stdout)
other = next(c for c in cells if c["image"] == repository and c["tags"][0] != tag)
elsewhere = f"{registry}/{other_repository}:{tag}-copied"
copied = run("cosign", "copy", "--allow-http-registry", "--force", source, elsewhere)
if copied.returncode != 0:
    sys.exit(f"substitute.py: cosign copy failed: {copied.stderr}")
refused(elsewhere, f"signed as {registry}/{repository}, not as {registry}/{other_repository}")

swapped = f"{registry}/{repository}:{other['tags'][0]}"
flags = ["--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false"]
moved = run("skopeo", "copy", *flags, f"docker://{source}", f"docker://{swapped}")
if moved.returncode != 0:
    sys.exit(f"substitute.py: skopeo copy failed: {moved.stderr}")
refused(swapped, f"names the cell {other['cell']} ({other['tags'][0]}), but the image is")

# A rollback: release v0.9 of the same cell (the image, labelled as that release), pushed and signed by the same key as
# a release is, then put under this release's tag, as a writer to the registry without the key could.
older_version = "v0.9-" + image.rsplit(":", 1)[1].split("-", 1)[1]
older = f"{repository}:{older_version}"
with tempfile.TemporaryDirectory() as context:
    label = f"LABEL org.opencontainers.image.version={older_version}"
    (Path(context) / "Dockerfile").write_text(f"FROM {source}\n{label}\n")
    built = run("docker", "build", "--pull=false", "--tag", older, context)
if built.returncode != 0:
    sys.exit(f"substitute.py: docker build of {older} failed: {built.stderr}")
key = public_key.removesuffix(".pub") + ".key"
report = Path(__file__).resolve().parents[1] / ".work" / "substitute-report.json"
pushed = run("invoke", "push", "--image", older, "--registry", registry, "--sign-key", key, "--no-engine-setup",
             "--report", str(report))  # fmt: skip
run("docker", "image", "rm", older)
if pushed.returncode != 0:
    sys.exit(f"substitute.py: the signed push of {older} failed:\n{pushed.stdout}{pushed.stderr}")
own = run("invoke", "verify", "--image", f"{registry}/{older}", "--key", public_key, "--no-engine-setup")
run("docker", "image", "rm", f"{registry}/{older}")
if own.returncode != 0:
    sys.exit(f"substitute.py: {older} does not verify under its own tag:\n{own.stdout}{own.stderr}")
current = run("skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{source}").stdout.strip()
rolled = run("skopeo", "copy", *flags, f"docker://{registry}/{older}", f"docker://{source}")
if rolled.returncode != 0 or not current.startswith("sha256:"):
    sys.exit(f"substitute.py: the rollback copy failed: {rolled.stderr} (digest before: {current!r})")
try:
    refused(source, f"({older_version}): another image under this name", ours=False)
finally:
    back = run("skopeo", "copy", *flags, f"docker://{registry}/{repository}@{current}", f"docker://{source}")
    if back.returncode != 0:
        sys.exit(f"substitute.py: putting {source} back on {current} failed: {back.stderr}")
print("substitute.py: a signed image under another repository, another cell's tag, or an older release's signed image")
print("under this release's tag (a rollback) does not verify")
