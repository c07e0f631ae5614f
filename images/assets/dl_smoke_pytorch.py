"""dl-smoke's PyTorch probe: the build's versions and arch list, cuDNN loaded in a fresh process, the training
steps on every GPU and, with several GPUs, NCCL and DDP across them, each turned into checks. A part of dl-smoke.
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from . import dl_smoke_errors as errors
    from . import dl_smoke_rules as rules
    from . import dl_smoke_training as training
    from . import dl_stack, dl_workers
else:
    import dl_smoke_errors as errors
    import dl_smoke_rules as rules
    import dl_smoke_training as training
    import dl_stack
    import dl_workers

# Multi-GPU: the all-reduce moves 16 MiB of float32 per GPU; the whole multi-GPU part must end in this time.
ALLREDUCE_ELEMENTS = 4 * 2**20
MULTI_GPU_TIMEOUT_S = 300
CUDNN_PROBE_TIMEOUT_S = 180


def _layout(channels_last: bool) -> str:
    return "conv + batch norm, channels_last" if channels_last else "conv + batch norm"


def torch_train_check(
    torch: ModuleType, index: int, dtype_name: str, options: rules.RunOptions, describe_error: Callable[[str], str]
) -> rules.Check:
    name = "train_{}[{}]".format("amp_fp16" if dtype_name == "float16" else "amp_bf16", index)
    try:
        losses, _ = training.train_torch(
            torch, torch.device("cuda", index), dtype_name, options.steps, options.channels_last
        )
    except RuntimeError as error:
        return rules.Check(name, rules.FAIL, describe_error(str(error)))
    return rules.loss_check(name, losses, _layout(options.channels_last))


def run_cudnn_probe(index: int, dtype: str, channels_last: bool, convolve: bool) -> dl_workers.WorkerOutcome:
    """cudnn_probe_worker's outcome (the unit tests put a fake here)."""
    args = (index, dtype, channels_last, convolve)
    return dl_workers.run_workers(training.cudnn_probe_worker, 1, args, timeout_s=CUDNN_PROBE_TIMEOUT_S)[0]


def cudnn_load_check(
    outcome: dl_workers.WorkerOutcome, gpu: str, describe_error: Callable[[str], str], missing: str | None = None
) -> tuple[rules.Check, tuple[int, ...] | None]:
    """The cudnn_load check and cuDNN's version from the probe's outcome: cuDNN's own words first, then the
    sub-libraries `missing` beside libcudnn.so.N (cudnn_sublibrary_hint), the process's fate after them."""
    data = outcome.value if isinstance(outcome.value, dict) else {}
    version = dl_stack.decode_cudnn_version(data.get("cudnn"))
    shown = dl_stack.format_version(version)
    if outcome.state == dl_workers.OK:
        if not data.get("convolved"):
            return rules.Check(
                errors.CUDNN_LOAD, rules.SKIP, f"cuDNN {shown} loaded; no convolution run: no GPU has kernels"
            ), version
        return rules.Check(
            errors.CUDNN_LOAD, rules.PASS, f"cuDNN {shown} loaded; a convolution ran forward and backward on {gpu}"
        ), version
    text = f"{outcome.error}\n{outcome.output}"
    problem = errors.classify_cudnn_error(text)
    last_words = [line.strip() for line in outcome.output.splitlines() if line.strip()]
    if problem is not None:
        detail = errors.describe_cudnn_problem(problem)
    elif missing is not None and outcome.state != dl_workers.ERROR:
        detail = f"cuDNN could not be loaded: {missing}"
    elif outcome.stage in ("import torch", "cudnn version"):
        detail = "cuDNN could not be loaded: " + dl_stack.first_line(outcome.error)
        if outcome.state != dl_workers.ERROR and last_words:
            detail += "; its last output: " + dl_stack.first_line(last_words[-1], 200)
    else:
        detail = f"a convolution on {gpu} failed: " + describe_error(
            outcome.error if outcome.state == dl_workers.ERROR else text
        )
    if outcome.state != dl_workers.ERROR:
        detail += f" (the test process {outcome.error}, at {outcome.stage})"
    return rules.Check(errors.CUDNN_LOAD, rules.FAIL, detail), version


# --- several GPUs: NCCL all-reduce and DDP, one process per GPU ------------------------------------------------


def run_multi_gpu(worker: Callable[..., Any], count: int, plan: dict[str, Any]) -> list[dl_workers.WorkerOutcome]:
    """The workers' outcomes (the unit tests put a fake here)."""
    return dl_workers.run_workers(worker, count, (plan,), timeout_s=plan["timeout_s"])


def describe_peers(peers: Sequence[tuple[int, int]], count: int) -> str:
    if not peers:
        return "no peer-to-peer access between the GPUs: NCCL goes through host memory"
    if len(peers) == count * (count - 1) // 2:
        return "peer-to-peer access between every pair"
    return "peer-to-peer access only for " + ", ".join(f"{a}<->{b}" for a, b in peers)


