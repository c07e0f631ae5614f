"""The `dlimages` command: Invoke's own program over this repo's tasks.py, with one difference that Invoke cannot
be configured to make: a command line it cannot parse (an unknown task or flag, a missing or ill-typed flag value)
exits 2, the usage-error code of every task and payload script, instead of Invoke's 1.

`dlimages build --cuda 11.8 --torch 2.1` is `invoke build --cuda 11.8 --torch 2.1`; tasks.py is found the way
`invoke` finds it (from the current folder upwards).
"""

from __future__ import annotations

from invoke.exceptions import Exit, ParseError
from invoke.program import Program

from dlimages import __version__

USAGE_ERROR = 2


class DlimagesProgram(Program):
    """Invoke's Program, with parse errors (and Invoke's own ValueError for a flag of the wrong type) as exit 2."""

    def parse_core(self, argv: list[str] | None) -> None:
        try:
            super().parse_core(argv)
        except (ParseError, ValueError) as error:
            raise _usage_error(error) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except (ParseError, ValueError) as error:
            raise _usage_error(error) from None


def _usage_error(error: Exception) -> Exit:
    if isinstance(error, ParseError):
        return Exit(f"error: {error}", code=USAGE_ERROR)
    return Exit(f"error: a flag value has the wrong type ({error})", code=USAGE_ERROR)


program = DlimagesProgram(name="dlimages", binary="dlimages", version=__version__)


def main() -> None:
    program.run()


if __name__ == "__main__":
    main()
