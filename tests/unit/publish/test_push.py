"""push.py without Docker: a fake `docker` that keeps tags and a registry in dicts and fails on cue; `docker push`
is streamed line by line as the runner streams it, with its progress shown."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fake_docker import LOCAL_ID, OTHER_ID, REF, REFUSED, REG, REMOTE, FakeDocker, digest_of, manifest_inspect

from dlimages.core.errors import InputError
from dlimages.core.runner import Runner
from dlimages.publish.push import PUSH_TIMEOUT_S, PushError, PushInterrupted, push_image
from dlimages.publish.pushplan import (
    RemoteTag,
    daemon_treats_as_insecure,
    failure_kind,
    parse_digest,
    parse_remote_tag,
    plan_push,
    retries_from_flag,
)

Docker = Callable[..., "subprocess.CompletedProcess[str]"]
LAYER = "bcac0a5b6318"  # the one layer FakeDocker's push reports
CAPTURED = {"input": None, "capture_output": True, "text": True, "errors": "replace", "check": False}


def runner(docker: Docker) -> Runner:
    """A Runner over a fake docker, as Runner(subprocess.run, stream_subprocess) is over the real one: captured
    calls go to it as to subprocess.run; a streamed one (docker push) too, its stdout and then its stderr handed on
    line by line. The image's layers (what the progress counts) are answered here: FakeDocker knows no layers."""

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:5] == ["image", "inspect", "--format", "{{json .RootFS.Layers}}"]:
            return subprocess.CompletedProcess(argv, 0, json.dumps([f"sha256:{LAYER}{'0' * 52}"]) + "\n", "")
        if argv[1] == "history":
            return subprocess.CompletedProcess(argv, 0, '74502183 "mmdebstrap --variant=minbase bookworm"\n', "")
        return docker(argv, **kwargs)

    def stream(argv: Sequence[str], _cwd: Path | None, on_line: Callable[[str], None]) -> int:
        done = run(list(argv), **CAPTURED, timeout=PUSH_TIMEOUT_S)
        for line in (done.stdout + done.stderr).splitlines():
            on_line(line)
        return done.returncode

    return Runner(run, stream)


def push(docker: FakeDocker, refs: Sequence[str] = (REF,), registries: Sequence[str] = (REG,), **kw: Any) -> Any:
    sleeps: list[float] = []
    kw.setdefault("out", io.StringIO())
    results = push_image(list(refs), list(registries), runner=runner(docker), sleep=sleeps.append, **kw)
    return results, sleeps


def push_failing(docker: FakeDocker, registries: Sequence[str] = (REG,), **kw: Any) -> tuple[PushError, list[float]]:
    sleeps: list[float] = []
    kw.setdefault("out", io.StringIO())
    with pytest.raises(PushError) as caught:
        push_image([REF], list(registries), runner=runner(docker), sleep=sleeps.append, **kw)
    return caught.value, sleeps


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


def test_a_ref_published_under_another_name_goes_there_only_and_leaves_no_tag() -> None:
    docker = FakeDocker()
    name = f"{REF}-cuda11.8-1a2b3c4d5e6f"
    results, _ = push(docker, names={REF: name})
    (result,) = results
    assert result.ok and (result.ref, result.remote_ref) == (REF, f"{REG}/{name}")
    pushed = [call[2] for call in docker.calls if call[1] == "push"]
    assert pushed == [f"{REG}/{name}"]  # never the release tag itself
    assert docker.calls[-1] == ["docker", "rmi", "--no-prune", f"{REG}/{name}"]
    assert docker.tags == {REF: LOCAL_ID}
    with pytest.raises(InputError, match=r"v1\.0-x y': has whitespace"):
        plan_push([REF], [REG], {REF: f"{REF}-x y"})


def test_transient_failure_is_retried_with_exponential_backoff() -> None:
    docker = FakeDocker()
    docker.push_replies = [(1, "", REFUSED), (1, "", "received unexpected HTTP status: 502 Bad Gateway")]
    results, sleeps = push(docker, backoff=2.0)
    assert results[0].ok and results[0].attempts == 3
    assert sleeps == [2.0, 4.0]


