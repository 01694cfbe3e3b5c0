"""The learner at the study's shape, without vLLM: memory and time of train.learn().

    python bench/bench_learner.py memory [--layers 2] [--group-size 2]       # CPU: chunked vs not
    python bench/bench_learner.py update [--layers 28] [--groups 8]          # GPU: one update per objective
    python bench/bench_learner.py update --layers 2 --groups 2 --max-tokens 1024   # the same, CPU-sized
    python bench/bench_learner.py loop                                       # GPU: train.py's loop, no vLLM
    python bench/bench_learner.py check                                      # GPU: the box's check, < 8 min

A random-init Qwen3 with Qwen3-1.7B-Base's shape (hidden 2048, 16 heads, 8 KV heads, vocabulary
151,936, tied embeddings; --layers of its 28) is saved to a temporary folder and loaded by the
real learner code (learner.build_learner), with configs/qwen3_1.7b_base.yaml's settings
(float32 weights, bf16 autocast, gradient checkpointing, micro-batches of one group). Rollouts
are synthetic: random tokens, prompts of 80-250 tokens, response lengths drawn like a base
model's on MATH (median ~700 tokens, a tail cut at --max-tokens; memory mode: 1,000-2,000),
random rewards, and behavior log-probs from the learner itself (learner.rollout_logp, whose
time is the cost of behavior_logp=learner).

memory: one learn() on one micro-batch (one group of --group-size, 2 on CPU so that the
  unchunked code fits in memory), in a fresh process per setting, with the output layer all at
  once (logits_chunk_mib=0: the code before chunking) and in chunks (the config's value): the
  peak memory learn() adds (CUDA: max_memory_allocated; CPU: the process's peak RSS, reset
  before learn(), after a first update made AdamW's states: the gradients, activations and
  logits of one micro-batch), and the largest differences of log-probs, entropy, the surrogate
  (the loss value) and gradients.
update: one learn() per objective on a rollout batch of --groups groups of 8 (on a GPU 8 by
  default, an eighth of the study's 64, sized for a few minutes of GPU time in all: time per
  update grows with the groups, the peak does not, being that of one micro-batch), whose first
  group's responses all run to --max-tokens (the largest micro-batch the study can make): peak
  memory and seconds per phase (time/behavior, time/ref, time/learn, time/optim, time/metrics).
loop: the whole loop of train.train, sampling included, with the transformers sampler (no vLLM)
  and configs/qwen3_1.7b_quick.yaml's settings (bf16 sampler copy, bf16 autocast, gradient
  checkpointing, one group per micro-batch; engine_k3's learner pass on every batch, so that every
  update times it) on toy prompts, with a tokenizer of --vocab tokens
  built in code (the toy's characters, then filler tokens; nothing is downloaded): N = 1, 3
  updates of GRPO, stopped by SIGTERM after update 2 (its checkpoint), resumed (resume=true,
  a new learner and sampler from that checkpoint) for update 3. Prints each update's seconds by
  phase, each run's wall time and peak memory, and checks that the resumed update trained on the
  checkpoint's queued batch (staleness 1). Defaults: 16 prompts x 8 responses of --max-tokens 512
  (the quick config's batch, half its response length; random weights never sample eos, so
  every response is that long), 8 layers on a GPU (2 on CPU) and keep_checkpoints=1: a
  checkpoint holds fp32 weights and AdamW's two moments, 12 bytes a parameter (20.7 GB at 28
  layers, 8.6 GB at 8), and the second is written before the first is deleted, so the loop's
  disk peaks at the model and two checkpoints: 20 GB at 8 layers (48 GB at 28).
check: the GPU box's check (one H200, 16 cores, 128 GiB, 64 GiB disk, torch and transformers,
  no vLLM, no `datasets`, no `math_verify`, no network), within --time-budget-s (480) and
  --disk-budget-gb (25): picks the writable folder with the most free space among the
  temporary folder, /tmp, /var/tmp, $OUT, the working directory and /dev/shm (or --dir), runs
  `update` for --losses (grpo, ggpo: with and without a reference) at the study's shape (28
  layers, 8 groups, the first at --max-tokens 3072) and `loop` (--loop-layers 8, responses of
  --loop-max-tokens 512), each model deleted after its check, and prints one PASS/FAIL line per
  check (the filesystem, each learn(), the loop, disk, time, imports: vllm, datasets and
  math_verify never imported) with the numbers to record (peak memory, seconds per phase, disk
  at its peak), then those numbers as one JSON line; exits 1 if a check failed.
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
NOT_ON_THE_BOX = ("vllm", "datasets", "math_verify")  # the GPU box has none of them
QWEN3_1_7B = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                  max_position_embeddings=32768, rope_theta=1_000_000, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)


def peak_reset() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:  # the kernel resets the process's peak RSS (VmHWM) to its current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")


def memory_now_and_peak() -> tuple:
    """(current, peak) bytes: CUDA allocator's, or the process's resident set."""
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    kib = lambda key: int(status[key].split()[0]) * 1024
    return kib("VmRSS"), kib("VmHWM")


def run_config(args, overrides=()) -> dict:
    import config
    import torch
    cfg = config.load_config(os.path.join(ROOT, "configs", "qwen3_1.7b_base.yaml"), [
        f"model={args.model_dir}", "device=auto", f"max_tokens={args.max_tokens}",
        f"group_size={args.group_size}",
        f"micro_batch_size={args.group_size}"] + list(overrides))
    if not torch.cuda.is_available() and args.cpu_autocast == "none":
        cfg["autocast"] = None
    return cfg


def random_qwen3(folder: str, layers: int, vocab: int, with_tokenizer: bool = False) -> None:
    """A random-init Qwen3-1.7B-shaped model of `layers` layers and a `vocab`-token vocabulary in
    `folder` (kept if there), with padded_toy_tokenizer if `with_tokenizer`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    if os.path.exists(os.path.join(folder, "config.json")):
        return
    torch.manual_seed(0)
    special = dict(pad_token_id=0, eos_token_id=1, bos_token_id=1) if with_tokenizer else {}
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # fast random init
        net = Qwen3ForCausalLM(Qwen3Config(**{**QWEN3_1_7B, "num_hidden_layers": layers,
                                              "vocab_size": vocab}, torch_dtype="float32", **special))
    net.save_pretrained(folder)
    if with_tokenizer:
        padded_toy_tokenizer(vocab).save_pretrained(folder)