def summarize_multi_gpu(
    outcomes: Sequence[dl_workers.WorkerOutcome],
    names: Sequence[str],
    plan: dict[str, Any],
    peers: Sequence[tuple[int, int]],
    nccl: str | None,
) -> list[rules.Check]:
    """The nccl_allreduce and ddp_train checks from each rank's outcome, naming the GPU that failed."""
    count = len(outcomes)
    size = "{} float32".format(dl_workers.size_text(plan["elements"] * 4))
    past_all_reduce = all(o.state == dl_workers.OK or o.stage in ("ddp", "replicas") for o in outcomes)
    if past_all_reduce:
        allreduce = rules.Check(
            "nccl_allreduce",
            rules.PASS,
            "{} GPUs summed {} each correctly (NCCL {}; {})".format(
                count, size, nccl or "unknown", describe_peers(peers, count)
            ),
        )
    else:
        detail = dl_workers.describe_worker_failures(outcomes, names)
        if count == 2:
            detail += f"; suspect GPU 0, GPU 1 or the link between them ({describe_peers(peers, count)})"
        return [
            rules.Check("nccl_allreduce", rules.FAIL, detail),
            rules.Check("ddp_train", rules.SKIP, "not run: the all-reduce failed"),
        ]
    if any(o.state != dl_workers.OK for o in outcomes):
        return [allreduce, rules.Check("ddp_train", rules.FAIL, dl_workers.describe_worker_failures(outcomes, names))]
    mode = "{} autocast".format(plan["dtype"]) if plan["dtype"] else "float32"
    not_learning = [o.rank for o in outcomes if not rules.loss_decreased(o.value["losses"])]
    drift = max(o.value["drift"] for o in outcomes)
    if not_learning:
        gpus = ", ".join(f"GPU {rank}" for rank in not_learning)
        losses = outcomes[not_learning[0]].value["losses"]
        return [
            allreduce,
            rules.Check("ddp_train", rules.FAIL, f"loss did not decrease on {gpus}: {rules.describe_losses(losses)}"),
        ]
    if not drift <= 1e-6:
        worst = max(outcomes, key=lambda o: o.value["drift"]).rank
        detail = f"replicas drifted apart: GPU {worst}'s parameters differ from GPU 0's by {drift:g}"
        return [allreduce, rules.Check("ddp_train", rules.FAIL, detail)]
    losses = outcomes[0].value["losses"]
    detail = "{} GPUs, {}, {}: {} on GPU 0; replicas identical".format(
        count, mode, _layout(plan["channels_last"]), rules.describe_losses(losses)
    )
    return [allreduce, rules.Check("ddp_train", rules.PASS, detail)]


def link_checks(outcomes: Sequence[dl_workers.WorkerOutcome], names: Sequence[str]) -> list[rules.Check]:
    """nccl_link[a-b] for every pair, from pair_worker's outcomes: which link between two GPUs fails."""
    checks = []
    for a, b in sorted(pair for pairs in training.round_robin(len(outcomes)) for pair in pairs):
        key = f"{a}-{b}"
        said = [o.value.get(key) for o in (outcomes[a], outcomes[b]) if isinstance(o.value, dict)]
        name = f"nccl_link[{key}]"
        link = f"GPU {a} ({names[a]}) <-> GPU {b} ({names[b]})"
        if len(said) == 2 and said == ["ok", "ok"]:
            checks.append(rules.Check(name, rules.PASS, f"{link}: all-reduce correct"))
        elif any(s not in (None, "ok") for s in said):
            checks.append(
                rules.Check(name, rules.FAIL, "{}: {}".format(link, next(s for s in said if s not in (None, "ok"))))
            )
        elif any(o.stage == f"pair {key}" for o in (outcomes[a], outcomes[b])):
            checks.append(
                rules.Check(name, rules.FAIL, f"{link}: the all-reduce did not complete (hung or the process died)")
            )
        else:
            checks.append(rules.Check(name, rules.SKIP, f"{link}: not reached"))
    return checks


def multi_gpu_checks(
    torch: ModuleType, gpus: Sequence[dict[str, Any]], options: rules.RunOptions, nccl: str | None
) -> list[rules.Check]:
    """NCCL all-reduce and a DDP step across every visible GPU, one process per GPU; on failure with more than two
    GPUs, an all-reduce per pair of GPUs names the links that fail."""
    count = len(gpus)
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_nccl_available():
        return [
            rules.Check(
                "nccl_allreduce", rules.FAIL, f"{count} GPUs visible but this torch has no NCCL (torch.distributed)"
            )
        ]
    bf16 = hasattr(torch, "autocast") and all(float(g["capability"]) >= 8.0 for g in gpus)
    plan = {
        "backend": "nccl",
        "device": "cuda",
        "dtype": "bfloat16" if bf16 else "float16",
        "steps": options.steps,
        "channels_last": options.channels_last,
        "elements": ALLREDUCE_ELEMENTS,
        "timeout_s": MULTI_GPU_TIMEOUT_S,
    }
    names = [str(g["name"]) for g in gpus]
    peers = dl_workers.peer_access(torch, count)
    torch.cuda.empty_cache()  # the per-GPU steps' cached memory is the workers' now
    checks = summarize_multi_gpu(run_multi_gpu(training.multi_gpu_worker, count, plan), names, plan, peers, nccl)
    if checks[0].status == rules.FAIL and count > 2:
        checks += link_checks(run_multi_gpu(training.pair_worker, count, plan), names)
    return checks