def test_a_push_that_hangs_is_stopped_at_its_timeout_and_retried() -> None:
    docker, out = FakeDocker(), io.StringIO()
    streamed = runner(docker)
    hung: list[float] = []

    def hanging_once(argv: Sequence[str], cwd: Path | None, on_line: Callable[[str], None]) -> int:
        if not hung:
            on_line(f"The push refers to repository [{REG}/lab/pytorch-universal-dev]")
            hung.append(time.monotonic())
            time.sleep(60)  # a registry that never answers; the deadline interrupts this
            raise AssertionError("the deadline did not interrupt the hung push")
        hung.append(time.monotonic())
        return streamed.stream_lines(argv, cwd, on_line)

    sleeps: list[float] = []
    before = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()  # the deadline is armed after this, so the retry comes at least 0.3 s later
    (result,) = push_image(
        [REF], [REG], runner=Runner(streamed.run, hanging_once), sleep=sleeps.append, backoff=0.5, timeout=0.3, out=out
    )
    assert result.ok and result.attempts == 2 and sleeps == [0.5]
    assert 0.3 <= hung[1] - started and hung[1] - hung[0] < 5
    first, *_ = out.getvalue().splitlines()
    assert first.endswith(f" -> {REG}: 0/1 layers, 0.0/74.5 MB, 0s, stopped after 0.3 s") and len(first) <= 100
    assert signal.getsignal(signal.SIGALRM) is before


def shown(out: io.StringIO) -> list[str]:
    """The progress lines push_image printed (no terminal: one per finished layer and per try's end), each checked
    to fit 100 columns and name the push (its ref's middle may be cut), given from the registry on."""
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 100 and line.startswith("push lab/p") for line in lines), lines
    return [line.split(f" -> {REG}", 1)[1] for line in lines]


def test_progress_is_shown_per_push_and_does_not_decide_how_it_failed() -> None:
    docker, out = FakeDocker(), io.StringIO()
    # A repository named like a failure: only docker's error lines (not its progress) say how a push failed.
    noise = f"The push refers to repository [{REG}/lab/denied-timeout]\n{LAYER}: Mounted from lab/unauthorized-eof\n"
    docker.push_replies = [(1, noise, "name unknown: repository name not known to registry")]
    error, sleeps = push_failing(docker, out=out)
    assert error.results[0].attempts == 1 and sleeps == []
    assert error.results[0].error == f"{REG} rejected {REF}: name unknown: repository name not known to registry"
    assert shown(out) == [
        ": 1/1 layers (1 already there), 74.5/74.5 MB, 0s",
        ": 1/1 layers (1 already there), 74.5/74.5 MB, 0s, failed (exit 1)",
    ]

    docker, out = FakeDocker(), io.StringIO()
    docker.push_replies = [(1, "", REFUSED)]
    push(docker, out=out)
    assert shown(out) == [
        ": 0/1 layers, 0.0/74.5 MB, 0s, failed (exit 1)",
        " (try 2): 1/1 layers, 74.5/74.5 MB, 0s",
        " (try 2): 1/1 layers, 74.5/74.5 MB, 0s, pushed",
    ]


def test_a_push_off_the_main_thread_installs_no_handlers_and_still_works() -> None:
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(push(FakeDocker())))
    thread.start()
    thread.join(timeout=30)
    ((result,), _) = found[0]
    assert result.ok


def test_the_image_layers_are_read_once_per_image() -> None:
    docker = FakeDocker({REF: LOCAL_ID, "lab/x:v1": LOCAL_ID})
    reads: list[list[str]] = []
    streamed = runner(docker)

    def counting(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "history" or "{{json .RootFS.Layers}}" in argv:
            reads.append(argv)
        return streamed.run(argv, **kwargs)

    results = push_image(
        [REF, "lab/x:v1"], [REG, "localhost:5001"], runner=Runner(counting, streamed.stream_lines), out=io.StringIO()
    )
    assert len(results) == 4 and all(result.ok for result in results)
    assert [argv[1] for argv in reads] == ["image", "history"]
    assert reads[0][-1] == reads[1][-1] == LOCAL_ID  # by image ID: a ref that moves meanwhile changes nothing


def test_auth_failure_is_not_retried_and_says_docker_login() -> None:
    docker = FakeDocker({REF: LOCAL_ID, "lab/x:v1": LOCAL_ID})
    docker.push_replies = [(1, "The push refers to repository [127.0.0.1:5000/lab/x]\n", "no basic auth credentials")]
    sleeps: list[float] = []
    with pytest.raises(PushError) as caught:
        push_image([REF, "lab/x:v1"], [REG, "localhost:5001"], runner=runner(docker), sleep=sleeps.append)
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
        push_image([REF], [REG], runner=runner(rebuilt_meanwhile), sleep=lambda _: None)
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
        push_image([REF], [REG], runner=runner(no_engine))


@pytest.mark.parametrize(("retries", "backoff"), [(-1, 2.0), (3, -0.5), (11, 2.0)])
def test_negative_retries_or_backoff_are_input_errors(retries: int, backoff: float) -> None:
    with pytest.raises(InputError):
        push(FakeDocker(), retries=retries, backoff=backoff)


@pytest.mark.parametrize("text", ["x", "", "-1", "11", "1e3", " 3", "\u0663", "99999999999999999999"])
def test_retries_flag_that_is_not_a_small_whole_number_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError) as caught:
        retries_from_flag(text)
    assert str(caught.value) == f"error: --retries: is {text!r} (allowed: a whole number from 0 to 10)"