def padded_toy_tokenizer(vocab: int):
    """The toy's character tokenizer (<pad> 0, <eos> 1, printable characters) padded with filler
    tokens <t98>, <t99>, ... to `vocab` entries: prompts encode as in the toy, and every id a
    random model samples decodes."""
    import tasks
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = tasks.build_tokenizer().get_vocab()
    words.update({f"<t{i}>": i for i in range(len(words), vocab)})
    tok = Tokenizer(models.WordLevel(words, unk_token=tasks.PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=tasks.PAD, eos_token=tasks.EOS,
                                   bos_token=None, unk_token=tasks.PAD)


def synthetic_batch(args, vocab: int, seed: int = 0):
    """--groups groups of --group-size rollouts with random tokens and rewards."""
    import rollout
    rng = random.Random(seed)
    rollouts, rewards = [], []
    for g in range(args.groups):
        prompt = [rng.randrange(10, vocab) for _ in range(rng.randint(80, 250))]
        for _ in range(args.group_size):
            length = (rng.randint(1000, 2000) if args.mode in ("memory", "_child_memory")
                      and args.max_tokens > 2000 else
                      min(args.max_tokens, max(20, int(rng.lognormvariate(6.55, 0.7)))))
            if g == 0 and args.mode in ("update", "_child_update"):
                length = args.max_tokens  # the worst micro-batch: every response at the limit
            response = [rng.randrange(10, vocab) for _ in range(length)]
            rollouts.append(rollout.Rollout(g, prompt, response, "", [0.0] * length, 0,
                                            length < args.max_tokens))
            rewards.append(float(rng.random() < 0.4))
        first = len(rewards) - args.group_size
        rewards[first:first + 2] = [1.0, 0.0]  # a mixed group: a gradient to compare
    return rollout.RolloutBatch(0, rollouts, rewards)


def one_learn(args, loss: str, overrides=(), save_to: str = None) -> dict:
    """Build the learner, set the batch's behavior log-probs, run train.learn once."""
    import torch
    import learner
    import train

    cfg = run_config(args, [f"loss={loss}"] + list(overrides))
    model, ref_model, optimizer = learner.build_learner(cfg)
    device = next(model.parameters()).device
    batch = synthetic_batch(args, model.config.vocab_size)
    times = {}
    with learner.timed(times, "time/behavior", device):
        for r, lp in zip(batch.rollouts, learner.rollout_logp(cfg, model, batch.rollouts, 0)):
            r.behavior_logp = lp
    if save_to:  # log-probs at the starting weights, through this setting's no-grad path
        with torch.no_grad(), learner.autocast(cfg):
            logp0, _, _ = learner.response_logp(model, learner.model_inputs(model, batch.rollouts, 0),
                                                chunk_tokens=learner.chunk_tokens(cfg, model))
    # AdamW makes its states at its first step: take one on a tiny batch first, so that the peak
    # below is that of a micro-batch's forward and backward, not of making the states
    tiny = synthetic_batch(argparse.Namespace(**{**vars(args), "groups": 1, "max_tokens": 8}),
                           model.config.vocab_size)
    train.learn(cfg, model, ref_model, optimizer, tiny, pad_id=0)
    before, _ = memory_now_and_peak()
    peak_reset()
    metrics = train.learn(cfg, model, ref_model, optimizer, batch, pad_id=0)
    _, peak = memory_now_and_peak()
    lengths = [len(r.response_ids) for r in batch.rollouts]
    out = {"objective": loss, "layers": model.config.num_hidden_layers, "responses": len(lengths),
           "response_tokens": sum(lengths), "longest": max(lengths),
           "logits_chunk_mib": cfg["logits_chunk_mib"],
           "chunk_tokens": learner.chunk_tokens(cfg, model),
           "learn_peak_added_GiB": (peak - before) / 2 ** 30, "peak_GiB": peak / 2 ** 30,
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           **times, **{k: v for k, v in metrics.items() if k.startswith("time/")},
           **{k: metrics[k] for k in ("surrogate", "k3", "entropy", "grad_norm")},
           "imported": [m for m in NOT_ON_THE_BOX if sys.modules.get(m) is not None]}
    if save_to:  # learn() leaves the (clipped) gradients of its step in p.grad
        torch.save({"grads": {n: p.grad.cpu() for n, p in model.named_parameters()},
                    "logp": logp0.cpu()}, save_to)
    return out


def child(args) -> None:
    result = one_learn(args, args.loss, [f"logits_chunk_mib={args.chunk_mib}"], args.save_to)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(args, chunk_mib: int, save_to: str = None, loss: str = "grpo") -> dict:
    """one_learn in a fresh process; with save_to, it also saves the starting log-probs of the
    whole batch at once and the step's gradients there (memory mode's one-group batch only)."""
    cmd = [sys.executable, __file__, f"_child_{args.mode}", "--layers", str(args.layers), "--groups",
           str(args.groups), "--max-tokens", str(args.max_tokens), "--group-size",
           str(args.group_size), "--model-dir", args.model_dir, "--loss", loss,
           "--chunk-mib", str(chunk_mib), "--cpu-autocast", args.cpu_autocast]
    cmd += ["--save-to", save_to] if save_to else []
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[7:])


