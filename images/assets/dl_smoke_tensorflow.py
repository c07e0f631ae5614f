"""dl-smoke's TensorFlow probe: the build's versions and arch list, the GPUs TF registers, and a mixed-precision
Keras fit on one GPU, each turned into checks. A part of dl-smoke (dl_smoke.py).
"""

# Postponed annotations keep the modern typing syntax importable on Python 3.8.
from __future__ import annotations

import os
import sys
import tempfile
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The modules it imports lie beside it, in images (/usr/local/bin) as in the source tree: see dl_smoke.py.
if TYPE_CHECKING or __package__:
    from . import dl_smoke_errors as errors
    from . import dl_smoke_rules as rules
    from . import dl_stack
else:
    import dl_smoke_errors as errors
    import dl_smoke_rules as rules
    import dl_stack


class _NativeStderr:
    """Capture what C++ code writes to fd 2 (TF logs CUDA init errors there, not in Python)."""

    def __init__(self) -> None:
        self.text = ""
        self._saved = -1
        self._file: Any = None

    def __enter__(self) -> _NativeStderr:
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()


def tf_set_policy(tf: ModuleType, policy: Any) -> None:
    # set_global_policy is the API from TF 2.4 on (and Keras 3); 2.1-2.3 had it experimental.
    mixed = tf.keras.mixed_precision
    if hasattr(mixed, "set_global_policy"):
        mixed.set_global_policy(policy)
    else:
        mixed.experimental.set_policy(policy)


def tf_global_policy(tf: ModuleType) -> Any:
    mixed = tf.keras.mixed_precision
    if hasattr(mixed, "global_policy"):
        return mixed.global_policy()
    return mixed.experimental.global_policy()


def _tf_variable_device(variable: Any) -> str:
    # Keras 2 variables carry .device; Keras 3 wraps a tf.Variable in .value.
    device = getattr(variable, "device", None)
    if not device and hasattr(variable, "value"):
        device = getattr(variable.value, "device", None)
    return str(device or "")


