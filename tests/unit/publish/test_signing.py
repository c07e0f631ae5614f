"""Who signs and what verifies, from flags and environment; the cosign argv; reading cosign's answers. No engine:
the real signing and verification run in tests/image/test_signing_image.py."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from dlimages.core.errors import InputError
from dlimages.core.references import names_registry
from dlimages.core.runner import Result, Runner
from dlimages.publish import signing, verification


def test_signing_takes_the_flag_then_the_environment() -> None:
    assert signing.Signing.from_flags(None, False, False, False, env={}).enabled is False
    from_env = signing.Signing.from_flags(None, False, False, False, env={signing.SIGN_KEY_ENV: "env://K"})
    assert from_env.signers() == [["--key", "env://K", "--tlog-upload=false"]]
    both = signing.Signing.from_flags("k.key", True, False, True, env={})
    assert both.signers() == [["--key", "k.key"], []]  # the key's (with the log, as asked), then keyless
    assert signing.Signing.from_flags(None, False, True, False, env={signing.SIGN_KEY_ENV: "k"}).enabled is False


def test_no_sign_with_a_signer_is_a_usage_error() -> None:
    with pytest.raises(InputError, match="--no-sign: given with --sign-key"):
        signing.Signing.from_flags("k.key", False, True, False, env={})


def test_trust_needs_a_key_or_an_identity_and_says_which_flags() -> None:
    with pytest.raises(InputError) as raised:
        signing.Trust.from_flags(None, None, None, False, env={})
    assert "--key cosign.pub" in raised.value.report() and "--no-verify" in raised.value.report()
    with pytest.raises(InputError, match="not a regular expression"):
        signing.Trust.from_flags(None, "^(", None, False, env={})
    with pytest.raises(InputError, match="given with --key"):
        signing.Trust.from_flags("k.pub", "^x", None, False, env={})


def test_trust_flags_for_a_key_and_for_an_identity(tmp_path: Path) -> None:
    public = tmp_path / "k.pub"
    public.write_text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n")
    assert signing.Trust.from_flags(str(public), None, None, False, env={}).flags() == [
        "--key",
        str(public),
        "--insecure-ignore-tlog=true",
    ]
    assert signing.Trust.from_flags("env://K", None, None, False, env={}).flags()[:2] == ["--key", "env://K"]
    anchored = r"^https://github\.com/o/r/\.github/workflows/images\.yml@refs/heads/main$"
    keyless = signing.Trust.from_flags(None, None, None, False, env={signing.IDENTITY_ENV: anchored})
    assert keyless.flags() == [
        "--certificate-identity-regexp",
        anchored,
        "--certificate-oidc-issuer",
        signing.GITHUB_ISSUER,
    ]


def test_a_verify_key_that_is_no_public_key_is_refused_before_any_pull(tmp_path: Path) -> None:
    # Before: found by cosign after the image was pulled, with a reason that pointed elsewhere.
    (tmp_path / "cosign.key").write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nx\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    for name, says in (
        ("missing.pub", "cannot be read (No such file or directory)"),
        ("cosign.key", "is a private key: verify with its public half (cosign.pub)"),
        ("notes.txt", "is no PEM public key"),
    ):
        with pytest.raises(InputError, match=re.escape(says)):
            signing.Trust.from_flags(str(tmp_path / name), None, None, False, env={})


@pytest.mark.parametrize(
    ("ref", "named"),
    [
        ("127.0.0.1:5000/lab/x:v1", True),
        ("ghcr.io/org/x:v1", True),
        ("localhost/x", True),
        ("lab/pytorch-universal-dev:v1.0", False),
        ("ubuntu:22.04", False),
    ],
)
def test_names_registry_reads_the_first_component_as_docker_does(ref: str, named: bool) -> None:
    assert names_registry(ref) is named


def fake(answers: dict[str, Result]) -> Runner:
    """A runner answering by the command's first two words."""

    def run(argv: list[str], **_: object) -> object:
        done = answers.get(" ".join(argv[:2]), Result(tuple(argv), 0))

        class Completed:
            returncode, stdout, stderr = done.code, done.out, done.err

        return Completed()

    return Runner(run=run)  # type: ignore[arg-type]


def test_an_empty_sign_key_is_refused_not_taken_for_no_signing() -> None:
    # Before: `--sign-key ''` pushed unsigned with exit 0.
    with pytest.raises(InputError, match="--sign-key: is empty"):
        signing.Signing.from_flags("", False, False, False, env={signing.SIGN_KEY_ENV: "k.key"})