def memory(args) -> None:
    import torch
    results, saved = {}, {}
    for chunk_mib in (0, args.chunk_mib or run_config(args)["logits_chunk_mib"]):
        path = os.path.join(args.tmp, f"learn-{chunk_mib}.pt")
        t0 = time.perf_counter()
        results[chunk_mib] = run_child(args, chunk_mib, path)
        results[chunk_mib]["wall_s"] = time.perf_counter() - t0
        saved[chunk_mib] = torch.load(path)
        os.remove(path)
    (_, a), (_, b) = sorted(saved.items())
    diff = lambda x, y: float((x - y).abs().max())
    grads = max(diff(a["grads"][n], b["grads"][n]) / max(float(a["grads"][n].abs().max()), 1e-30)
                for n in a["grads"])
    for chunk_mib, r in results.items():
        print(f"logits_chunk_mib={chunk_mib:<5} ({r['chunk_tokens'] or 'all'} tokens a chunk): "
              f"{r['responses']} responses, {r['response_tokens']} response tokens (longest "
              f"{r['longest']}), {r['layers']} layers: learn() added {r['learn_peak_added_GiB']:.2f} "
              f"GiB at its peak (process peak {r['peak_GiB']:.2f} GiB); learn {r['time/learn']:.1f} s, "
              f"child wall {r['wall_s']:.0f} s")
    r0, r1 = results.values()
    print(f"the same numbers: token log-probs differ by at most {diff(a['logp'], b['logp']):.2e} "
          f"(of {float(a['logp'].abs().max()):.1f}); gradients by at most {grads:.2e} of each "
          f"tensor's largest entry; surrogate {r0['surrogate']:.8f} vs {r1['surrogate']:.8f}; entropy "
          f"{r0['entropy']:.6f} vs {r1['entropy']:.6f}; grad norm {r0['grad_norm']:.6f} vs "
          f"{r1['grad_norm']:.6f}")
    print(json.dumps({str(k): v for k, v in results.items()}))


