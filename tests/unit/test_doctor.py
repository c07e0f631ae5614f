"""The GPU-node doctor: verdicts for every cell of the unit tests' matrix on known nodes, the JSON shape, flag
parsing, and the probe against canned nvidia-smi and docker output (no GPU, no Docker).

The cells come from conftest.py's `expansion`; these tests hold for any matrix that has the cells
`test_the_matrix_has_the_cells_these_tests_reason_about` names (the real one and the fixture both do).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from dlimages.cells import Cell, Expansion
from dlimages.doctor import (
    NO_DRIVER,
    NO_GPU,
    RUNTIME_MISSING,
    Gpu,
    Node,
    format_report,
    kernels_for,
    node_from_flags,
    parse_arch,
    parse_driver,
    probe_container_runtime,
    probe_host,
    report,
    verdict,
)
from dlimages.errors import InputError
from dlimages.runner import Runner

H100 = Node("535.104.05", (Gpu("NVIDIA H100 80GB HBM3", "sm_90"),) * 2, True, "given")
H200 = Node("535.104.05", (Gpu("NVIDIA H200", "sm_90"),), True, "given")
V100 = Node("450.80.02", (Gpu("Tesla V100-SXM2-32GB", "sm_70"),), True, "given")
A10 = Node("470.82.01", (Gpu("NVIDIA A10", "sm_86"),), True, "given")
RTX4090 = Node("525.60.13", (Gpu("NVIDIA GeForce RTX 4090", "sm_89"),), True, "given")


@pytest.fixture(scope="module")
def cells(expansion: Expansion) -> tuple[Cell, ...]:
    return expansion.cells


@pytest.fixture(scope="module")
def cell_for(cells: tuple[Cell, ...]) -> Callable[..., Cell]:
    """cell_for(framework, cuda, source=None): the first cell with this framework and CUDA (and CUDA source)."""

    def _first(framework: str, cuda: str, *, source: str | None = None) -> Cell:
        return next(c for c in cells if c.framework == framework and c.cuda == cuda and source in (None, c.cuda_source))

    return _first


def test_the_matrix_has_the_cells_these_tests_reason_about(cells: tuple[Cell, ...]) -> None:
    assert {(c.framework, c.cuda) for c in cells} >= {
        ("pytorch", "11.0"),
        ("pytorch", "11.8"),
        ("pytorch", "12.1"),
        ("tensorflow", "11.0"),
        ("tensorflow", "11.8"),
    }
    assert {c.cuda_source for c in cells if c.framework == "tensorflow" and c.cuda == "11.8"} == {"base", "wheel"}


# --- parsing flags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "arch"),
    [
        ("sm_90", "sm_90"),
        ("9.0", "sm_90"),
        ("90", "sm_90"),
        ("SM_86", "sm_86"),
        (" 8.6 ", "sm_86"),
        ("7.5", "sm_75"),
        ("sm_100", "sm_100"),
        ("10.0", "sm_100"),
        ("120", "sm_120"),
    ],
)
def test_parse_arch_accepts_sm_dotted_and_bare_forms(text: str, arch: str) -> None:
    assert parse_arch(text) == arch


@pytest.mark.parametrize("text", ["compute_90", "sm90", "9", "", "hopper", "sm_90a", "0.9", "9.0.1", "sm_9"])
def test_parse_arch_refuses_anything_else_on_the_gpu_flag(text: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_arch(text)
    (problem,) = raised.value.problems
    assert problem.where == "--gpu"
    assert problem.message == f"{text!r} is not a GPU architecture"
    assert problem.allowed == "e.g. sm_90 or 9.0"


@pytest.mark.parametrize("text", ["535.104.05", "535.104", "450.80.02", "1050.10.01", " 525.60.13\n"])
def test_parse_driver_accepts_dotted_driver_versions(text: str) -> None:
    assert parse_driver(text) == text.strip()


@pytest.mark.parametrize("text", ["535", "r535", "535.104.05.1", "12.1", "latest", "", "535.x"])
def test_parse_driver_refuses_anything_else_on_the_driver_flag(text: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_driver(text)
    (problem,) = raised.value.problems
    assert problem.where == "--driver"
    assert "is not an NVIDIA driver version" in problem.message


def _no_probe() -> Node:
    raise AssertionError("the probe must not run when flags describe the node")


def test_node_from_flags_without_flags_probes_this_host() -> None:
    assert node_from_flags(None, None, lambda: H100) is H100


def test_node_from_flags_builds_a_given_node_from_both_flags() -> None:
    node = node_from_flags("sm_80, 9.0", "535.104.05", _no_probe)
    assert node == Node("535.104.05", (Gpu("GPU 0", "sm_80"), Gpu("GPU 1", "sm_90")), None, "given")


@pytest.mark.parametrize(("gpu", "driver", "missing"), [("sm_90", None, "--driver"), (None, "535.104.05", "--gpu")])
def test_node_from_flags_names_the_missing_flag(gpu: str | None, driver: str | None, missing: str) -> None:
    with pytest.raises(InputError) as raised:
        node_from_flags(gpu, driver, _no_probe)
    assert [p.where for p in raised.value.problems] == [missing]


def test_node_from_flags_reports_every_bad_value_at_once() -> None:
    with pytest.raises(InputError) as raised:
        node_from_flags("sm_90,hopper,compute_80", "r535", _no_probe)
    assert [p.where for p in raised.value.problems] == ["--gpu", "--gpu", "--driver"]


# --- kernels ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framework", "cuda", "arch", "expected"),
    [
        ("pytorch", "11.0", "sm_80", "sass sm_80"),
        ("pytorch", "11.0", "sm_86", "sass sm_80"),  # same major, higher minor: the sm_80 cubin runs
        ("pytorch", "11.0", "sm_90", None),  # no sm_90 cubin and no PTX
        ("pytorch", "12.1", "sm_89", "sass sm_86"),
        ("pytorch", "11.0", "sm_100", None),  # a new major: neither a cubin nor PTX runs
        ("pytorch", "11.8", "sm_89", "sass sm_86"),
        ("pytorch", "11.8", "sm_90", "sass sm_90"),
        ("pytorch", "12.1", "sm_37", None),  # CUDA 12 dropped Kepler
        ("pytorch", "12.1", "sm_61", "sass sm_60"),
        ("tensorflow", "11.8", "sm_75", "sass sm_75"),
        ("tensorflow", "11.8", "sm_37", "sass sm_35"),
        ("tensorflow", "11.8", "sm_80", "ptx compute_80 (JIT)"),
        ("tensorflow", "11.0", "sm_90", "ptx compute_80 (JIT)"),
        ("tensorflow", "11.8", "sm_100", "ptx compute_80 (JIT)"),
    ],
)
def test_kernels_for(cell_for: Callable[..., Cell], framework: str, cuda: str, arch: str, expected: str | None) -> None:
    assert kernels_for(cell_for(framework, cuda), arch) == expected


# --- verdicts for every cell of the matrix ------------------------------------------------------------------


@pytest.mark.parametrize("node", [H100, H200], ids=["h100", "h200"])
def test_hopper_with_535_runs_everything_but_pytorch_builds_without_sm_90(node: Node, cells: tuple[Cell, ...]) -> None:
    assert any(c.framework == "pytorch" and "sm_90" not in c.arch_sass for c in cells)
    for c in cells:
        judged = verdict(c, node)
        if c.framework == "pytorch" and "sm_90" not in c.arch_sass:
            assert not judged.runs, c.slug
            assert len(judged.reasons) == 1
            assert judged.reasons[0].startswith(f"no kernels for sm_90 ({node.gpus[0].name}) in this build: it has ")
            assert "sm_80" in judged.reasons[0]
        else:
            assert judged.runs, (c.slug, judged.reasons)
            assert judged.reasons == ()
        jit = [n for n in judged.notes if "ptx compute_80 (JIT)" in n]
        assert bool(jit) == (c.framework == "tensorflow"), c.slug
        if jit:
            assert "first start is slow" in jit[0]
            assert f"needs driver >= {c.min_driver}" in jit[0]


def test_v100_with_450_runs_only_the_cuda_11_0_cells(cells: tuple[Cell, ...]) -> None:
    for c in cells:
        judged = verdict(c, V100)
        assert judged.runs == (c.cuda == "11.0"), (c.slug, judged.reasons)
        if c.cuda in ("11.6", "11.8"):
            assert judged.reasons[0].startswith(
                f"driver 450.80.02 is below {c.min_driver}, the driver CUDA {c.cuda} needs"
            )
        if c.cuda == "12.1":
            assert judged.reasons == (
                "driver 450.80.02 is older than 525.60.13, the oldest that can run CUDA 12.1 "
                "even under minor-version compatibility",
            )
        # sm_70 cubins are in every build: the GPU is never the problem.
        assert not any("no kernels" in r for r in judged.reasons)


def test_a10_with_470_runs_only_the_cuda_11_0_cells(cells: tuple[Cell, ...]) -> None:
    for c in cells:
        judged = verdict(c, A10)
        assert judged.runs == (c.cuda == "11.0"), (c.slug, judged.reasons)
        if c.cuda == "11.0":
            assert any("ptx compute_80" in n for n in judged.notes) == (c.framework == "tensorflow")
        elif c.cuda == "12.1":
            assert "older than 525.60.13" in judged.reasons[0]
        else:
            assert f"is below {c.min_driver}" in judged.reasons[0]
        # TensorFlow's sm_86 code is PTX, which the 470 driver cannot JIT from CUDA 11.8.
        ptx_reason = f"PTX JIT needs driver >= {c.min_driver} (CUDA {c.cuda}'s own driver)"
        assert (ptx_reason in judged.reasons) == (c.framework == "tensorflow" and c.cuda == "11.8")


def test_rtx_4090_with_525_runs_cuda_11_but_not_12_1(cells: tuple[Cell, ...]) -> None:
    for c in cells:
        judged = verdict(c, RTX4090)
        assert judged.runs == (c.cuda != "12.1"), (c.slug, judged.reasons)
        if c.cuda == "12.1":
            assert judged.reasons == (
                "driver 525.60.13 is below 530.30.02, the driver CUDA 12.1 needs: the image sets "
                'NVIDIA_REQUIRE_CUDA="cuda>=12.1", so the NVIDIA container toolkit refuses to start it',
            )
            assert any(
                "minor-version compatibility could run it from driver 525.60.13 with NVIDIA_DISABLE_REQUIRE=1" in n
                and "without PTX JIT" in n
                for n in judged.notes
            )


def test_below_min_driver_on_an_nvidia_cuda_base_notes_the_data_center_exceptions(
    cell_for: Callable[..., Cell],
) -> None:
    judged = verdict(cell_for("tensorflow", "11.8", source="base"), A10)
    assert not judged.runs
    assert judged.reasons[0].startswith(
        "driver 470.82.01 is below 520.61.05, the driver CUDA 11.8 needs: the nvidia/cuda:"
    )
    (note,) = [n for n in judged.notes if "forward-compatibility" in n]
    assert "data-center GPUs" in note and "450/470/525" in note
    assert not any("NVIDIA_DISABLE_REQUIRE" in n for n in judged.notes)


def test_no_driver_is_the_only_reason_when_nvidia_smi_found_nothing(cells: tuple[Cell, ...]) -> None:
    node = Node(None, (), None, "this host")
    for c in cells:
        judged = verdict(c, node)
        assert not judged.runs
        assert judged.reasons == (NO_DRIVER,)


def test_a_driver_without_gpus_says_no_gpu_is_visible(cell_for: Callable[..., Cell]) -> None:
    judged = verdict(cell_for("pytorch", "11.8"), Node("535.104.05", (), True, "given"))
    assert judged.reasons == (NO_GPU,)


def test_unknown_compute_capability_is_a_reason(cell_for: Callable[..., Cell]) -> None:
    judged = verdict(cell_for("pytorch", "11.8"), Node("535.104.05", (Gpu("NVIDIA A100", None),), True, "this host"))
    assert not judged.runs
    (reason,) = judged.reasons
    assert reason.startswith("compute capability unknown for NVIDIA A100")


def test_every_gpu_is_judged_and_each_missing_arch_named_once(cell_for: Callable[..., Cell]) -> None:
    node = Node("535.104.05", (Gpu("A", "sm_80"), Gpu("B", "sm_90"), Gpu("C", "sm_90")), True, "given")
    judged = verdict(cell_for("pytorch", "11.0"), node)
    assert [r.split(" in this build")[0] for r in judged.reasons] == [
        "no kernels for sm_90 (B)",
        "no kernels for sm_90 (C)",
    ]


def test_container_runtime_missing_is_a_reason_and_unchecked_a_note(cell_for: Callable[..., Cell]) -> None:
    c = cell_for("pytorch", "12.1")
    missing = verdict(c, Node("535.104.05", (Gpu("H100", "sm_90"),), False, "this host"))
    assert missing.reasons == (RUNTIME_MISSING,)
    assert "no nvidia runtime in `docker info`" in RUNTIME_MISSING and "no CDI spec" in RUNTIME_MISSING
    unchecked = verdict(c, Node("535.104.05", (Gpu("H100", "sm_90"),), None, "given"))
    assert unchecked.runs
    assert unchecked.notes == ("container runtime not checked",)


# --- JSON and text ------------------------------------------------------------------------------------------


def test_report_is_the_matrix_json_plus_the_verdict(cells: tuple[Cell, ...]) -> None:
    rows = report(cells, A10)
    assert len(rows) == len(cells)
    for c, row in zip(cells, rows, strict=True):
        expected = c.as_json()
        assert {k: row[k] for k in expected} == expected
        assert set(row) == {*expected, "runs", "reasons", "run_notes"}
        assert isinstance(row["runs"], bool)
        reasons, notes = row["reasons"], row["run_notes"]
        assert isinstance(reasons, list) and all(isinstance(r, str) for r in reasons)
        assert isinstance(notes, list) and all(isinstance(n, str) for n in notes)
        assert (reasons == []) == row["runs"]
    assert json.loads(json.dumps(rows)) == rows


def test_format_report_shows_the_node_then_each_image_with_its_reasons(
    cells: tuple[Cell, ...], cell_for: Callable[..., Cell]
) -> None:
    node = node_from_flags("sm_90", "535.104.05", _no_probe)
    text = format_report(report(cells, node), node)
    lines = text.splitlines()
    assert lines[0] == "node (given): driver 535.104.05; GPUs: GPU 0 (sm_90); NVIDIA container runtime: not checked"
    # The note every image shares is said once, not once per image.
    assert lines[1] == "  every image, note: container runtime not checked"
    assert text.count("note: container runtime not checked") == 1
    runs = sum(1 for c in cells if verdict(c, node).runs)
    assert lines[2] == f"{runs} of {len(cells)} images run on this node."
    old = cell_for("pytorch", "11.0")
    index = lines.index(f"NO    {old.image}:{old.immutable_tag}")
    assert lines[index + 1].startswith("        - no kernels for sm_90 (GPU 0) in this build")
    new = cell_for("pytorch", "12.1")
    assert f"RUNS  {new.image}:{new.immutable_tag}" in lines


def test_format_report_groups_identical_gpus(cells: tuple[Cell, ...]) -> None:
    assert format_report(report(cells[:1], H100), H100).splitlines()[0] == (
        "node (given): driver 535.104.05; GPUs: 2x NVIDIA H100 80GB HBM3 (sm_90); NVIDIA container runtime: configured"
    )


# --- probing with canned output --------------------------------------------------------------------------


class FakeRun:
    """Stands in for subprocess.run: answers by the command's first words, records every call."""

    def __init__(self, answers: dict[tuple[str, ...], subprocess.CompletedProcess[str] | BaseException]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], dict[str, object]]] = []

    def __call__(self, argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), kwargs))
        for prefix, answer in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                if isinstance(answer, BaseException):
                    raise answer
                return answer
        raise FileNotFoundError(argv[0])