def test_the_key_is_loaded_before_anything_is_pushed_and_cosign_is_never_at_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[list[str], dict[str, object]]] = []

    def run(argv: list[str], **kwargs: object) -> object:
        calls.append((argv, kwargs))

        class Completed:
            returncode, stdout = 1, ""
            stderr = "Error: decrypt: encrypted: decryption failed\nerror during command execution: ..."

        return Completed()

    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    with pytest.raises(InputError) as raised:
        signing.Signing("k.key").check(Runner(run=run))  # type: ignore[arg-type]
    [(argv, kwargs)] = calls
    assert argv == ["cosign", "public-key", "--key", "k.key"]
    env = kwargs["env"]
    assert kwargs["input"] == "" and isinstance(env, dict) and env["COSIGN_PASSWORD"] == ""
    said = str(raised.value)
    assert said.startswith("error: --sign-key 'k.key': cannot be loaded: decrypt: encrypted: decryption failed")
    assert "set $COSIGN_PASSWORD" in said and "nothing was pushed" in said
    signing.Signing(None).check(Runner(run=run))  # type: ignore[arg-type]
    assert len(calls) == 1  # nothing to load without a key


def test_resolve_takes_the_digest_the_pull_names() -> None:
    digest = "sha256:" + "a" * 64
    runner = fake({"docker pull": Result((), 0, f"v1: Pulling from lab/x\nDigest: {digest}\nStatus: up to date\n")})
    assert verification.resolve("127.0.0.1:5000/lab/x:v1", runner) == f"127.0.0.1:5000/lab/x@{digest}"
    failed = fake({"docker pull": Result((), 1, "", "manifest unknown")})
    with pytest.raises(signing.SigningError, match=r"cannot pull 127\.0\.0\.1:5000/lab/x:v1: manifest unknown"):
        verification.resolve("127.0.0.1:5000/lab/x:v1", failed)


def test_an_unsigned_tag_says_it_may_have_been_moved() -> None:
    digest = "sha256:" + "b" * 64
    runner = fake(
        {
            "docker pull": Result((), 0, f"Digest: {digest}\n"),
            "docker info": Result((), 0, '{"InsecureRegistryCIDRs": ["127.0.0.0/8"]}'),
            "cosign verify": Result(
                (), 10, "", "Error: no signatures found\nmain.go:74: error during command execution"
            ),
        }
    )
    trust = signing.Trust("k.pub")
    with pytest.raises(signing.SigningError) as raised:
        verification.verify("127.0.0.1:5000/lab/x:v1", trust, runner)
    assert str(raised.value) == (
        f"127.0.0.1:5000/lab/x@{digest}: not signed (127.0.0.1:5000/lab/x:v1 names this digest now: the tag was "
        "moved, or the image never signed)"
    )


def test_predicates_are_read_from_dsse_envelopes() -> None:
    statement = {"predicateType": "https://cyclonedx.org/bom", "predicate": {"bomFormat": "CycloneDX"}}
    line = json.dumps({"payload": base64.b64encode(json.dumps(statement).encode()).decode()})
    assert verification._predicates(f"{line}\n", "r") == [{"bomFormat": "CycloneDX"}]
    with pytest.raises(signing.SigningError, match="printed none"):
        verification._predicates("Verification for r --\n", "r")


def test_the_repository_a_signature_was_made_for_is_read_from_what_cosign_verified() -> None:
    payload = {"critical": {"identity": {"docker-reference": "127.0.0.1:5057/lab/x"}, "image": {}}, "optional": None}
    out = "\nVerification for 127.0.0.1:5057/lab/x@sha256:... --\n" + json.dumps([payload]) + "\n"
    assert verification._signed_repositories(out) == {"127.0.0.1:5057/lab/x"}
    assert verification._signed_repositories("not json\n[broken\n") == set()
    assert verification._same_repository("127.0.0.1:5057/lab/x", "127.0.0.1:5057/lab/x")
    assert verification._same_repository("mirror.example/lab/x", "127.0.0.1:5057/lab/x")  # a mirror, same path
    assert verification._same_repository("mirror.example/team/lab/x", "127.0.0.1:5057/lab/x")  # below its own prefix
    assert not verification._same_repository("127.0.0.1:5057/lab/y", "127.0.0.1:5057/lab/x")  # copied elsewhere
    assert not verification._same_repository("127.0.0.1:5057/evil-lab/x", "127.0.0.1:5057/lab/x")


@pytest.mark.parametrize(
    "identity", [r"https://github\.com/o/r/", r"^https://github\.com/o/r/", r"https://github\.com/o/r/.*$", "^x\\$"]
)
def test_a_keyless_identity_must_be_anchored_at_both_ends(identity: str) -> None:
    # Before: `^https://github\.com/o/r/` was taken, and unanchored patterns reached cosign, which matches anywhere.
    with pytest.raises(InputError, match="is not anchored at both ends"):
        signing.Trust.from_flags(None, identity, None, False, env={})
