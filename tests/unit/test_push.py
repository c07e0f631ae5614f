"""push.py without Docker: a fake `docker` that keeps tags and a registry in dicts and fails on cue."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dlimages.errors import InputError
from dlimages.push import (
    PushError,
    PushResult,
    build_report,
    failure_kind,
    image_manifest,
    parse_digest,
    plan_push,
    push_image,
    registry_ref,
    write_report,
)

LOCAL_ID = "sha256:" + "a" * 64
OTHER_ID = "sha256:" + "b" * 64
REF = "lab/pytorch-universal-dev:v1.0"
REG = "127.0.0.1:5000"
REMOTE = f"{REG}/{REF}"
REFUSED = 'Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused'

Reply = tuple[int, str, str]  # returncode, stdout, stderr


class FakeDocker:
    """Enough of the docker CLI for push.py: tags, a registry keyed by repo@digest, scripted failures."""

    def __init__(self, tags: dict[str, str] | None = None) -> None:
        self.tags = dict(tags if tags is not None else {REF: LOCAL_ID})
        self.registry: dict[str, str] = {}  # "repo@digest" -> image ID
        self.push_replies: list[Reply] = []  # consumed first, then pushes succeed
        self.pull_replies: list[Reply] = []
        self.pulled_id: str | None = None  # what a pull-back yields instead of the pushed image
        self.run_replies: dict[str, Reply] = {}
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert kwargs == {"capture_output": True, "text": True, "timeout": kwargs["timeout"], "check": False}
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
                return 0, json.dumps([info]), ""
            case ["tag", source, target]:
                self.tags[target] = self.tags[source]
                return 0, "", ""
            case ["push", remote]:
                if self.push_replies:
                    return self.push_replies.pop(0)
                repo, tag = remote.rsplit(":", 1)
                digest = "sha256:" + hashlib.sha256(self.tags[remote].encode()).hexdigest()
                self.registry[f"{repo}@{digest}"] = self.tags[remote]
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
            case ["run", "--rm", "--entrypoint", entrypoint, *_]:
                return self.run_replies[entrypoint]
        raise AssertionError(f"unexpected docker call: {args}")

    def verbs(self) -> list[str]:
        return [" ".join(call[1:3]) for call in self.calls]


def push(docker: FakeDocker, refs: Sequence[str] = (REF,), registries: Sequence[str] = (REG,), **kw: Any) -> Any:
    sleeps: list[float] = []
    results = push_image(list(refs), list(registries), run=docker, sleep=sleeps.append, **kw)
    return results, sleeps


def push_failing(docker: FakeDocker, registries: Sequence[str] = (REG,), **kw: Any) -> tuple[PushError, list[float]]:
    sleeps: list[float] = []
    with pytest.raises(PushError) as caught:
        push_image([REF], list(registries), run=docker, sleep=sleeps.append, **kw)
    return caught.value, sleeps


# --- registry text and refs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ("127.0.0.1:5000", "127.0.0.1:5000/lab/pytorch-universal-dev:v1.0"),
        ("localhost", "localhost/lab/pytorch-universal-dev:v1.0"),
        ("registry.example.com/team", "registry.example.com/team/lab/pytorch-universal-dev:v1.0"),
        ("[::1]:5000", "[::1]:5000/lab/pytorch-universal-dev:v1.0"),
    ],
)
def test_registry_ref(registry: str, expected: str) -> None:
    assert registry_ref(registry, REF) == expected


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("", "'' is empty"),
        ("http://127.0.0.1:5000", "has a scheme"),
        ("127.0.0.1:5000/", "ends with '/'"),
        ("127.0.0.1 :5000", "contains whitespace"),
        ("127.0.0.1:99999", "has port '99999', not a number from 1 to 65535"),
        ("127.0.0.1:x", "has port 'x'"),
        ("reg_istry.com", "has no valid host name ('reg_istry.com')"),
        ("myregistry", "would be read by docker as a Docker Hub namespace"),
        ("registry.example.com/Team", "has path part 'Team'"),
    ],
)
def test_registry_text_is_validated(registry: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        registry_ref(registry, REF)
    (problem,) = caught.value.problems
    assert problem.where == "--registry"
    assert message in problem.message
    assert problem.allowed.startswith("host[:port]")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("lab/x@sha256:" + "0" * 64, "is a digest reference"),
        ("Lab/x:v1", "is not a repository name"),
        ("lab/x:-v1", "has tag '-v1'"),
        ("ghcr.io/lab/x:v1", "already names a registry ('ghcr.io')"),
    ],
)
def test_image_ref_is_validated(ref: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        registry_ref(REG, ref)
    assert message in caught.value.problems[0].message


def test_plan_reports_every_problem_at_once_and_keeps_order() -> None:
    with pytest.raises(InputError) as caught:
        plan_push(["Bad:1", REF], ["myregistry", "http://x"])
    assert len(caught.value.problems) == 3
    plan = plan_push([REF, "lab/x:v1", REF], [REG, "localhost:5001", REG])
    assert [(t.registry, t.ref) for t in plan] == [
        (REG, REF),
        (REG, "lab/x:v1"),
        ("localhost:5001", REF),
        ("localhost:5001", "lab/x:v1"),
    ]
    assert plan[0].repository == f"{REG}/lab/pytorch-universal-dev" and plan[0].tag == "v1.0"


# --- classifying failures and reading output -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "kind"),
    [
        ("no basic auth credentials", "auth"),
        ("unauthorized: authentication required", "auth"),
        ("denied: requested access to the resource is denied", "auth"),
        ("error parsing HTTP 403 response body: unexpected end of JSON input", "auth"),
        (REFUSED, "transient"),
        ("read tcp 127.0.0.1:40000->127.0.0.1:5000: read: connection reset by peer", "transient"),
        ('Get "https://r.example.com/v2/": net/http: TLS handshake timeout', "transient"),
        ('Put "http://127.0.0.1:5000/v2/x/blobs/uploads/1": EOF', "transient"),
        ("received unexpected HTTP status: 503 Service Unavailable", "transient"),
        ("docker push timed out after 3600 s", "transient"),
        ("dial tcp: lookup nosuch.example.com: no such host", "unreachable"),
        ("name invalid: invalid repository name", "other"),
    ],
)
def test_failure_kind(output: str, kind: str) -> None:
    assert failure_kind(output) == kind


def test_parse_digest() -> None:
    digest = "sha256:" + "64165bfc" * 8
    output = f"bcac0a5b6318: Layer already exists\nci: digest: {digest} size: 529\n"
    assert parse_digest(output) == digest
    assert parse_digest(output, "ci") == digest
    two = f"a: digest: sha256:{'1' * 64} size: 1\nb: digest: sha256:{'2' * 64} size: 2\n"
    assert parse_digest(two, "a") == "sha256:" + "1" * 64
    assert parse_digest("Pushed\n") is None
    assert parse_digest(f"ci: digest: sha256:{'1' * 63} size: 1") is None


# --- pushing ---------------------------------------------------------------------------------------------------


def test_push_tags_pushes_verifies_and_removes_only_its_tag() -> None:
    docker = FakeDocker()
    results, sleeps = push(docker)
    (result,) = results
    assert result.ok and result.verified and result.attempts == 1 and result.error is None
    assert result.remote_ref == REMOTE
    assert result.digest is not None and f"{REG}/lab/pytorch-universal-dev@{result.digest}" in docker.registry
    assert sleeps == []
    assert ["docker", "tag", REF, REMOTE] in docker.calls
    assert ["docker", "pull", f"{REG}/lab/pytorch-universal-dev@{result.digest}"] in docker.calls
    assert docker.calls[-1] == ["docker", "rmi", "--no-prune", REMOTE]
    assert docker.tags[REF] == LOCAL_ID and REMOTE not in docker.tags


def test_transient_failure_is_retried_with_exponential_backoff() -> None:
    docker = FakeDocker()
    docker.push_replies = [(1, "", REFUSED), (1, "", "received unexpected HTTP status: 502 Bad Gateway")]
    results, sleeps = push(docker, backoff=2.0)
    assert results[0].ok and results[0].attempts == 3
    assert sleeps == [2.0, 4.0]


def test_timeout_counts_as_transient() -> None:
    docker = FakeDocker()
    calls = 0

    def hanging_once(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        nonlocal calls
        if argv[1] == "push" and calls == 0:
            calls += 1
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        return docker(argv, **kwargs)

    sleeps: list[float] = []
    (result,) = push_image([REF], [REG], run=hanging_once, sleep=sleeps.append, backoff=0.5)
    assert result.ok and result.attempts == 2 and sleeps == [0.5]


def test_auth_failure_is_not_retried_and_says_docker_login() -> None:
    docker = FakeDocker({REF: LOCAL_ID, "lab/x:v1": LOCAL_ID})
    docker.push_replies = [(1, "The push refers to repository [127.0.0.1:5000/lab/x]\n", "no basic auth credentials")]
    sleeps: list[float] = []
    with pytest.raises(PushError) as caught:
        push_image([REF, "lab/x:v1"], [REG, "localhost:5001"], run=docker, sleep=sleeps.append)
    message = f"{REG} refused the credentials for {REF}: run `docker login {REG}` (or check --registry)"
    assert message in str(caught.value)
    assert sleeps == []
    first, skipped, *others = caught.value.results
    assert first.attempts == 1 and first.error == message and not first.verified
    assert skipped.ref == "lab/x:v1" and skipped.attempts == 0 and skipped.error == message
    assert [r.ok for r in others] == [True, True]  # the other registry is still pushed to
    assert sum(call[1] == "push" for call in docker.calls) == 3
    assert docker.tags == {REF: LOCAL_ID, "lab/x:v1": LOCAL_ID}


def test_registry_down_fails_after_all_attempts_and_changes_nothing() -> None:
    docker = FakeDocker()
    docker.push_replies = [(1, "", REFUSED)] * 4
    error, sleeps = push_failing(docker, retries=3, backoff=2.0)
    (result,) = error.results
    assert result.attempts == 4 and sleeps == [2.0, 4.0, 8.0]
    assert result.error == f"{REG} is not reachable ({REFUSED}): is it running? nothing local was changed"
    assert docker.tags == {REF: LOCAL_ID}


def test_other_push_errors_are_not_retried() -> None:
    docker = FakeDocker()
    docker.push_replies = [(1, "", "name unknown: repository name not known to registry")]
    error, sleeps = push_failing(docker)
    assert error.results[0].attempts == 1 and sleeps == []
    assert f"{REG} rejected {REF}: name unknown" in str(error)


def test_verification_mismatch_fails() -> None:
    docker = FakeDocker()
    docker.pulled_id = OTHER_ID
    error, _ = push_failing(docker)
    (result,) = error.results
    assert result.digest is not None and not result.verified and not result.ok
    assert result.error is not None and result.error.startswith("verification failed:")
    assert OTHER_ID in result.error and LOCAL_ID in result.error
    assert REMOTE not in docker.tags and docker.tags[REF] == LOCAL_ID


def test_pull_back_failure_fails() -> None:
    docker = FakeDocker()
    docker.pull_replies = [(1, "", "Error response from daemon: manifest unknown")]
    error, _ = push_failing(docker)
    assert "but pulling it back failed: Error response from daemon: manifest unknown" in str(error)


def test_push_without_digest_in_output_fails() -> None:
    docker = FakeDocker()
    docker.push_replies = [(0, "The push refers to repository [x]\n", "")]
    error, _ = push_failing(docker)
    assert "printed no digest" in str(error)


def test_existing_remote_tag_is_reused_not_removed_and_another_image_is_refused() -> None:
    docker = FakeDocker({REF: LOCAL_ID, REMOTE: LOCAL_ID})
    results, _ = push(docker)
    assert results[0].ok and docker.tags[REMOTE] == LOCAL_ID
    assert not any(call[1] in ("tag", "rmi") for call in docker.calls)

    docker = FakeDocker({REF: LOCAL_ID, REMOTE: OTHER_ID})
    error, _ = push_failing(docker)
    assert "already tags another local image" in str(error)
    assert docker.verbs() == ["image inspect", "image inspect"]  # looked, touched nothing
    assert docker.tags[REMOTE] == OTHER_ID


def test_ref_rebuilt_during_push_keeps_the_temporary_tag_and_fails() -> None:
    docker = FakeDocker()

    def rebuilt_meanwhile(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        done = docker(argv, **kwargs)
        if argv[1] == "pull":
            docker.tags[REF] = OTHER_ID  # `invoke build` moved the tag while we pushed
        return done

    with pytest.raises(PushError) as caught:
        push_image([REF], [REG], run=rebuilt_meanwhile, sleep=lambda _: None)
    (result,) = caught.value.results
    assert result.verified and not result.ok  # the registry has what was pushed, but it is not REF any more
    assert result.error is not None and f"{REF} now names another image" in result.error
    assert docker.tags[REMOTE] == LOCAL_ID  # removing it would delete the pushed image
    assert not any(call[1] == "rmi" for call in docker.calls)


def test_missing_local_image_is_an_input_error_before_anything_runs() -> None:
    docker = FakeDocker({})
    with pytest.raises(InputError) as caught:
        push(docker, refs=[REF, "lab/x:v1"])
    assert [p.where for p in caught.value.problems] == [f"image '{REF}'", "image 'lab/x:v1'"]
    assert all(call[1] == "image" for call in docker.calls)


def test_engine_down_is_a_push_error() -> None:
    def no_engine(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        err = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
        return subprocess.CompletedProcess(argv, 1, "", err)

    with pytest.raises(PushError, match="the Docker engine is not reachable"):
        push_image([REF], [REG], run=no_engine)


@pytest.mark.parametrize(("retries", "backoff"), [(-1, 2.0), (3, -0.5)])
def test_negative_retries_or_backoff_are_input_errors(retries: int, backoff: float) -> None:
    with pytest.raises(InputError):
        push(FakeDocker(), retries=retries, backoff=backoff)


# --- report ----------------------------------------------------------------------------------------------------


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
    manifest = image_manifest(REF, docker)
    assert manifest == {
        "ref": REF,
        "id": LOCAL_ID,
        "size": 74502040,
        "repo_digests": [],
        "labels": {"b": "2"},
        "pip": {"Pip": "24", "torch": "2.1.2"},
        "dpkg": {"bash": "5.2.15-2+b7", "zlib1g": "1:1.2.13"},
    }
    assert [
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "/opt/venv/bin/python",
        REF,
        "-m",
        "pip",
        "list",
        "--format=json",
    ] in docker.calls
    assert image_manifest(REF, docker, python=None)["pip"] is None

    docker.run_replies["dpkg-query"] = (127, "", 'exec: "dpkg-query": executable file not found in $PATH')
    with pytest.raises(PushError, match=r"dpkg-query in lab/pytorch-universal-dev:v1\.0 failed: exec"):
        image_manifest(REF, docker, python=None)


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
    assert [p["remote_ref"] for p in data[0]["pushed"]] == [REMOTE, f"localhost:5001/{REF}"]
    assert set(data[0]["pushed"][1]) == {
        "registry", "ref", "remote_ref", "digest", "verified", "attempts", "error", "push_seconds", "verify_seconds",
    }  # fmt: skip
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert [p.name for p in path.parent.iterdir()] == ["push-report.json"]

    write_report(path, [])  # replaces, leaves no temporary file behind
    assert path.read_text(encoding="utf-8") == "[]\n"
    assert [p.name for p in path.parent.iterdir()] == ["push-report.json"]