def done(stdout: str, returncode: int = 0, stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], returncode, stdout, stderr)


SMI_NEW = ("nvidia-smi", "--format=csv,noheader", "--query-gpu=name,compute_cap,driver_version")
SMI_OLD = ("nvidia-smi", "--format=csv,noheader", "--query-gpu=name,driver_version")
DOCKER = ("docker", "info", "--format", "{{json .Runtimes}}")
RUNTIMES_WITH_NVIDIA = (
    '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}\n'
)
RUNTIMES_PLAIN = '{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}\n'


def no_hook(_: str) -> str | None:
    return None


def probe(run: FakeRun, tmp_path: Path, nvml: Callable[[], list[tuple[int, int]] | None] = lambda: None) -> Node:
    return probe_host(Runner(run), nvml_capabilities=nvml, cdi_dirs=[tmp_path], which=no_hook)


def test_probe_reads_gpus_archs_and_driver_from_nvidia_smi(tmp_path: Path) -> None:
    run = FakeRun(
        {
            SMI_NEW: done("NVIDIA H100 80GB HBM3, 9.0, 535.104.05\nNVIDIA H100 80GB HBM3, 9.0, 535.104.05\n"),
            DOCKER: done(RUNTIMES_WITH_NVIDIA),
        }
    )
    node = probe(run, tmp_path)
    assert node == Node("535.104.05", (Gpu("NVIDIA H100 80GB HBM3", "sm_90"),) * 2, True, "this host")
    assert all(isinstance(kwargs.get("timeout"), (int, float)) for _, kwargs in run.calls)
    assert all(kwargs.get("capture_output") is True for _, kwargs in run.calls)


