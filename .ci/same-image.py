"""CI: the PyTorch cell built on the containerd image store (its OS packages from the local repository of the locked
files) and on the classic store (from the live archive) is one image.

Usage: python .ci/same-image.py CONTAINERD-LEDGER IMAGE   (with DOCKER_HOST on the classic store's engine)
The containerd store's build recorded its config digest in its ledger (.work/builds.json, copied); the classic
store's image ID is its config digest. Both must be equal: one commit, one image, whichever store built it.
"""

import json
import subprocess
import sys

ledger, image = sys.argv[1], sys.argv[2]
entries = [e for e in json.load(open(ledger, encoding="utf-8")) if e["ok"] and image in e["refs"]]
if len(entries) != 1 or not entries[0].get("image_id"):
    sys.exit(f"same-image.py: {ledger} records no build of {image}")
containerd = entries[0]["image_id"]
done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True)
classic = done.stdout.strip()
if done.returncode != 0 or not classic:
    sys.exit(f"same-image.py: the classic store has no {image}: {done.stderr.strip()}")
print(f"same-image.py: containerd store's config digest {containerd}")
print(f"same-image.py: classic store's image ID         {classic}")
if classic != containerd:
    sys.exit("same-image.py: FAILED: the two stores built two images from one commit")
print("same-image.py: one image on both stores")
