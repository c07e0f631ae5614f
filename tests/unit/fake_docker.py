"""A fake `docker` CLI for unit tests of push and report: tags and a registry in dicts, failures on cue.

Hand it to the code under test as `Runner(FakeDocker())`: the runner calls it as it would call subprocess.run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from typing import Any

LOCAL_ID = "sha256:" + "a" * 64
OTHER_ID = "sha256:" + "b" * 64
REF = "lab/pytorch-universal-dev:v1.0"
REG = "127.0.0.1:5000"
REMOTE = f"{REG}/{REF}"
REFUSED = 'Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused'

Reply = tuple[int, str, str]  # returncode, stdout, stderr
REGISTRY_CONFIG = {"IndexConfigs": {}, "InsecureRegistryCIDRs": ["127.0.0.0/8"], "Mirrors": []}  # dockerd's default


def manifest(image_id: str) -> bytes:
    """The manifest a registry keeps for an image: its digest is what `docker push` prints."""
    return json.dumps({"schemaVersion": 2, "config": {"digest": image_id}, "layers": []}, indent=3).encode()


def digest_of(image_id: str) -> str:
    return "sha256:" + hashlib.sha256(manifest(image_id)).hexdigest()


def manifest_inspect(remote: str, image_id: str) -> str:
    """What `docker manifest inspect -v REMOTE` prints for a single-platform image (Docker 28 CLI)."""
    raw = manifest(image_id)
    descriptor = {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": digest_of(image_id)}
    data = {"Ref": remote, "Descriptor": descriptor, "Raw": base64.b64encode(raw).decode(), "SchemaV2Manifest": {}}
    return json.dumps(data, indent="\t")


class FakeDocker:
    """Enough of the docker CLI for push.py: tags, a registry keyed by repo@digest and by tag, scripted failures."""

    def __init__(self, tags: dict[str, str] | None = None) -> None:
        self.tags = dict(tags if tags is not None else {REF: LOCAL_ID})
        self.registry: dict[str, str] = {}  # "repo@digest" -> image ID
        self.remote_tags: dict[str, str] = {}  # "registry/repo:tag" -> the image ID the registry serves under it
        self.push_replies: list[Reply] = []  # consumed first, then pushes succeed
        self.manifest_replies: list[Reply] = []
        self.pull_replies: list[Reply] = []
        self.pulled_id: str | None = None  # what a pull-back yields instead of the pushed image
        self.run_replies: dict[str, Reply] = {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        expected = {"input": None, "capture_output": True, "text": True, "errors": "replace", "check": False}
        assert kwargs == {**expected, "timeout": kwargs["timeout"]}
        self.calls.append(list(argv))
        rc, out, err = self._answer(argv[1:])
        return subprocess.CompletedProcess(argv, rc, out, err)

    def _answer(self, args: list[str]) -> Reply:
        match args:
            case ["image", "inspect", "--format", "{{.Id}}", ref]:
                found = self.tags.get(ref)
                return (0, found + "\n", "") if found else (1, "", f"Error: No such image: {ref}")
            case ["image", "inspect", ref]:
                info = {"Id": self.tags[ref], "Size": 74502040, "RepoDigests": [], "Config": {"Labels": {"b": "2"}}}
                info["RootFS"] = {"Layers": ["sha256:" + "c" * 64, "sha256:" + "d" * 64]}
                return 0, json.dumps([info]), ""
            case ["history", "--human=false", "--no-trunc", "--format", _, _]:
                return 0, '20 "RUN /bin/sh -c echo hi > /hi"\n0 "ENV A=b"\n74502020 "debootstrap"\n', ""
            case ["tag", source, target]:
                self.tags[target] = self.tags[source]
                return 0, "", ""
            case ["info", "--format", "{{json .DriverStatus}}"]:
                return 0, '[["Backing Filesystem","extfs"]]\n', ""  # the classic image store
            case ["info", "--format", "{{json .RegistryConfig}}"]:
                return 0, json.dumps(REGISTRY_CONFIG) + "\n", ""
            case ["manifest", "inspect", "-v", *insecure, remote] if insecure in ([], ["--insecure"]):
                if self.manifest_replies:
                    return self.manifest_replies.pop(0)
                if remote not in self.remote_tags:
                    return 1, "", f"no such manifest: {remote}\n"
                return 0, manifest_inspect(remote, self.remote_tags[remote]) + "\n", ""
            case ["push", remote]:
                if self.push_replies:
                    return self.push_replies.pop(0)
                repo, tag = remote.rsplit(":", 1)
                digest = digest_of(self.tags[remote])
                self.registry[f"{repo}@{digest}"] = self.tags[remote]
                self.remote_tags[remote] = self.tags[remote]
                out = (
                    f"The push refers to repository [{repo}]\nbcac0a5b6318: Pushed\n{tag}: digest: {digest} size: 529\n"
                )
                return 0, out, ""
            case ["pull", pinned]:
                if self.pull_replies:
                    return self.pull_replies.pop(0)
                if pinned not in self.registry:
                    return 1, "", "Error response from daemon: manifest unknown"
                self.tags[pinned] = self.pulled_id or self.registry[pinned]
                return 0, f"Digest: {pinned.split('@')[1]}\n", ""
            case ["rmi", "--no-prune", ref]:
                del self.tags[ref]
                # As dockerd does: the repository's digest references go with its last tag.
                repo = ref.rsplit(":", 1)[0]
                if not any(name.startswith(f"{repo}:") for name in self.tags):
                    self.tags = {name: i for name, i in self.tags.items() if not name.startswith(f"{repo}@")}
                return 0, f"Untagged: {ref}\n", ""
            case ["run", "--rm", "--pull", "never", "--entrypoint", entrypoint, *_]:  # a local image only
                return self.run_replies[entrypoint]
        raise AssertionError(f"unexpected docker call: {args}")

    def verbs(self) -> list[str]:
        return [" ".join(call[1:3]) for call in self.calls]