def test_probe_falls_back_to_nvml_when_nvidia_smi_has_no_compute_cap(tmp_path: Path) -> None:
    run = FakeRun(
        {
            SMI_NEW: done("", 2, 'Field "compute_cap" is not a valid field to query.'),
            SMI_OLD: done("Tesla V100-SXM2-32GB, 450.80.02\nNVIDIA A10, 450.80.02\n"),
            DOCKER: done(RUNTIMES_PLAIN),
        }
    )
    node = probe(run, tmp_path, nvml=lambda: [(7, 0), (8, 6)])
    assert node.driver == "450.80.02"
    assert node.gpus == (Gpu("Tesla V100-SXM2-32GB", "sm_70"), Gpu("NVIDIA A10", "sm_86"))
    assert node.container_runtime is False


def test_probe_without_compute_cap_or_pynvml_leaves_the_arch_unknown(
    tmp_path: Path, cell_for: Callable[..., Cell]
) -> None:
    run = FakeRun({SMI_NEW: done("", 2), SMI_OLD: done("Tesla T4, 470.57.02\n"), DOCKER: done(RUNTIMES_WITH_NVIDIA)})
    node = probe(run, tmp_path, nvml=lambda: None)
    assert node.gpus == (Gpu("Tesla T4", None),)
    assert verdict(cell_for("pytorch", "11.0"), node).reasons[0].startswith("compute capability unknown for Tesla T4")