def update(args) -> None:
    print(f"one learn() per objective: {args.groups} groups of {args.group_size}, max_tokens {args.max_tokens}, "
          f"{args.layers} layers", flush=True)
    t0 = time.perf_counter()
    for loss in args.losses.split(","):
        r = run_child(args, run_config(args)["logits_chunk_mib"], loss=loss)
        phases = "  ".join(f"{k[5:]} {r[k]:.2f}" for k in ("time/behavior", "time/ref", "time/learn",
                                                             "time/optim", "time/metrics"))
        print(f"{loss:9s} peak {r['peak_GiB']:6.2f} GiB (learn() +{r['learn_peak_added_GiB']:.2f})  "
              f"{r['response_tokens']} response tokens, longest {r['longest']}  seconds: {phases}",
              flush=True)
    print(f"wall {time.perf_counter() - t0:.0f} s for {len(args.losses.split(','))} objectives "
          f"(each a fresh process: load, behavior pass, one tiny and one full learn())")


def loop(args) -> dict:
    """train.train at the study's shape without vLLM: N = 1, 3 updates, SIGTERM after update 2,
    resume for update 3 (see the module docstring); returns each run's wall seconds and peak
    memory, and each update's seconds by phase."""
    import signal
    import torch
    import config
    import train

    on_gpu = torch.cuda.is_available()
    cfg = config.load_config(os.path.join(ROOT, "configs", "qwen3_1.7b_quick.yaml"), [
        f"model={args.model_dir}", f"out_dir={os.path.join(args.tmp, 'run')}", "task=toy",
        "sampler=transformers", "device=auto", "delay=1", "updates=3", "eval_every=0",
        "ckpt_every=0", "keep_checkpoints=1", "loss=grpo", "stop_strings=[]",
        "engine_mismatch_every=1",  # engine_k3's learner pass on every batch: each update times it
        f"prompts_per_update={args.prompts}",
        f"group_size={args.group_size}", f"micro_batch_size={args.group_size}",
        f"max_tokens={args.max_tokens}", f"vllm.max_model_len={args.max_tokens + 64}"])
    if not on_gpu and args.cpu_autocast == "none":
        cfg.update(autocast=None, sampler_dtype=None)
    print(f"train.train: {cfg['prompts_per_update']} prompts x {cfg['group_size']} responses of "
          f"<= {cfg['max_tokens']} tokens, N = 1, 3 updates, learner {cfg['dtype']} (autocast "
          f"{cfg['autocast']}), sampler {cfg['sampler_dtype'] or cfg['dtype']}, gradient "
          f"checkpointing {cfg['gradient_checkpointing']}", flush=True)
    calls = {"n": 0}
    original_learn = train.learn

    def learn_then_stop(*a, **kw):  # SIGTERM during update 2: it finishes, checkpoints, returns
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return original_learn(*a, **kw)

    rows, stats = [], {}
    for name, run in (("run", cfg), ("resume", {**cfg, "resume": True})):
        peak_reset()
        t0 = time.perf_counter()
        train.learn = learn_then_stop if name == "run" else original_learn
        try:
            got = train.train(run)
        finally:
            train.learn = original_learn
        wall = time.perf_counter() - t0
        _, peak = memory_now_and_peak()
        print(f"{name}: updates {[r['update'] for r in got]} in {wall:.1f} s (sampler and learner "
              f"start, checkpoint included); peak {'GPU' if on_gpu else 'process'} memory "
              f"{peak / 2 ** 30:.2f} GiB", flush=True)
        for r in got:
            print(f"  update {r['update']}: " + "  ".join(
                f"{k[5:]} {r[k]:.2f}" for k in ("time/generate", "time/grade", "time/behavior",
                                                 "time/learn", "time/optim", "time/sync",
                                                 "time/update") if k in r)
                  + f"  s; response tokens {r['response_len_mean'] * args.prompts * args.group_size:.0f}"
                  f", engine_k3 {r.get('engine_k3', float('nan')):.2e}, staleness {r['staleness']:.0f}",
                  flush=True)
        rows += got
        stats[name] = {"wall_s": wall, "peak_GiB": peak / 2 ** 30}
        if on_gpu:
            torch.cuda.empty_cache()
    assert [r["update"] for r in rows] == [1, 2, 3], [r["update"] for r in rows]
    assert [r["staleness"] for r in rows] == [0, 1, 1] and rows[2]["sampler_version"] == 1
    print("resumed from the update-2 checkpoint: update 3 trained on its queued batch "
          "(sampled by version 1, staleness 1)")
    stats["updates"] = {r["update"]: {k[5:]: r[k] for k in r if k.startswith("time/")} for r in rows}
    return stats


