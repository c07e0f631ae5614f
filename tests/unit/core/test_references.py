"""Docker references without Docker: registry text, image refs and how they join."""

from __future__ import annotations

import pytest
from fake_docker import REF, REG

from dlimages.core.errors import InputError
from dlimages.core.references import image_problems, ref_problems, registry_ref


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
    ("registry", "ref", "where", "message"),
    [
        ("", REF, "--registry", "'' is empty"),
        ("http://127.0.0.1:5000", REF, "--registry", "has a scheme"),
        ("127.0.0.1:5000/", REF, "--registry", "ends with '/'"),
        ("127.0.0.1 :5000", REF, "--registry", "contains whitespace"),
        ("127.0.0.1:99999", REF, "--registry", "has port '99999', not a number from 1 to 65535"),
        ("127.0.0.1:x", REF, "--registry", "has port 'x'"),
        ("reg_istry.com", REF, "--registry", "has no valid host name ('reg_istry.com')"),
        ("myregistry", REF, "--registry", "would be read by docker as a Docker Hub namespace"),
        ("registry.example.com/Team", REF, "--registry", "has path part 'Team'"),
        (REG, "lab/x@sha256:" + "0" * 64, "image 'lab/x@sha256:" + "0" * 64 + "'", "is a digest reference"),
        (REG, "Lab/x:v1", "image 'Lab/x:v1'", "is not a repository name"),
        (REG, "lab/x:-v1", "image 'lab/x:-v1'", "has tag '-v1'"),
        (REG, "ghcr.io/lab/x:v1", "image 'ghcr.io/lab/x:v1'", "already names a registry ('ghcr.io')"),
        (REG, "--help", "image '--help'", "starts with '-' (docker would read it as an option)"),
        (REG, "", "image ''", "is empty"),
        (REG, "lab/x:v\u00e9", "image 'lab/x:v\u00e9'", "has whitespace or characters outside printable ASCII"),
        (REG, "lab/x:v\u0661", "image 'lab/x:v\u0661'", "has whitespace or characters outside printable ASCII"),
        (REG, "lab/" + "x" * 260 + ":v1", "image 'lab/" + "x" * 260 + ":v1'", "is longer than 255 characters"),
        ("127.0.0.1:\u0665\u0660\u0660\u0660", REF, "--registry", "not a number from 1 to 65535"),
        ("a" * 64 + ".example", REF, "--registry", "has a host name part of 64 characters; DNS allows 63"),
        ("r.example/" + "p" * 244, REF, "--registry", "is 254 characters long: too long to begin an image name"),
        ("r.example/" + "p" * 5000, REF, "--registry", "is 5010 characters long"),
    ],
)
def test_registry_and_image_ref_are_validated(registry: str, ref: str, where: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        registry_ref(registry, ref)
    (problem,) = caught.value.problems
    assert problem.where == where
    assert message in problem.message
    if where == "--registry":
        assert problem.allowed.startswith("host[:port]")


def test_image_problems_name_each_bad_image_once_with_the_grammar() -> None:
    problems = image_problems(["lab/x:v1", "-v", "-v", "a\nb"], where=".work/builds.json")
    assert [(p.where, p.message) for p in problems] == [
        (".work/builds.json '-v'", "starts with '-' (docker would read it as an option)"),
        (".work/builds.json 'a\\nb'", "has whitespace or characters outside printable ASCII"),
    ]
    assert problems[0].allowed.startswith("[registry[:port]/]repository[:tag]")
    assert ref_problems(REF) == [] and image_problems([REF, "127.0.0.1:5000/lab/x@sha256:" + "0" * 64]) == []