def probe_torch(
    torch: ModuleType, exp: rules.Expectations, options: rules.RunOptions, driver: str | None
) -> rules.Probe:
    cuda = torch.version.cuda
    versions = rules.probe_versions(torch.__version__, cuda, None, driver)
    checks = rules.version_checks("torch", versions, exp)
    # is_available() warns (rather than raises) when the driver is too old; keep the text.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    if not available:
        reason = " ".join(str(w.message) for w in caught)
        if cuda is not None:
            try:
                torch.cuda.init()
            except Exception as error:  # the init error is the most precise reason there is
                reason = (reason + " " + str(error)).strip()
        check, visible = rules.unavailable_check("cuda_available", reason, cuda is not None, cuda, exp, driver)
        return rules.Probe([*checks, check], [], versions, visible)

    count = torch.cuda.device_count()
    checks.append(rules.Check("cuda_available", rules.PASS, f"{count} GPU(s) visible"))
    arch_list = list(torch.cuda.get_arch_list()) if hasattr(torch.cuda, "get_arch_list") else None
    checks.append(rules.arch_list_check(arch_list, exp.cuda_arch_list))

    versions["nccl"] = dl_workers.nccl_version_text(torch)

    gpus = []
    runnable = []  # GPUs the build has kernels for: training would only repeat an arch failure, less readably
    for index in range(count):
        major, minor = torch.cuda.get_device_capability(index)
        props = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "capability": f"{major}.{minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
            }
        )
        unknown = "this torch has no get_arch_list(); not checked"
        arch = rules.gpu_arch_check(index, gpus[-1]["name"], (major, minor), arch_list, unknown)
        checks.append(arch)
        if arch.status != rules.FAIL:
            runnable.append(index)

    def describe_error(index: int, text: str) -> str:
        major, minor = gpus[index]["capability"].split(".")
        capability = (int(major), int(minor))
        return rules.describe_cuda_failure(
            text, capability=capability, arch_list=arch_list, cuda=cuda, exp=exp, driver=driver
        )

    # This process asks cuDNN nothing (not even its version) until a fresh one has loaded it and run a convolution:
    # a cuDNN that cannot load its libraries ends the process that calls it.
    cudnn_parts = None
    if not torch.backends.cudnn.is_available():  # a build-time flag: no cuDNN call
        checks.append(
            rules.Check(
                errors.CUDNN_LOAD, rules.FAIL, "cuDNN could not be loaded: this torch has none (built without cuDNN)"
            )
        )
    else:
        first = runnable[0] if runnable else 0
        outcome = run_cudnn_probe(first, "float16", options.channels_last, bool(runnable))
        gpu = "GPU {} ({})".format(first, gpus[first]["name"])
        missing = errors.cudnn_sublibrary_hint() if outcome.state != dl_workers.OK else None
        check, cudnn_parts = cudnn_load_check(outcome, gpu, functools.partial(describe_error, first), missing)
        checks.append(check)
    cudnn_loaded = checks[-1].status != rules.FAIL
    if cudnn_parts is not None:
        versions["cudnn"] = dl_stack.format_version(cudnn_parts)
    checks.append(rules.compare_check("cudnn_version", "cuDNN", cudnn_parts, versions["cudnn"], exp.cudnn, 2))

    bf16 = getattr(torch.cuda, "is_bf16_supported", None)
    for index in runnable:
        if not cudnn_loaded:
            checks.append(
                rules.Check(f"train[{index}]", rules.SKIP, "not run: cuDNN could not be loaded (see cudnn_load)")
            )
            continue
        describe = functools.partial(describe_error, index)
        checks.append(torch_train_check(torch, index, "float16", options, describe))
        with torch.cuda.device(index):
            bf16_ok = bf16 is not None and hasattr(torch, "autocast") and bf16()
        if bf16_ok:
            checks.append(torch_train_check(torch, index, "bfloat16", options, describe))
        else:
            checks.append(
                rules.Check(f"train_amp_bf16[{index}]", rules.SKIP, "bf16 not supported by this GPU or torch")
            )

    if count > 1:
        if not options.multi_gpu:
            checks.append(rules.Check("multi_gpu", rules.SKIP, f"{count} GPUs visible; not run (--no-multi-gpu)"))
        elif len(runnable) < count or not cudnn_loaded:
            checks.append(
                rules.Check("multi_gpu", rules.SKIP, f"{count} GPUs visible; not run: a GPU failed the checks above")
            )
        else:
            checks += multi_gpu_checks(torch, gpus, options, versions["nccl"])
    return rules.Probe(checks, gpus, versions, True)