@pytest.mark.parametrize(
    "failure",
    [
        FileNotFoundError("nvidia-smi"),
        subprocess.TimeoutExpired("nvidia-smi", 20),
        done("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9),
    ],
    ids=["missing", "hanging", "failing"],
)
def test_probe_without_a_working_nvidia_smi_finds_no_driver(
    tmp_path: Path, failure: subprocess.CompletedProcess[str] | BaseException, cell_for: Callable[..., Cell]
) -> None:
    run = FakeRun({("nvidia-smi",): failure, DOCKER: done(RUNTIMES_PLAIN)})
    node = probe(run, tmp_path)
    assert (node.driver, node.gpus) == (None, ())
    assert verdict(cell_for("pytorch", "12.1"), node).reasons[0] == NO_DRIVER


def test_runtime_is_none_when_docker_is_missing_or_unreachable(tmp_path: Path) -> None:
    assert probe_container_runtime(Runner(FakeRun({})), cdi_dirs=[tmp_path], which=no_hook) is None
    unreachable = FakeRun({DOCKER: done("", 1, "Cannot connect to the Docker daemon")})
    assert probe_container_runtime(Runner(unreachable), cdi_dirs=[tmp_path], which=no_hook) is None
    hanging = FakeRun({DOCKER: subprocess.TimeoutExpired("docker", 15)})
    assert probe_container_runtime(Runner(hanging), cdi_dirs=[tmp_path], which=no_hook) is None


def test_runtime_from_docker_info(tmp_path: Path) -> None:
    with_nvidia = FakeRun({DOCKER: done(RUNTIMES_WITH_NVIDIA)})
    assert probe_container_runtime(Runner(with_nvidia), cdi_dirs=[tmp_path], which=no_hook) is True
    plain = FakeRun({DOCKER: done(RUNTIMES_PLAIN)})
    assert probe_container_runtime(Runner(plain), cdi_dirs=[tmp_path], which=no_hook) is False


def test_runtime_from_a_cdi_spec_or_the_gpus_hook(tmp_path: Path) -> None:
    plain = FakeRun({DOCKER: done(RUNTIMES_PLAIN)})
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    assert probe_container_runtime(Runner(plain), cdi_dirs=[tmp_path / "absent", tmp_path], which=no_hook) is True
    hook = "/usr/bin/nvidia-container-runtime-hook"
    found = probe_container_runtime(Runner(plain), cdi_dirs=[], which=lambda name: hook if name in hook else None)
    assert found is True
