"""templates/assets/dl-compile, which byte-compiles what a uv step installed: the same bytes whatever the order the
files were written in, and whatever else the venv holds (python/cpython#129724: marshal's output depends on what the
process compiled before)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from dlimages.generate.lockproof import cell_python

SCRIPT = Path(__file__).resolve().parents[3] / "templates/assets/dl-compile"
# cpython#129724's reproducer: b's bytecode differs when a (which interns "foo") was compiled before it.
A = "import foo\n"
B = 'a = {"foo", 2, 3}\n\n\ndef f():\n    b = {"foo", 2, 3}\n'


# The effect shows from Python 3.12 on (3.11 gives b the same bytes either way): the images' newest Python, else this.
PYTHON = str(cell_python("3.13") or sys.executable)


def _venv(folder: Path) -> Path:
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    [site] = folder.glob("lib/python*/site-packages")
    return site


def _compile(venv: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "SOURCE_DATE_EPOCH")} | env
    return subprocess.run(
        [str(venv / "bin/python"), str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def _pycs(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*.pyc"))}


def test_the_same_modules_give_the_same_bytes_whatever_their_order_and_what_was_compiled_before(tmp_path: Path) -> None:
    venv = tmp_path / "venv"  # one path for both (a .pyc names its source's path)
    made = []
    for order in (("a.py", A), ("b.py", B)), (("b.py", B), ("a.py", A)):  # written the other way round
        shutil.rmtree(venv, ignore_errors=True)
        site = _venv(venv)
        (site / "pkg").mkdir()
        for name, text in order:
            (site / "pkg" / name).write_text(text)
        done = _compile(venv, PYTHONHASHSEED="0", SOURCE_DATE_EPOCH="1700000000")
        assert done.returncode == 0, done.stderr
        assert "2 modules compiled, 0 left as source" in done.stdout
        made.append(_pycs(site))
    assert made[0] == made[1] and len(made[0]) == 2
    # The control: b compiled alone, in a process of its own (as uv's workers may), is other bytes on this Python.
    b_pyc = next(name for name in made[1] if "/b." in name)
    (site / b_pyc).unlink()
    alone = f"import py_compile; py_compile.compile({str(site / 'pkg/b.py')!r})"
    environ = {"PYTHONHASHSEED": "0", "SOURCE_DATE_EPOCH": "1700000000", "PATH": os.environ["PATH"]}
    subprocess.run([str(venv / "bin/python"), "-c", alone], env=environ, check=True, timeout=60)
    if sys.version_info >= (3, 12) or PYTHON != sys.executable:
        assert (site / b_pyc).read_bytes() != made[1][b_pyc], "the order no longer matters: cpython#129724 is fixed"
    # Hash-based (PEP 552: flags 0b11, checked) under SOURCE_DATE_EPOCH, as pip and uv make them: no time inside.
    assert all(int.from_bytes(data[4:8], "little") == 0b11 for data in made[0].values())


def test_only_modules_without_bytecode_are_compiled_and_a_broken_one_stays_source(tmp_path: Path) -> None:
    site = _venv(tmp_path / "venv")
    (site / "old.py").write_text("x = 1\n")
    assert _compile(tmp_path / "venv", PYTHONHASHSEED="0").returncode == 0
    before = _pycs(site)
    (site / "new.py").write_text("y = 2\n")
    (site / "py2.py").write_text("print 'py2'\n")
    done = _compile(tmp_path / "venv", PYTHONHASHSEED="0")
    assert done.returncode == 0 and "1 modules compiled, 1 left as source" in done.stdout, done.stdout + done.stderr
    after = _pycs(site)
    assert {name: after[name] for name in before} == before  # the earlier layer's bytecode untouched
    [added] = set(after) - set(before)
    assert added.startswith("__pycache__/new.cpython-")


def test_without_a_fixed_hash_seed_it_refuses(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _venv(venv)
    done = _compile(venv)
    assert done.returncode == 2 and "PYTHONHASHSEED=0" in done.stderr
    assert not list(venv.rglob("*.pyc"))  # nothing compiled
