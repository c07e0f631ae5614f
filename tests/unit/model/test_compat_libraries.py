"""Every verdict that depends on whether the container toolkit loads an nvidia/cuda base's cuda-compat libraries:
where it does not, the image's CUDA runs on the host's driver alone, and the verdict follows.

Sources, by the key in brackets:
[934]    nvidia-container-toolkit#934 (toolkit 1.17.4): "the runtime hook will symlink libcuda from the host with
         precedence over the container"; "no apparent amount of LD_LIBRARY_PATH or build-time ldconfig can mitigate"
[906]    nvidia-container-toolkit#906: 1.17.4's default (#877) "removed 'automatic' support for CUDA Forward
         compatibility"; 1.17.5's enable-cuda-compat hook brings it back for the nvidia runtime and CDI
[1055]   nvidia-container-toolkit#1055: that hook "requires the nvidia-container-runtime and as such does not work when
         only the Docker --gpus flag is specified"; 1.17.7 makes cuda-compat-mode=ldconfig the legacy default
[minor]  minor-version compatibility: CUDA 11.x on >= 450.80.02, any GPU, no PTX JIT of newer PTX:
         https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
[fwd]    forward compatibility on data-center GPUs only (others: CUDA error 804):
         https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html, nvidia-container-toolkit#291
[req]    nvidia/cuda 11.8.0 admits R470 of any brand; 11.0.3 admits Tesla R418 (the fixture's require_cuda, verbatim)
[tf]     TensorFlow 2.13.1: cubins sm_35-sm_75 and compute_80 PTX of CUDA 11.8, which no R470 driver JIT-compiles
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlimages.model import compat, toolkit
from dlimages.model.cells import Cell
from dlimages.model.doctor import NO_TOOLKIT, condition, report, verdict
from dlimages.model.doctor_text import describe_node
from dlimages.model.gpunode import Gpu, Node, node_from_flags

TF_244 = "cuda11.0-tf2.4.4-py3.8-runtime"  # nvidia/cuda 11.0.3 base, cuda-compat of R450
TF_2131 = "cuda11.8-tf2.13.1-py3.10-runtime"  # nvidia/cuda 11.8.0 base, cuda-compat of R520
TORCH_118 = "cuda11.8-torch2.1.2-py3.10-runtime"  # CUDA from wheels: no cuda-compat at all
FORWARD, MINOR = compat.FORWARD_COMPAT, compat.MINOR_VERSION
T4, A100, RTX_2080 = (
    Gpu("T4", "sm_75", "nvidia"),
    Gpu("A100", "sm_80", "nvidia"),
    Gpu("RTX 2080", "sm_75", "geforcertx"),
)
T4_TESLA = Gpu("T4", "sm_75", "tesla")  # NVML's name for a data-center GPU before R460

ROWS: list[tuple[str | None, str, Gpu, str, str]] = [
    # toolkit, cell, GPU, driver, verdict ("forward", "minor-version compatibility", or "no >= X")
    ("1.17.8", TF_2131, T4, "470.82.01", FORWARD),  # [req][fwd]
    ("1.17.4", TF_2131, T4, "470.82.01", MINOR),  # [934][minor]: on R470 alone, with its sm_75 cubins
    ("1.17.5", TF_2131, T4, "470.82.01", FORWARD),  # [906]: through --runtime=nvidia or CDI
    ("1.17.8", TF_2131, RTX_2080, "470.82.01", "no >= 520.61.05"),  # [fwd]: error 804
    ("1.17.4", TF_2131, RTX_2080, "470.82.01", MINOR),  # [934][minor]: no compat libraries, so no error 804
    ("1.17.5", TF_2131, RTX_2080, "470.82.01", MINOR),  # [1055]: with plain --gpus only
    (None, TF_2131, RTX_2080, "470.82.01", "no >= 520.61.05"),  # not known: judged as loading them
    ("1.17.4", TF_2131, A100, "470.82.01", "no >= 520.61.05"),  # [tf][minor]: needs PTX JIT, none under minor
    ("1.17.5", TF_2131, A100, "470.82.01", FORWARD),
    ("1.17.4", TF_244, T4_TESLA, "418.87.01", "no >= 450.51.06"),  # [934]: R418 alone is below CUDA 11.0's own
    ("1.17.3", TF_244, T4_TESLA, "418.87.01", FORWARD),  # [req][fwd]
    ("1.17.4", TF_2131, T4_TESLA, "450.80.02", "no >= 520.61.05"),  # [req]: no R450, refused before CUDA loads
    ("1.17.4", TORCH_118, Gpu("A10", "sm_86", "nvidia"), "470.82.01", MINOR),  # wheels: the toolkit changes nothing
]


def _no_probe() -> Node:
    raise AssertionError("a node given by flags is not probed")


def _said(cell: Cell, node: Node) -> str:
    judged = verdict(cell, node)
    return judged.runs_through or "?" if judged.runs else f"no >= {judged.needs_driver}"


@pytest.mark.parametrize(
    ("kit", "slug", "gpu", "driver", "expected"), ROWS, ids=[f"{r[0]}-{r[1]}-{r[2].name}" for r in ROWS]
)
def test_the_verdict_follows_whether_the_toolkit_loads_the_compat_libraries(
    cell_of: Callable[[str], Cell], kit: str | None, slug: str, gpu: Gpu, driver: str, expected: str
) -> None:
    assert _said(cell_of(slug), Node(driver, (gpu,), True, "given", toolkit=kit)) == expected


@pytest.fixture(scope="module")
def cell_of(cell: Callable[[str, str], Cell]) -> Callable[[str], Cell]:
    return lambda slug: cell("pytorch" if "torch" in slug else "tensorflow", slug)


def test_on_the_host_driver_alone_the_verdict_says_so_and_cites_it(cell_of: Callable[[str], Cell]) -> None:
    node = Node("470.82.01", (T4,), True, "given", toolkit="1.17.4")
    judged = verdict(cell_of(TF_2131), node)
    [how] = [note for note in judged.notes if MINOR in note]
    assert how.startswith("container toolkit 1.17.4 does not load an image's cuda-compat libraries")
    assert f"so CUDA runs on the host's driver alone ({toolkit.HOST_ALONE}): {MINOR} on sm_75 (T4, nvidia)" in how
    assert "but at least 450.80.02" in how  # [minor]: the 11.x floor, not CUDA 11.8's own driver
    [row] = report([cell_of(TF_2131)], node)
    assert toolkit.HOST_ALONE in row["sources"]  # type: ignore[operator]


def test_ptx_on_the_host_driver_alone_names_no_requirement_of_ours(cell_of: Callable[[str], Cell]) -> None:
    """The arch< clauses are written into wheel images' NVIDIA_REQUIRE_CUDA only; a base keeps NVIDIA's [req]."""
    [reason] = verdict(cell_of(TF_2131), Node("470.82.01", (A100,), True, "given", toolkit="1.17.4")).reasons
    assert "runs ptx compute_80 (JIT), and minor-version compatibility has no PTX JIT" in reason
    assert "arch<" not in reason and reason.endswith("; needs driver >= 520.61.05")


def test_where_only_plain_gpus_leaves_them_out_each_way_is_said(cell_of: Callable[[str], Cell]) -> None:
    """[1055]: toolkit 1.17.5 and 1.17.6 load them through --runtime=nvidia and CDI, not plain --gpus."""
    geforce = verdict(cell_of(TF_2131), Node("470.82.01", (RTX_2080,), True, "given", toolkit="1.17.6"))
    assert geforce.runs and any(
        n.startswith("only with plain --gpus, where CUDA runs on the host") for n in geforce.notes
    )
    assert any(
        n.startswith("with --runtime=nvidia or CDI it does not run: ") and "error 804" in n for n in geforce.notes
    )
    tesla = verdict(cell_of(TF_2131), Node("470.82.01", (T4,), True, "given", toolkit="1.17.6"))
    assert tesla.runs_through == FORWARD
    assert any(n.startswith("with plain --gpus, CUDA runs on the host's driver alone") for n in tesla.notes)


def test_without_a_toolkit_no_image_runs_and_none_is_said_to_load_compat_libraries(
    cell_of: Callable[[str], Cell],
) -> None:
    """--toolkit none: no container gets a GPU at all, whatever the image; the driver part is judged for a toolkit
    installed now (1.17.7 and later load the libraries by default [1055])."""
    node = node_from_flags("T4", "470.82.01", _no_probe, kit="none")
    assert describe_node(node).endswith("NVIDIA container runtime: not configured; no container toolkit")
    for slug in (TF_2131, TF_244, TORCH_118):
        judged = verdict(cell_of(slug), node)
        assert not judged.runs and NO_TOOLKIT in judged.reasons and condition(judged) == "no-container-runtime"
        assert toolkit.UNKNOWN not in judged.notes  # no "--toolkit VERSION judges a known one" on a node without one
    forward = verdict(cell_of(TF_2131), node)
    assert forward.reasons == (NO_TOOLKIT,) and toolkit.ABSENT in forward.notes and forward.needs_driver is None