def test_retries_flag_reads_ascii_digits() -> None:
    assert [retries_from_flag(text) for text in ("0", "3", "10")] == [0, 3, 10]


# --- immutable tags: never replaced in a registry unless asked -------------------------------------------------


def test_another_image_under_an_immutable_tag_is_refused_naming_both() -> None:
    docker = FakeDocker()
    docker.remote_tags[REMOTE] = OTHER_ID  # pushed earlier from another build
    error, _ = push_failing(docker)
    (result,) = error.results
    assert result.error == (
        f"{REMOTE} is an immutable tag and {REG} already has another image under it: the registry serves "
        f"manifest {digest_of(OTHER_ID)} (image {OTHER_ID}), {REF} is image {LOCAL_ID}; nothing was pushed. "
        "Release it under a new tag, or give --force-overwrite to replace the registry's image"
    )
    assert docker.remote_tags[REMOTE] == OTHER_ID
    assert not any(call[1] in ("tag", "push", "rmi") for call in docker.calls)
    assert ["docker", "manifest", "inspect", "-v", "--insecure", REMOTE] in docker.calls  # 127.0.0.0/8: plain HTTP


def test_the_same_image_under_an_immutable_tag_is_pushed_again() -> None:
    docker = FakeDocker()
    docker.remote_tags[REMOTE] = LOCAL_ID
    (result,), _ = push(docker)
    assert result.ok and result.digest == digest_of(LOCAL_ID)


@pytest.mark.parametrize("options", [{"moving": {REF}}, {"force_overwrite": True}], ids=["moving-tag", "forced"])
def test_a_moving_tag_or_force_overwrite_replaces_the_registrys_image(options: dict[str, Any]) -> None:
    docker = FakeDocker()
    docker.remote_tags[REMOTE] = OTHER_ID
    (result,), _ = push(docker, **options)
    assert result.ok and docker.remote_tags[REMOTE] == LOCAL_ID
    assert not any(call[1] == "manifest" for call in docker.calls)


def test_a_registry_that_refuses_to_show_the_tag_is_not_pushed_to() -> None:
    docker = FakeDocker()
    docker.manifest_replies = [(1, "", 'Get "http://127.0.0.1:5000/v2/lab/x/manifests/v1": no basic auth credentials')]
    error, sleeps = push_failing(docker)
    assert error.results[0].error == (
        f"{REG} refused the credentials for {REF}: run `docker login {REG}` (or check --registry)"
    )
    assert sleeps == [] and not any(call[1] in ("tag", "push") for call in docker.calls)


def test_an_unreadable_answer_about_the_tag_refuses_the_push() -> None:
    docker = FakeDocker()
    docker.manifest_replies = [(0, "not json", "")]
    error, _ = push_failing(docker)
    assert "cannot read what 127.0.0.1:5000 serves under the immutable tag v1.0" in str(error)
    assert "--force-overwrite pushes without looking" in str(error)


def test_parse_remote_tag() -> None:
    assert parse_remote_tag(manifest_inspect(REMOTE, OTHER_ID)) == RemoteTag(digest_of(OTHER_ID), OTHER_ID)
    index = json.dumps([json.loads(manifest_inspect(REMOTE, OTHER_ID))] * 2)
    assert parse_remote_tag(index) == RemoteTag(None, None, 2)
    assert RemoteTag(None, None, 2).describe() == "a multi-platform index of 2 images"
    forged = json.loads(manifest_inspect(REMOTE, OTHER_ID))
    forged["Descriptor"]["digest"] = digest_of(LOCAL_ID)  # does not hash the bytes shown
    assert parse_remote_tag(json.dumps(forged)) is None
    assert parse_remote_tag("") is None and parse_remote_tag("{}") is None


