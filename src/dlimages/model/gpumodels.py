"""GPU models by the names fleets use (nvidia-smi's name, NVIDIA GPU Feature Discovery's `nvidia.com/gpu.product`, a
purchase order), mapped to their compute capability, each with its source, and the CPU of the hosts a superchip
sits in (GH200, GB200, GB300 and GB10 pair the GPU with an Arm Grace CPU: no amd64 image runs there).

Matching is by whole words, the longest model that fits: "NVIDIA-H100-80GB-HBM3" is an H100, "NVIDIA L40S" an
L40S (not an L40), "Tesla-T4" a T4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CUDA_GPUS = "https://developer.nvidia.com/cuda-gpus"
LEGACY_GPUS = "https://developer.nvidia.com/cuda-legacy-gpus"
# NVIDIA's table leaves out the models made for the Chinese market; each is a variant of a listed chip.
H20 = "https://github.com/thu-ml/SageAttention/issues/260"  # "Device name: NVIDIA H20, Compute capability: (9, 0)"
H800 = "https://github.com/NVIDIA/nvtrust/issues/16"  # NVIDIA's tool maps the H800 onto the H100 PCIe (Hopper)
A800 = "https://github.com/OpenRLHF/OpenRLHF/pull/298"  # "A800 is the custom version of A100 for China"
L20 = "https://github.com/vllm-project/vllm/issues/12262"  # "L20, which has CUDA Compute Capability of 8.9"
ARM_HOSTS = "https://nvidia.github.io/grace-cpu-benchmarking-guide/developer/index.html"  # Grace is an Arm64 CPU
ARM64 = "arm64"


@dataclass(frozen=True)
class Model:
    name: str  # as NVIDIA writes it
    arch: str  # sm_XY
    source: str
    host_arch: str | None = None  # the CPU of every host it comes in, where that is fixed (superchips)


def _models(arch: str, source: str, names: str, host_arch: str | None = None) -> list[Model]:
    return [Model(name.strip(), arch, source, host_arch) for name in names.split(",")]


MODELS = (
    *_models("sm_121", CUDA_GPUS, "GB10", ARM64),
    *_models(
        "sm_120",
        CUDA_GPUS,
        "RTX PRO 6000 Blackwell, RTX PRO 5000 Blackwell, RTX PRO 4500 Blackwell, RTX PRO 4000 Blackwell, "
        "RTX PRO 2000 Blackwell, GeForce RTX 5090, GeForce RTX 5080, GeForce RTX 5070 Ti, GeForce RTX 5070, "
        "GeForce RTX 5060 Ti, GeForce RTX 5060, GeForce RTX 5050",
    ),
    *_models("sm_103", CUDA_GPUS, "GB300", ARM64),
    *_models("sm_103", CUDA_GPUS, "B300"),
    *_models("sm_100", CUDA_GPUS, "GB200", ARM64),
    *_models("sm_100", CUDA_GPUS, "B200"),
    *_models("sm_90", CUDA_GPUS, "GH200", ARM64),
    *_models("sm_90", CUDA_GPUS, "H200, H100"),
    *_models("sm_90", H800, "H800"),
    *_models("sm_90", H20, "H20"),
    *_models(
        "sm_89",
        CUDA_GPUS,
        "L4, L40, L40S, RTX 6000 Ada, RTX 5000 Ada, RTX 4500 Ada, RTX 4000 Ada, RTX 2000 Ada, GeForce RTX 4090, "
        "GeForce RTX 4080, GeForce RTX 4070 Ti, GeForce RTX 4070, GeForce RTX 4060 Ti, GeForce RTX 4060, "
        "GeForce RTX 4050",
    ),
    *_models("sm_89", L20, "L20"),
    *_models(
        "sm_86",
        CUDA_GPUS,
        "A40, A10, A16, A2, RTX A6000, RTX A5000, RTX A4000, RTX A3000, RTX A2000, GeForce RTX 3090 Ti, "
        "GeForce RTX 3090, GeForce RTX 3080 Ti, GeForce RTX 3080, GeForce RTX 3070 Ti, GeForce RTX 3070, "
        "GeForce RTX 3060 Ti, GeForce RTX 3060, GeForce RTX 3050",
    ),
    *_models("sm_80", CUDA_GPUS, "A100, A30"),
    *_models("sm_80", A800, "A800"),
    *_models(
        "sm_75",
        CUDA_GPUS,
        "T4, Quadro RTX 8000, Quadro RTX 6000, Quadro RTX 5000, Quadro RTX 4000, TITAN RTX, GeForce RTX 2080 Ti, "
        "GeForce RTX 2080, GeForce RTX 2070, GeForce RTX 2060",
    ),
    *_models("sm_70", LEGACY_GPUS, "V100, TITAN V, Quadro GV100"),
    *_models(
        "sm_61",
        LEGACY_GPUS,
        "P40, P4, TITAN Xp, GeForce GTX 1080 Ti, GeForce GTX 1080, GeForce GTX 1070, GeForce GTX 1060",
    ),
    *_models("sm_60", LEGACY_GPUS, "P100"),
)
# Words that say nothing of the model: the maker, the brand, and a product name's separators.
_NOISE = {"nvidia", "tesla", "geforce", "corporation"}


def _words(text: str) -> tuple[str, ...]:
    spaced = re.sub(r"\b(rtx|gtx)(?=[0-9])", r"\1 ", text.lower())  # RTX4090 as RTX 4090
    return tuple(word for word in re.split(r"[\s\-_/,()\[\]]+", spaced) if word and word not in _NOISE)


_KEYS = sorted(((_words(model.name), model) for model in MODELS), key=lambda pair: -len(pair[0]))


def find(name: str) -> Model | None:
    """The model a GPU's name names (the longest that fits, by whole words), or None.

    Example: find("NVIDIA-H100-80GB-HBM3").arch == "sm_90"; find("NVIDIA GeForce RTX 4090").name == "RTX 4090".
    """
    words = _words(name)
    for key, model in _KEYS:
        if any(words[start : start + len(key)] == key for start in range(len(words) - len(key) + 1)):
            return model
    return None


EXAMPLES = "A100, H100, H20, L40S, B200, GB200, RTX 4090"
