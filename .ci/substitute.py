"""CI: a signed CI image put under another name, as anyone with write access to the registry (and no key) can, is
refused by `invoke verify`: copied with its signature to another repository (cosign copy), and put under another
cell's tag in its own repository (skopeo copy). Both passed verification before (issue 32, finding 1).

Usage: python .ci/substitute.py REGISTRY IMAGE OTHER-REPOSITORY PUBLIC-KEY
  IMAGE: a signed ref in REGISTRY without it (the PyTorch CI image); OTHER-REPOSITORY: another image's repository
  there (the TensorFlow image's). Adds the tags it needs under new names; removes the pulls verify made.
"""

import json
import subprocess
import sys

registry, image, other_repository, public_key = sys.argv[1:5]
repository, tag = image.rsplit(":", 1)
source = f"{registry}/{image}"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)


def refused(target: str, says: str) -> None:
    done = run("invoke", "verify", "--image", target, "--key", public_key, "--no-engine-setup")
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
print("substitute.py: a signed image under another repository, or another cell's tag, does not verify")
