"""The processor and the learner's CPU matrix products: what this machine is (cpuinfo, cpu_info
for run_info.json) and which backend computes the learner's float32 products on it (cpu_matmul:
torch's BLAS or oneDNN, chosen by a rule over the processor and kept for the life of a run,
since the backend decides the learner's rounding). docs/speed.md has the measurements behind
the rule.
"""
import os
import platform
import sys

import torch


def cpuinfo() -> dict:
    """The first processor's fields of /proc/cpuinfo (Linux; {} elsewhere): key -> value."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


# the instruction sets that choose torch's, oneDNN's and vLLM's CPU kernels (x86 / arm flags)
KERNEL_ISA = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
              "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2",
              "bf16", "i8mm")


def cpu_info() -> dict:
    """The processor: model, vendor, family and model number (x86: they name the generation,
    e.g. AMD family 25 model 17 is Zen 4; the model name alone does not), the kernel-choosing
    instruction sets it has (/proc/cpuinfo's flags, Linux), torch's view of them (its CPU
    capability), cores and usable cores."""
    fields = cpuinfo()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": fields.get("model name") or platform.processor() or platform.machine(),
            "vendor": fields.get("vendor_id") or fields.get("CPU implementer"),
            "family": fields.get("cpu family") or fields.get("CPU architecture"),
            "model_number": fields.get("model") or fields.get("CPU part"),
            "arch": platform.machine(), "isa": [f for f in KERNEL_ISA if f in flags],
            "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "cores": os.cpu_count(), "usable_cores": usable}


class OneDNNLinearFunction(torch.autograd.Function):
    """y = x W^T + b, with every matrix product computed by oneDNN: the forward pass, the input
    gradient g W, and the weight gradient g^T x (from transposed views: oneDNN's own reorder of
    them is faster than an explicit copy, and the product still beats torch's BLAS)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.size(-1)), weight, bias, "none", [], "")
        return y.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        g = grad_y.reshape(-1, grad_y.size(-1))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.mkldnn._linear_pointwise(g, weight.t().contiguous(), None, "none",
                                                         [], "").view(x.shape)
        if ctx.needs_input_grad[1]:
            grad_w = torch.ops.mkldnn._linear_pointwise(g.t(), x.reshape(-1, x.size(-1)).t(), None,
                                                         "none", [], "")
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum(0)
        return grad_x, grad_w, grad_b


class OneDNNLinear(torch.nn.Linear):
    """nn.Linear whose float32 CPU matrix products go through OneDNNLinearFunction (under
    autocast, torch's own linear: autocast does not see through a custom function)."""

    def forward(self, x):
        if x.is_cpu and x.dtype == self.weight.dtype == torch.float32 \
                and not torch.is_autocast_enabled("cpu"):
            return OneDNNLinearFunction.apply(x, self.weight, self.bias)
        return super().forward(x)


def use_onednn_linears(model) -> None:
    """On the CPU, run the model's linear layers' float32 matrix products through oneDNN instead
    of torch's default BLAS (MKL), the same products up to float rounding. MKL takes its AVX2
    code path on AMD processors; oneDNN uses AVX-512 wherever the processor has it, as vLLM's
    CPU backend does for the sampler (the throughputs: docs/speed.md). A no-op on the GPU or where torch has no usable oneDNN linear
    (onednn_linear_works: it is an x86 path, absent from e.g. macOS arm64 builds)."""
    if next(model.parameters()).is_cpu and onednn_linear_works():
        for module in model.modules():
            if type(module) is torch.nn.Linear:
                module.__class__ = OneDNNLinear


def matmul_backend(model) -> str:
    """The learner's matrix products as they run (for run_info.json): the GPU's ("cuda"), oneDNN
    ("onednn": use_onednn_linears installed them; float32 only, torch's under autocast) or torch's
    BLAS ("torch": cpu_matmul=torch, or no usable oneDNN linear here)."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        return device.type
    return "onednn" if any(isinstance(m, OneDNNLinear) for m in model.modules()) else "torch"


def cpu_features() -> tuple:
    """(vendor, instruction sets) of this processor: /proc/cpuinfo's vendor_id (GenuineIntel,
    AuthenticAMD; "unknown" elsewhere, e.g. macOS, non-x86) and which of avx2, avx512f, amx_tile
    its flags list."""
    fields = cpuinfo()
    return fields.get("vendor_id", "unknown"), sorted(set(fields.get("flags", "").split())
                                                      & {"avx2", "avx512f", "amx_tile"})


def cpu_matmul_backend(choice: str) -> tuple:
    """(backend, why) for cpu_matmul = `choice`; auto is a rule over the processor, the same on
    every start on one machine (a timing race would not be, and the backend decides the learner's
    rounding); each case is the faster backend where it was measured (docs/speed.md, "The CPU
    matmul rule"; `bench/bench.py --compare-cpu-matmul` measures it on the machine at hand):
      - x86 Intel (GenuineIntel): torch. MKL takes its widest path there.
      - x86 other vendors (AMD) with AVX-512: onednn. MKL picks its code path by vendor and
        takes AVX2 on AMD, oneDNN by the processor's instruction sets.
      - x86 other vendors without AVX-512: torch. Both then run AVX2 code, and MKL's is the
        faster.
      - anything else (aarch64, macOS): torch, its own BLAS; oneDNN there is unmeasured, and
        absent from some builds (onednn_linear_works).
    """
    if choice != "auto":
        return choice, "set in the config"
    vendor, isa = cpu_features()
    what = f"{vendor}, {'/'.join(isa) or 'no AVX2'}"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "torch", f"auto: {platform.machine()} processor ({what}): torch's own BLAS"
    if vendor == "GenuineIntel":
        return "torch", f"auto: Intel processor ({what}): MKL takes its widest path"
    if "avx512f" in isa:
        return "onednn", (f"auto: non-Intel x86 processor with AVX-512 ({what}): MKL would take "
                          f"AVX2, oneDNN AVX-512")
    return "torch", f"auto: non-Intel x86 processor without AVX-512 ({what}): both AVX2, MKL's faster"


_ONEDNN_LINEAR = {}  # whether it works, once found out


def resolve_cpu_matmul(cfg: dict) -> tuple:
    """(cfg with cpu_matmul the backend this run computes with, how it was chosen), the note that
    config.yaml keeps beside it. The backend decides the learner's rounding, so a run keeps the
    one it started with: auto takes the one out_dir/config.yaml records (written when the run
    started; a config.yaml of older code records its explicit onednn or torch), and only a run
    with none recorded yet resolves auto by the processor (cpu_matmul_backend). An
    explicit value other than the recorded one is taken (the key may change on resume, e.g. to
    continue on a machine without oneDNN), with a warning: the run rounds differently from then
    on."""
    recorded, note = None, None
    saved = os.path.join(cfg["out_dir"], "config.yaml")
    if os.path.exists(saved):
        with open(saved) as f:
            for line in f:
                if line.startswith("cpu_matmul:"):
                    value, _, note = line[len("cpu_matmul:"):].partition("#")
                    recorded, note = value.strip(), note.strip() or "recorded in config.yaml"
                    break
    if recorded not in ("onednn", "torch"):
        recorded = None
    if cfg["cpu_matmul"] == "auto" and recorded:
        backend, why = recorded, note
    else:
        backend, why = cpu_matmul_backend(cfg["cpu_matmul"])
        if recorded and backend != recorded:
            print(f"warning: cpu_matmul={backend}, but {cfg['out_dir']} computed with {recorded} so "
                  f"far (its config.yaml): from here on the learner rounds unlike the run never "
                  f"stopped; cpu_matmul=auto continues with {recorded}", file=sys.stderr)
    if cfg["cpu_matmul"] == "auto" and not recorded:
        print(f"cpu_matmul=auto: {backend} ({why})", file=sys.stderr)
    return {**cfg, "cpu_matmul": backend}, why


def onednn_linear_works() -> bool:
    """Whether torch.ops.mkldnn._linear_pointwise exists here and computes x W^T (tried once on a
    small product)."""
    if "works" not in _ONEDNN_LINEAR:
        try:
            x, w = torch.randn(3, 8), torch.randn(5, 8)
            y = torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
            _ONEDNN_LINEAR["works"] = bool(torch.allclose(y, x @ w.t(), rtol=1e-4, atol=1e-5))
        except (AttributeError, RuntimeError, NotImplementedError):
            _ONEDNN_LINEAR["works"] = False
    return _ONEDNN_LINEAR["works"]
