"""Docker references without Docker: registry text, image refs and how they join."""

from __future__ import annotations

import pytest
from fake_docker import REF, REG

from dlimages.errors import InputError
from dlimages.references import registry_ref


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