@pytest.mark.parametrize(
    ("registry", "insecure"),
    [
        ("127.0.0.1:5000", True),
        ("localhost:5000", True),
        ("10.1.2.3:5000", True),  # in the configured CIDR
        ("10.9.9.9:5000/team", False),
        ("registry.lan:5000", True),  # listed by name
        ("registry.example.com", False),
        ("[::1]:5000", False),  # dockerd's default CIDR is IPv4 only
    ],
)
def test_manifest_reads_skip_tls_only_where_dockerd_does(registry: str, insecure: bool) -> None:
    config = {
        "InsecureRegistryCIDRs": ["127.0.0.0/8", "10.1.0.0/16", "not-a-cidr"],
        "IndexConfigs": {"registry.lan:5000": {"Secure": False}, "docker.io": {"Secure": True}},
    }
    assert daemon_treats_as_insecure(registry, config) is insecure


# --- SIGINT and SIGTERM during a push --------------------------------------------------------------------------


@pytest.fixture
def no_signal_escapes() -> Iterator[None]:
    """Should push_image install no handlers of its own, a signal fails the test instead of stopping pytest."""

    def fail(signum: int, _frame: object) -> None:
        raise RuntimeError(f"{signal.Signals(signum).name} reached the test: push_image did not handle it")

    previous = {number: signal.signal(number, fail) for number in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in previous.items():
        signal.signal(number, handler)


def signal_during(docker: FakeDocker, verbs: dict[str, signal.Signals]) -> Callable[..., Any]:
    """A docker that receives a signal (sent to this very process) while it runs the given verbs."""

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        sent = verbs.pop(argv[1], None)
        if sent is not None:
            os.kill(os.getpid(), sent)
        return docker(argv, **kwargs)

    return run


@pytest.mark.usefixtures("no_signal_escapes")
@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_the_push_removes_the_temporary_tag_and_says_so(sent: signal.Signals, code: int) -> None:
    docker = FakeDocker()
    with pytest.raises(PushInterrupted) as caught:
        push_image([REF], [REG], runner=runner(signal_during(docker, {"push": sent})), sleep=lambda _: None)
    assert (caught.value.signal_name, caught.value.exit_code) == (sent.name, code)
    assert str(caught.value) == (
        f"interrupted by {sent.name} while pushing {REF} to {REG}: the temporary tag {REMOTE} was removed, and "
        f"nothing else local was changed; {REG} has {REMOTE} only if its upload had finished.\n"
        "0 pushes were finished and verified before that."
    )
    assert docker.tags == {REF: LOCAL_ID}
    assert signal.getsignal(sent) is not signal.SIG_DFL  # the handler from before is back


@pytest.mark.usefixtures("no_signal_escapes")
def test_a_second_signal_does_not_cut_the_cleanup_short() -> None:
    docker = FakeDocker({REF: LOCAL_ID, "lab/x:v1": LOCAL_ID})
    verbs = {"push": signal.SIGTERM, "rmi": signal.SIGINT}
    with pytest.raises(PushInterrupted) as caught:
        push_image([REF, "lab/x:v1"], [REG], runner=runner(signal_during(docker, verbs)), sleep=lambda _: None)
    assert caught.value.signal_name == "SIGTERM" and docker.tags == {REF: LOCAL_ID, "lab/x:v1": LOCAL_ID}
    assert not any(call[1] in ("tag", "push") and "lab/x" in call[-1] for call in docker.calls)  # nor begun


@pytest.mark.usefixtures("no_signal_escapes")
def test_a_signal_while_untagging_after_a_push_lets_the_untag_finish_then_stops() -> None:
    docker = FakeDocker({REF: LOCAL_ID, "lab/x:v1": LOCAL_ID})
    with pytest.raises(PushInterrupted) as caught:
        push_image([REF, "lab/x:v1"], [REG], runner=runner(signal_during(docker, {"rmi": signal.SIGTERM})), sleep=print)
    assert str(caught.value) == (
        "interrupted by SIGTERM: no temporary tag is left and nothing local was changed.\n"
        "1 push was finished and verified before that."
    )
    assert [result.ok for result in caught.value.results] == [True]
    assert docker.tags == {REF: LOCAL_ID, "lab/x:v1": LOCAL_ID}
