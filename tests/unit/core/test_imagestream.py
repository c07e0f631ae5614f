"""`docker save` as a stream without an engine: the tar reader against what tarfile writes (every header format, a
broken stream, a member read a part at a time), the CLI's byte stream, and which socket is the engine's."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from dlimages.core import imagestream
from dlimages.core.imagestream import CHUNK, ArchiveError, TarStream, _number, engine_socket
from dlimages.core.runner import byte_stream


def test_the_save_is_read_as_it_comes_and_its_end_is_reported() -> None:
    """byte_stream (core.runner), as docker_save uses it through the CLI: stdout as bytes, then the exit code and
    stderr; a program that cannot start is exit 127, not an exception."""
    stream, finish = byte_stream(["sh", "-c", "head -c 3000000 /dev/zero; echo gone >&2; exit 3"], 30)
    assert len(stream.read()) == 3_000_000
    done = finish()
    assert (done.code, done.err.strip()) == (3, "gone")
    stream, finish = byte_stream(["dlimages-no-such-program"], 30)
    assert stream.read() == b"" and finish().code == 127 and "cannot run" in finish().err


@pytest.mark.parametrize("form", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_the_tar_reader_reads_what_tarfile_reads_in_every_header_format(form: int) -> None:
    """Go's archive/tar (the engine's) may write ustar prefixes, PAX records or GNU long names: each member comes out
    with tarfile's name, size and bytes, directories are not files, and data larger than the buffer is whole."""
    deep = "blobs/" + "d" * 90 + "/" + "e" * 60  # over 100 bytes: a ustar prefix, a GNU long name or a PAX path
    files = {"index.json": b"{}", deep: os.urandom(CHUNK + 12345), "blobs/sha256/" + "a" * 64: b""}
    if form != tarfile.USTAR_FORMAT:
        files["blobs/" + "é" * 120] = b"non-ascii, long"  # PAX: a UTF-8 path record
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=form) as archive:
        archive.addfile(_directory("blobs"))
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    reader = TarStream(io.BytesIO(out.getvalue() + bytes(10240)))  # and padding after the end marker, as Go writes
    seen = {}
    for name, size, is_file in reader.members():
        if is_file:
            seen[name] = b"".join(bytes(chunk) for chunk in reader.data())
            assert len(seen[name]) == size
        else:
            assert name.rstrip("/") == "blobs"
    assert seen == files


def _directory(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def test_the_tar_reader_refuses_a_broken_stream() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        info = tarfile.TarInfo("blobs/sha256/" + "b" * 64)
        info.size = 5000
        archive.addfile(info, io.BytesIO(bytes(5000)))
    whole = out.getvalue()
    with pytest.raises(ArchiveError, match="ended inside a file"):
        reader = TarStream(io.BytesIO(whole[:3000]))
        for _ in reader.members():
            list(reader.data())
    garbled = bytearray(whole)
    garbled[10] ^= 0xFF
    with pytest.raises(ArchiveError, match="checksum"):
        list(TarStream(io.BytesIO(bytes(garbled))).members())


def test_tar_numbers_octal_and_base_256() -> None:
    assert _number(b"00000001750\0") == 1000
    assert _number(b"\0" * 12) == 0
    ten_gib = 10 << 30
    assert _number(bytes([0x80]) + ten_gib.to_bytes(11, "big")) == ten_gib  # GNU, for sizes over 8 GiB


@pytest.mark.parametrize(
    ("env", "config", "socket"),
    [
        ({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}, None, "/run/user/1000/docker.sock"),
        ({"DOCKER_HOST": "tcp://10.0.0.2:2376"}, None, None),
        ({"DOCKER_HOST": "ssh://node"}, None, None),
        ({}, None, "/var/run/docker.sock"),
        ({}, {"currentContext": "default"}, "/var/run/docker.sock"),
        ({}, {"currentContext": "rootless"}, None),
        ({"DOCKER_CONTEXT": "remote"}, None, None),
        ({"DOCKER_HOST": "unix:///x.sock", "DOCKER_CONTEXT": "remote"}, None, "/x.sock"),
    ],
)
def test_the_engine_socket_is_the_one_the_cli_would_use(
    tmp_path: Path, env: dict[str, str], config: dict[str, str] | None, socket: str | None
) -> None:
    """The image is read from the API socket only where the CLI would talk to that very socket; anything else (a TCP
    or SSH host, another context) goes through the CLI."""
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    assert engine_socket({**env, "DOCKER_CONFIG": str(tmp_path)}) == socket


def test_a_socket_that_does_not_answer_as_an_engine_leaves_the_save_to_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listening, or something that is not HTTP: `docker save` through the CLI, which says what is wrong."""
    import socket
    import tempfile
    import threading

    cli: list[list[str]] = []

    def through_cli(argv: list[str], timeout: float) -> tuple[io.BytesIO, None]:
        cli.append(list(argv))
        return io.BytesIO(), None

    monkeypatch.setattr(imagestream, "byte_stream", through_cli)
    # a unix socket's path has at most 107 bytes: pytest's tmp_path under a long TMPDIR (CI's) is longer
    with tempfile.TemporaryDirectory(prefix="zs-", dir="/tmp") as short:
        monkeypatch.setenv("DOCKER_HOST", f"unix://{short}/none.sock")
        imagestream.docker_save("lab/x:v1")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(f"{short}/garbage.sock")
            server.listen(1)

            def answer() -> None:
                peer, _ = server.accept()
                peer.recv(4096)
                peer.sendall(b"not http at all\r\n\r\n")
                peer.close()

            threading.Thread(target=answer, daemon=True).start()
            monkeypatch.setenv("DOCKER_HOST", f"unix://{short}/garbage.sock")
            imagestream.docker_save("lab/x:v1")
    assert cli == [["docker", "save", "lab/x:v1"]] * 2


def test_a_member_is_read_a_part_at_a_time_and_what_is_left_unread_is_skipped() -> None:
    """`read` gives exactly what is asked, fewer only at the member's end (a blob's first block sniffed, then
    the rest handed on); a member left half read is skipped to the next."""
    files = {"first": os.urandom(CHUNK + 700), "second": b"after"}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    reader = TarStream(io.BytesIO(out.getvalue()))
    members = reader.members()
    assert next(members) == ("first", CHUNK + 700, True)
    assert reader.read(512) == files["first"][:512]
    assert reader.read(CHUNK) == files["first"][512 : CHUNK + 512]
    assert reader.read(512) == files["first"][CHUNK + 512 :] and reader.read() == b""
    assert next(members) == ("second", 5, True)
    assert reader.read(2) == b"af"
    assert list(members) == []  # "ter" skipped, then the end