def train_tensorflow(tf: ModuleType, device: str, steps: int) -> list[float]:
    """A mixed_float16 Keras fit of a small conv model on one GPU; raises when a weight is off the GPU.

    The optimizer is the one users get from tf.keras.optimizers (from TF 2.11 on it compiles its update step with
    XLA on the GPU, which needs libdevice), compiled and fitted as users do, so what breaks their training breaks
    this step too."""
    prior = tf_global_policy(tf)
    tf_set_policy(tf, "mixed_float16")
    try:
        tf.random.set_seed(rules.TRAIN_SEED)
        with tf.device(device):
            x = tf.random.normal(
                (rules.TRAIN_SAMPLES, rules.TRAIN_IMAGE, rules.TRAIN_IMAGE, rules.TRAIN_CHANNELS), seed=1
            )
            teacher = tf.random.normal((rules.TRAIN_CHANNELS, rules.TRAIN_CLASSES), seed=2)
            y = tf.argmax(tf.matmul(tf.reduce_mean(x, axis=[1, 2]), teacher), axis=1)
            layers = tf.keras.layers
            model = tf.keras.Sequential(
                [
                    tf.keras.Input(shape=(rules.TRAIN_IMAGE, rules.TRAIN_IMAGE, rules.TRAIN_CHANNELS)),
                    layers.Conv2D(rules.TRAIN_WIDTH, 3, padding="same", use_bias=False),
                    layers.BatchNormalization(),
                    layers.ReLU(),
                    layers.Conv2D(2 * rules.TRAIN_WIDTH, 3, strides=2, padding="same", activation="relu"),
                    layers.GlobalAveragePooling2D(),
                    layers.Dense(rules.TRAIN_CLASSES),
                    # Softmax-side outputs stay float32, as the mixed-precision guide asks.
                    layers.Activation("linear", dtype="float32"),
                ]
            )
            model.compile(
                optimizer=tf.keras.optimizers.Adam(rules.TRAIN_LR),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            history = model.fit(x, y, batch_size=rules.TRAIN_SAMPLES, epochs=steps, verbose=0, shuffle=False)
        compute_dtype = str(getattr(model.layers[0], "compute_dtype", ""))
        if "float16" not in compute_dtype:
            raise RuntimeError("mixed_float16 did not engage: compute dtype {}".format(compute_dtype or "unknown"))
        off = [v.name for v in model.weights if "GPU" not in _tf_variable_device(v).upper()]
        if off:
            raise RuntimeError("weights not on the GPU (CPU fallback): {}".format(", ".join(off)))
        return [float(v) for v in history.history["loss"]]
    finally:
        tf_set_policy(tf, prior)


def probe_tensorflow(
    tf: ModuleType, exp: rules.Expectations, options: rules.RunOptions, driver: str | None
) -> rules.Probe:
    info: dict[str, Any] = {}
    if hasattr(tf, "sysconfig") and hasattr(tf.sysconfig, "get_build_info"):
        info = dict(tf.sysconfig.get_build_info())
    cuda = info.get("cuda_version")
    cudnn_raw = info.get("cudnn_version")
    # TF's build info often holds only the cuDNN major ("8"): compare no deeper than it gives.
    cudnn_parts = dl_stack.decode_cudnn_version(cudnn_raw, pad=False)
    cudnn_text = str(cudnn_raw) if cudnn_raw else None
    versions = rules.probe_versions(tf.__version__, str(cuda) if cuda else None, cudnn_text, driver)
    depth = min(2, len(cudnn_parts)) if cudnn_parts else 2
    checks = [
        *rules.version_checks("tensorflow", versions, exp),
        rules.compare_check("cudnn_version", "cuDNN", cudnn_parts, versions["cudnn"], exp.cudnn, depth),
    ]
    config = tf.config
    lister = getattr(config, "list_physical_devices", None) or config.experimental.list_physical_devices
    with _NativeStderr() as native:
        gpus = lister("GPU")
    if native.text:
        sys.stderr.write(native.text)
    if not gpus:
        # TF registers no GPU when it cannot dlopen cuDNN ("Cannot dlopen some GPU libraries"): that is the cause.
        problem = errors.classify_cudnn_error(native.text)
        if problem is not None:
            check = rules.Check(errors.CUDNN_LOAD, rules.FAIL, errors.describe_cudnn_problem(problem))
            return rules.Probe([*checks, check], [], versions, True)
        built = bool(tf.test.is_built_with_cuda())
        check, visible = rules.unavailable_check("cuda_available", native.text, built, versions["cuda"], exp, driver)
        return rules.Probe([*checks, check], [], versions, visible)
    checks.append(rules.Check("cuda_available", rules.PASS, f"{len(gpus)} GPU(s) visible"))
    arch_list = info.get("cuda_compute_capabilities")
    arch_list = [str(a) for a in arch_list] if arch_list else None
    checks.append(rules.arch_list_check(arch_list, exp.cuda_arch_list))

    details_of = getattr(config.experimental, "get_device_details", None)
    gpu_rows = []
    capabilities: list[tuple[int, int] | None] = []
    for index, gpu in enumerate(gpus):
        details = dict(details_of(gpu)) if details_of else {}
        raw = details.get("compute_capability")
        capabilities.append(None if raw is None else (int(raw[0]), int(raw[1])))
        gpu_rows.append(
            {
                "index": index,
                "name": details.get("device_name", gpu.name),
                "capability": "{}.{}".format(*raw) if raw else None,
            }
        )
        unknown = "capability or build arch list unknown; not checked"
        checks.append(rules.gpu_arch_check(index, gpu_rows[-1]["name"], capabilities[-1], arch_list, unknown))

    if len(gpus) > 1:
        checks.append(
            rules.Check(
                "multi_gpu",
                rules.SKIP,
                f"{len(gpus)} GPUs visible; not checked for TensorFlow: dl-smoke's NCCL all-reduce and DDP checks "
                "are PyTorch only (TensorFlow's MirroredStrategy is not exercised)",
            )
        )
    # One GPU is enough for TF: Keras places the fit on one device anyway.
    name = "train_mixed_float16[0]"
    try:
        with _NativeStderr() as native:
            losses = train_tensorflow(tf, "/GPU:0", options.steps)
    except Exception as error:  # TF raises many types (InternalError, NotFoundError, ...)
        sys.stderr.write(native.text)
        detail = rules.describe_cuda_failure(
            str(error),
            capability=capabilities[0],
            arch_list=arch_list,
            cuda=versions["cuda"],
            exp=exp,
            driver=driver,
            log=native.text,
        )
        checks.append(rules.Check(name, rules.FAIL, detail))
        # The conv fit is where TF first touches cuDNN: a cuDNN cause gets its own check.
        problem = errors.classify_cudnn_error(f"{error}\n{native.text}")
        if problem is not None:
            checks.append(rules.Check(errors.CUDNN_LOAD, rules.FAIL, errors.describe_cudnn_problem(problem)))
        return rules.Probe(checks, gpu_rows, versions, True)
    checks.append(rules.loss_check(name, losses, "conv + batch norm, Keras Adam"))
    loaded = "cuDNN {} loaded: the conv model's fit ran".format(cudnn_text or "(version unknown)")
    checks.append(rules.Check(errors.CUDNN_LOAD, rules.PASS, loaded))
    return rules.Probe(checks, gpu_rows, versions, True)
