"""A password given inside a flag's value (USER:PASSWORD@HOST) never comes back in a message."""

from __future__ import annotations

import pytest

from dlimages.core.errors import InputError, Problem, redact

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("user:s3cret@127.0.0.1:5000", "user:***@127.0.0.1:5000"),
        ("'user:s3cret@10.0.0.1:5000/lab/x:v1'", "'user:***@10.0.0.1:5000/lab/x:v1'"),
        ("http://user:s3cret@mirror.example/debian", "http://user:***@mirror.example/debian"),
        ("https://u%40x:p%3Aq@h.example/", "https://u%40x:***@h.example/"),
        # Image references pinned by digest keep their tag.
        (f"lab/x:v1@{DIGEST}", f"lab/x:v1@{DIGEST}"),
        (f"127.0.0.1:5000/lab/x:v1@{DIGEST}", f"127.0.0.1:5000/lab/x:v1@{DIGEST}"),
        ("127.0.0.1:5000/lab/x:v1", "127.0.0.1:5000/lab/x:v1"),
    ],
)
def test_a_password_is_replaced_and_nothing_else(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_an_input_error_never_shows_the_password() -> None:
    # Before: `--registry user:s3cret@host` was refused with the password in the message.
    error = InputError([Problem("--registry", "'user:s3cret@host:5000' has no valid host name", "host[:port]")])
    assert "s3cret" not in error.report() and "s3cret" not in str(error)
