"""The build report without Docker: an image's manifest from a fake docker, and the report's JSON."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fake_docker import LOCAL_ID, REF, REG, REMOTE, FakeDocker

from dlimages.core.runner import Runner
from dlimages.publish.push import PushError
from dlimages.publish.pushplan import PushResult
from dlimages.publish.report import build_report, image_manifest, stored_layers, write_report


def test_image_manifest() -> None:
    docker = FakeDocker()
    docker.run_replies = {
        "/opt/venv/bin/python": (
            0,
            json.dumps([{"name": "torch", "version": "2.1.2"}, {"name": "Pip", "version": "24"}]),
            "",
        ),
        "dpkg-query": (0, "ii \tbash=5.2.15-2+b7\nrc \told=1\nii \tzlib1g=1:1.2.13\n", ""),
    }
    manifest = image_manifest(REF, Runner(docker))
    assert manifest == {
        "ref": REF,
        "id": LOCAL_ID,
        "size": 74502040,
        "repo_digests": [],
        "labels": {"b": "2"},
        "layers": [{"diff_id": "sha256:" + "c" * 64, "size": 74502020}, {"diff_id": "sha256:" + "d" * 64, "size": 20}],
        "pip": {"Pip": "24", "torch": "2.1.2"},
        "dpkg": {"bash": "5.2.15-2+b7", "zlib1g": "1:1.2.13"},
    }
    assert [
        "docker",
        "run",
        "--rm",
        "--pull",
        "never",  # the image pushed is local: a name missing here is never pulled from elsewhere
        "--entrypoint",
        "/opt/venv/bin/python",
        REF,
        "-m",
        "pip",
        "list",
        "--format=json",
    ] in docker.calls
    assert image_manifest(REF, Runner(docker), python=None)["pip"] is None

    docker.run_replies["dpkg-query"] = (127, "", 'exec: "dpkg-query": executable file not found in $PATH')
    with pytest.raises(PushError, match=r"dpkg-query in lab/pytorch-universal-dev:v1\.0 failed: exec"):
        image_manifest(REF, Runner(docker), python=None)


def test_report_json_shape_sorted_and_atomic(tmp_path: Path) -> None:
    results = [
        PushResult("localhost:5001", REF, f"localhost:5001/{REF}", "sha256:" + "1" * 64, True, 1, None, 1.25, 0.5),
        PushResult(REG, REF, REMOTE, "sha256:" + "1" * 64, True, 2, None, 1.0, 0.25),
    ]
    entries = build_report(results, {REF: {"id": LOCAL_ID, "size": 1}})
    path = tmp_path / "out" / "push-report.json"
    write_report(path, entries)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert [entry["ref"] for entry in data] == [REF]
    assert data[0]["image"] == {"id": LOCAL_ID, "size": 1}
    assert data[0]["base"] == {"name": None, "digest": None}  # built elsewhere, without the labels
    assert [p["remote_ref"] for p in data[0]["pushed"]] == [REMOTE, f"localhost:5001/{REF}"]
    assert set(data[0]["pushed"][1]) == {
        "registry", "ref", "remote_ref", "digest", "verified", "attempts", "error", "push_seconds", "verify_seconds",
    }  # fmt: skip
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert [p.name for p in path.parent.iterdir()] == ["push-report.json"]

    write_report(path, [])  # replaces, leaves no temporary file behind
    assert path.read_text(encoding="utf-8") == "[]\n"
    assert [p.name for p in path.parent.iterdir()] == ["push-report.json"]


def test_report_names_the_base_an_image_was_built_from() -> None:
    digest = "sha256:" + "9" * 64
    labels = {
        "org.opencontainers.image.base.name": "127.0.0.1:5000/mirror/dlimages/base:debian12",
        "org.opencontainers.image.base.digest": digest,
    }
    made_here = {
        "org.opencontainers.image.base.name": "dlimages/base:debian12",
        "org.opencontainers.image.base.digest": "",
    }
    [rehosted] = build_report([], {REF: {"labels": labels}})
    [local] = build_report([], {REF: {"labels": made_here}})
    assert rehosted["base"] == {"name": "127.0.0.1:5000/mirror/dlimages/base:debian12", "digest": digest}
    assert local["base"] == {"name": "dlimages/base:debian12", "digest": None}


def test_stored_layers_are_read_from_the_registry_manifest_and_totalled_in_the_report() -> None:
    zstd = "application/vnd.oci.image.layer.v1.tar+zstd"
    raw = json.dumps({"layers": [{"digest": "sha256:" + "e" * 64, "mediaType": zstd, "size": 1000}]}).encode()
    docker = FakeDocker()
    docker.manifest_replies = [(0, json.dumps({"Raw": base64.b64encode(raw).decode()}), "")]
    layers = stored_layers("127.0.0.1:5000/lab/x@sha256:" + "f" * 64, True, Runner(docker))
    assert layers == [{"digest": "sha256:" + "e" * 64, "media_type": zstd, "size": 1000}]
    assert docker.calls[-1][:5] == ["docker", "manifest", "inspect", "-v", "--insecure"]
    docker.manifest_replies = [(1, "", "no such manifest")]
    assert stored_layers("127.0.0.1:5000/lab/x@sha256:" + "f" * 64, True, Runner(docker)) is None
    result = PushResult("127.0.0.1:5000", REF, f"127.0.0.1:5000/{REF}", "sha256:" + "f" * 64, True)
    [entry] = build_report([result], {}, stored={result.remote_ref: layers})
    assert entry["pushed"][0]["compressed_size"] == 1000 and entry["pushed"][0]["layers"] == layers