def writable_folders() -> list:
    """[(free bytes, folder)] of the folders the check may write to, one per filesystem (the
    first named here of those on it), most free space first: the temporary folder, /tmp,
    /var/tmp, $OUT, the working directory, /dev/shm (memory)."""
    found = {}  # filesystem -> (free bytes, folder)
    for folder in (tempfile.gettempdir(), "/tmp", "/var/tmp", os.environ.get("OUT"), os.getcwd(),
                   "/dev/shm"):
        if folder and os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            found.setdefault(os.stat(folder).st_dev, (shutil.disk_usage(folder).free, folder))
    return sorted(found.values(), key=lambda free_folder: -free_folder[0])


def n_params(layers: int, vocab: int) -> int:
    """Parameters of the random Qwen3 that random_qwen3 makes (counted on the meta device)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    with torch.device("meta"):
        net = Qwen3ForCausalLM(Qwen3Config(**{**QWEN3_1_7B, "num_hidden_layers": layers,
                                              "vocab_size": vocab}))
    return sum(p.numel() for p in net.parameters())


class DiskPeak:
    """The most bytes the files under `folder` held at once, polled every 0.2 s in a thread."""

    def __init__(self, folder: str):
        self.folder, self.peak, self.done = folder, 0, threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def now(self) -> int:
        total = 0
        for d, _, names in os.walk(self.folder):
            for n in names:
                try:
                    total += os.stat(os.path.join(d, n)).st_blocks * 512
                except OSError:  # deleted while walking
                    pass
        return total

    def poll(self) -> None:
        while not self.done.wait(0.2):
            self.peak = max(self.peak, self.now())

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, self.now())
        return self.peak


def check(args) -> int:
    """The GPU box's check (see the module docstring); returns the exit code."""
    import torch
    on_gpu, t_start, verdicts, record = torch.cuda.is_available(), time.perf_counter(), [], {}

    def verdict(ok: bool, name: str, detail: str) -> None:
        verdicts.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    import run_info
    machine = run_info.session_info(0, "-", "-")
    cpu, versions = machine["cpu"], machine["versions"]
    print(f"machine: {machine['gpu'] or 'no GPU'}; {cpu['model']} ({', '.join(cpu['isa'])}), "
          f"{cpu['usable_cores']} of {cpu['cores']} cores usable, torch {versions['torch']} "
          f"(CUDA {versions['cuda']}), transformers {versions['transformers']}, vllm "
          f"{versions['vllm']}, python {versions['python']}", flush=True)
    gb = lambda n: f"{n / 1e9:.1f} GB"
    folders = writable_folders() if not args.dir else [(shutil.disk_usage(args.dir).free, args.dir)]
    free, root = folders[0]
    # the learn() model, deleted before the loop; the loop's model and its two checkpoints
    learn_bytes = 4 * n_params(args.layers, args.vocab)
    loop_bytes = 28 * n_params(args.loop_layers, args.vocab)
    need = max(learn_bytes, loop_bytes)
    record.update(folder=root, free_GB=free / 1e9, need_GB=need / 1e9)
    verdict(free >= need and need <= args.disk_budget_gb * 1e9, "filesystem",
            f"{root}, {gb(free)} free (" + ", ".join(f"{f} {gb(n)}" for n, f in folders[1:])
            + f"); the check needs {gb(need)} at its peak (the learn() model {gb(learn_bytes)}; "
            f"the loop's model and two checkpoints {gb(loop_bytes)}), budget {args.disk_budget_gb} GB")
    if not verdicts[-1]:
        return 1
    imported = set()
    with tempfile.TemporaryDirectory(prefix="bench-check-", dir=root) as tmp:
        disk = DiskPeak(tmp)
        try:
            learn_args = argparse.Namespace(**{**vars(args), "mode": "update",
                                               "model_dir": os.path.join(tmp, "model-learn")})
            t0 = time.perf_counter()
            random_qwen3(learn_args.model_dir, args.layers, args.vocab)
            record["build_learn_model_s"] = time.perf_counter() - t0
            for loss in args.losses.split(","):
                t0 = time.perf_counter()
                try:
                    r = run_child(learn_args, run_config(learn_args)["logits_chunk_mib"], loss=loss)
                except SystemExit as e:  # run_child's message: the child's exit and stderr
                    verdict(False, f"learn {loss}", str(e).strip().splitlines()[-1][:300])
                    continue
                wall = time.perf_counter() - t0
                imported |= set(r["imported"])
                phases = {k[5:]: r[k] for k in ("time/behavior", "time/ref", "time/learn",
                                                "time/optim", "time/metrics")}
                record[f"learn_{loss}"] = {"peak_GiB": r["peak_GiB"], "wall_s": wall, **phases}
                ok = all(math.isfinite(r[k]) for k in ("surrogate", "grad_norm"))
                verdict(ok, f"learn {loss}",
                        f"{r['layers']} layers, {r['responses']} responses, {r['response_tokens']} "
                        f"response tokens (longest {r['longest']}): peak {r['peak_GiB']:.2f} GiB "
                        f"({r['device']}); seconds " + "  ".join(f"{k} {v:.2f}" for k, v in phases.items())
                        + f"; process {wall:.0f} s; surrogate {r['surrogate']:.4g}, grad norm {r['grad_norm']:.4g}")
            shutil.rmtree(learn_args.model_dir)
            loop_args = argparse.Namespace(**{**vars(args), "mode": "loop", "layers": args.loop_layers,
                                              "max_tokens": args.loop_max_tokens,
                                              "tmp": os.path.join(tmp, "loop"),
                                              "model_dir": os.path.join(tmp, "model-loop")})
            t0 = time.perf_counter()
            try:
                random_qwen3(loop_args.model_dir, args.loop_layers, args.vocab, with_tokenizer=True)
                stats = loop(loop_args)
            except Exception as e:  # noqa: BLE001 - the check reports it and goes on
                verdict(False, "loop", f"{type(e).__name__}: {str(e).strip()[:300]}")
            else:
                wall = time.perf_counter() - t0
                record["loop"] = {**stats, "wall_s": wall}
                verdict(True, "loop", f"{args.loop_layers} layers, {args.prompts} prompts x "
                        f"{args.group_size} responses of {args.loop_max_tokens} tokens: updates 1-2, "
                        f"SIGTERM, resumed for 3 at staleness 1; peak {'GPU' if on_gpu else 'process'} "
                        f"memory {max(stats['run']['peak_GiB'], stats['resume']['peak_GiB']):.2f} GiB; "
                        f"{wall:.0f} s with the model's build")
        finally:
            peak = disk.stop()
    imported |= {m for m in NOT_ON_THE_BOX if sys.modules.get(m) is not None}
    wall = time.perf_counter() - t_start
    record.update(disk_peak_GB=peak / 1e9, wall_s=wall)
    verdict(peak <= args.disk_budget_gb * 1e9, "disk", f"{gb(peak)} at the peak in {root} "
            f"(budget {args.disk_budget_gb} GB; all deleted)")
    verdict(wall <= args.time_budget_s, "time", f"{wall:.0f} s (budget {args.time_budget_s} s)")
    verdict(not imported, "imports", f"{', '.join(NOT_ON_THE_BOX)}: "
            + (f"imported: {', '.join(sorted(imported))}" if imported else "none imported"))
    print("RECORD " + json.dumps(record), flush=True)
    print(f"{sum(verdicts)} of {len(verdicts)} checks passed", flush=True)
    return 0 if all(verdicts) else 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["memory", "update", "loop", "check", "_child_memory",
                                    "_child_update"])
    p.add_argument("--layers", type=int, help="decoder layers (default: 2 on CPU; on GPU 28, loop 8)")
    p.add_argument("--groups", type=int, help="groups per batch (memory: 1; update: 8 on GPU, 1 on CPU)")
    p.add_argument("--group-size", type=int, help="responses per group, one group per micro-batch "
                                                  "(memory: 2 on CPU, else 8)")
    p.add_argument("--max-tokens", type=int, help="response length limit (default: 3072; loop: 512)")
    p.add_argument("--prompts", type=int, default=16, help="loop: prompts per update")
    p.add_argument("--vocab", type=int, default=QWEN3_1_7B["vocab_size"],
                   help="vocabulary size (the real one by default; smaller only to smoke-test)")
    p.add_argument("--losses", help="objectives (update: grpo,grpo_tis,agro,ggpo; check: grpo,ggpo)")
    p.add_argument("--cpu-autocast", choices=["bfloat16", "none"], default="bfloat16",
                   help="on CPU: keep the config's bf16 autocast, or run fp32 throughout")
    p.add_argument("--model-dir"), p.add_argument("--loss", default="grpo")
    p.add_argument("--chunk-mib", type=int, help="memory: the chunked setting (default: the config's)")
    p.add_argument("--save-to")
    p.add_argument("--loop-layers", type=int, help="check: the loop's layers (default: 8 on GPU, 1 on CPU)")
    p.add_argument("--loop-max-tokens", type=int, help="check: the loop's responses (512; CPU: 16)")
    p.add_argument("--time-budget-s", type=float, default=480, help="check: fail beyond it")
    p.add_argument("--disk-budget-gb", type=float, default=25, help="check: fail beyond it")
    p.add_argument("--dir", help="the folder for the model and checkpoints (default: the "
                                 "writable one with the most free space)")
    args = p.parse_args()
    sys.path.insert(0, ROOT)
    if args.mode.startswith("_child"):
        return child(args)
    import torch
    on_gpu = torch.cuda.is_available()
    args.layers = args.layers or ((8 if args.mode == "loop" else 28) if on_gpu else 2)
    args.groups = args.groups or (8 if args.mode in ("update", "check") and on_gpu else 1)
    args.group_size = args.group_size or (2 if args.mode == "memory" and not on_gpu else 8)
    args.max_tokens = args.max_tokens or (512 if args.mode == "loop" else
                                          256 if args.mode == "check" and not on_gpu else 3072)
    args.losses = args.losses or ("grpo,ggpo" if args.mode == "check" else "grpo,grpo_tis,agro,ggpo")
    if args.mode == "check":
        args.loop_layers = args.loop_layers or (8 if on_gpu else 1)
        args.loop_max_tokens = args.loop_max_tokens or (512 if on_gpu else 16)
        sys.exit(check(args))
    with tempfile.TemporaryDirectory(prefix="bench-learner-", dir=args.dir or writable_folders()[0][1]) as tmp:
        args.tmp, args.model_dir = tmp, os.path.join(tmp, "model")
        t0 = time.perf_counter()
        random_qwen3(args.model_dir, args.layers, args.vocab, with_tokenizer=args.mode == "loop")
        print(f"random-init Qwen3-1.7B shape, {args.layers} layers, vocabulary {args.vocab:,}, built in "
              f"{time.perf_counter() - t0:.0f} s ({'GPU ' + torch.cuda.get_device_name() if on_gpu else 'CPU'}, "
              f"torch {torch.__version__})", flush=True)
        {"memory": memory, "update": update, "loop": loop}[args.mode](args)


if __name__ == "__main__":
    main()
