"""What dl-smoke and dl-bench share as commands: the grammar of the numbers they take, the exit codes their help
states, and how a usage error is reported. Standalone like them (stdlib and dl_stack beside it), Python 3.8.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

# dl_stack.py lies beside this file, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from . import dl_stack
else:
    import dl_stack

# ASCII digits only: int() also takes other scripts' digits ('\u0661\u0662\u0668'), '1_000' and spaces.
DIGITS = re.compile("[0-9]+")


def whole_number(text: str) -> int:
    """argparse type for a count of steps (bounds are checked with the other flags)."""
    if not DIGITS.fullmatch(text) or len(text) > 24:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    return int(text)


def command_parser(prog: str, description: str, failed: str) -> argparse.ArgumentParser:
    """The parser of command `prog`; its help ends with the exit codes, `failed` saying what exit 1 means."""
    codes = (dl_stack.EXIT_PASSED, dl_stack.EXIT_FAILED, failed, dl_stack.EXIT_USAGE, dl_stack.EXIT_SKIPPED)
    exits = "Exit {} passed, {} {}, {} usage error, {} no GPU.".format(*codes)
    return argparse.ArgumentParser(prog=prog, description=f"{description} {exits}")


def usage_error(parser: argparse.ArgumentParser, message: object) -> int:
    """Say what was wrong as argparse does (the usage, then `prog: error: message`): exit code 2."""
    parser.print_usage(sys.stderr)
    sys.stderr.write(f"{parser.prog}: error: {message}\n")
    return dl_stack.EXIT_USAGE
