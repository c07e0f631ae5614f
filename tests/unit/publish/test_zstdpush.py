"""--compression zstd without an engine: one `docker save` per image whatever the registries, skopeo's argv (fixed
level, plain HTTP only where dockerd would use it), the digest read back as `docker push` prints it."""

from __future__ import annotations

from pathlib import Path

from dlimages.core.runner import Runner
from dlimages.publish.push import push_image
from dlimages.publish.zstdpush import ZSTD_LEVEL, Archives

LOCAL_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64


def engine(seen: list[list[str]]) -> Runner:
    def run(argv: list[str], **_: object) -> object:
        seen.append(argv)
        out = ""
        if argv[:3] == ["docker", "image", "inspect"] or argv[:3] == ["docker", "inspect", "--format"]:
            out = LOCAL_ID
        if argv[0] == "skopeo":
            Path(argv[argv.index("--digestfile") + 1]).write_text(DIGEST + "\n")
        if argv[:2] == ["docker", "info"]:
            out = '{"InsecureRegistryCIDRs": ["127.0.0.0/8"]}'
        code = 1 if argv[:3] == ["docker", "manifest", "inspect"] else 0
        err = "no such manifest: x" if code else ""

        class Completed:
            returncode, stdout, stderr = code, out, err

        return Completed()

    return Runner(run=run)  # type: ignore[arg-type]


def test_zstd_pushes_save_once_and_copy_with_skopeo_at_a_fixed_level(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    archives = Archives(tmp_path)
    results = push_image(
        ["lab/x:v1"], ["127.0.0.1:5000", "registry.example.com"], runner=engine(seen), archives=archives
    )
    assert [r.digest for r in results] == [DIGEST, DIGEST] and all(r.ok for r in results)
    saves = [argv for argv in seen if argv[:2] == ["docker", "save"]]
    assert len(saves) == 1 and saves[0][-1] == "lab/x:v1"
    copies = [argv for argv in seen if argv[0] == "skopeo"]
    assert [argv[-1] for argv in copies] == [
        "docker://127.0.0.1:5000/lab/x:v1",
        "docker://registry.example.com/lab/x:v1",
    ]
    for argv in copies:
        level = argv[argv.index("--dest-compress-level") + 1]
        assert argv[argv.index("--dest-compress-format") + 1] == "zstd" and level == str(ZSTD_LEVEL)
        assert argv[-2] == f"oci-archive:{saves[0][3]}"  # the OCI layout in it: the config's bytes kept
    assert "--dest-tls-verify=false" in copies[0] and "--dest-tls-verify=false" not in copies[1]
    assert ["docker", "push", "127.0.0.1:5000/lab/x:v1"] not in seen  # never gzip through the engine
    archives.close()
    assert not archives.folder.exists()
