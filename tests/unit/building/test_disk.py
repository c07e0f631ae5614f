"""disk.py without Docker: the flag, where free space is known and where it is not (an engine elsewhere, a data root
this user cannot see), and the read-only report with the engine's own commands."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dlimages.building import disk
from dlimages.core.errors import InputError
from dlimages.core.runner import Runner


def engine(root: Path, endpoint: str) -> Runner:
    """A runner whose `docker info` names `root` and whose current context is `endpoint`."""

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "info":
            return subprocess.CompletedProcess(argv, 0, f'"{root}" "overlay2"\n', "")
        if argv[1] == "context":
            return subprocess.CompletedProcess(argv, 0, f"{endpoint}\n", "")
        return subprocess.CompletedProcess(argv, 0, "TYPE  TOTAL\nImages  3\n", "")

    return Runner(run=run)


@pytest.mark.parametrize("value", ["abc", "\uff11", "-1", "", "1.5", "9999999"])
def test_need_is_a_whole_number_of_gb_in_ascii_digits(value: str) -> None:
    with pytest.raises(InputError) as raised:
        disk.need_from_flag(value)
    assert "--need" in raised.value.report() and "whole number of GB" in raised.value.report()


def test_need_is_counted_in_bytes() -> None:
    assert disk.need_from_flag("40") == 40 * disk.GB and disk.need_from_flag("0") == 0


def test_a_local_engine_reports_the_free_space_of_its_data_roots_file_system(tmp_path: Path) -> None:
    root = disk.data_root(engine(tmp_path, "unix:///run/docker.sock"))
    assert root is not None and root.path == tmp_path and root.free is not None
    assert abs(root.free - shutil.disk_usage(tmp_path).free) < disk.GB


def test_a_data_root_this_user_cannot_see_is_reported_not_a_traceback(tmp_path: Path) -> None:
    root = disk.data_root(engine(tmp_path / "gone", "unix:///run/docker.sock"))
    assert root is not None and root.free is None and "not visible to this user" in root.why_unknown
    assert disk.shortfall(root, 10**15) is None  # unknown is not "too little"
    assert "free: unknown: " in "\n".join(disk.describe(root, "TYPE TOTAL"))


def test_an_engine_on_another_machine_is_never_measured_here(tmp_path: Path) -> None:
    root = disk.data_root(engine(tmp_path, "tcp://build-host:2376"))
    assert root is not None and root.free is None and "not on this machine" in root.why_unknown


def test_the_report_names_the_engines_own_commands_and_runs_none(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    inner = engine(tmp_path, "unix:///run/docker.sock")

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return inner.run(argv, **kwargs)

    runner = Runner(run=run)
    root = disk.data_root(runner)
    assert root is not None
    text = "\n".join(disk.describe(root, disk.system_df(runner)))
    assert "docker builder prune" in text and "docker image prune" in text and "Images  3" in text
    assert all(argv[1] in ("info", "context", "system") for argv in calls)  # it only asks


def test_too_little_free_space_says_how_much_and_where_to_look(tmp_path: Path) -> None:
    root = disk.DataRoot(tmp_path, "overlay2", "unix:///run/docker.sock", 2 * disk.GB)
    message = disk.shortfall(root, 8 * disk.GB)
    assert message is not None and "2.0 GB free" in message and "8.0 GB needed" in message
    assert "`invoke disk`" in message
    assert disk.shortfall(root, disk.GB) is None
