"""How close the loop runs to the engine's pace, phase by phase.

    python bench/bench.py [--models toy,big,floor] [--repeats 5] [--losses grpo,ggpo] [--out bench.json]
    python bench/bench.py --profile 50            # cProfile of 50 toy updates: where the time goes
    python bench/bench.py --compare REF [--rounds 3]   # this checkout against git commit REF, alternately
    python bench/bench.py --compare-samplers [--rounds 3]   # sampler=vllm against sampler=transformers
    python bench/bench.py --compare-cpu-matmul [--rounds 3]   # the learner with onednn and torch matmuls
    python bench/bench.py --vs-trl [--rounds 3]   # toy GRPO here against TRL's GRPOTrainer (HF generate)

An update cannot be faster than (a) generating its rollouts plus (b) one forward/backward pass
of the learner over them; everything else is overhead. For each model, in one process of its
own (one vLLM engine per process), this measures:
  (a) generate  standalone vLLM sampling of one rollout batch in the toy geometry (16 prompts
                x 8 responses, max_tokens 16), through rollout.Sampler.sample;
  (b) fwd/bwd   one plain forward/backward of the learner over that batch (prompt + response,
                right-padded, full logits, loss on the response tokens' log-probs);
  (c) update    one whole update of train.train (delay 0, so that every update samples), for
                each objective in --losses (ggpo: with reference log-probs), with the phases
                the loop logs: time/generate, grade, ref, learn, optim, metrics, sync, log,
                eval, and `other` = time/update minus their sum.
It prints (c) / ((a) + (b)) and each overhead phase (all but generate and learn) as a share of
(c), and writes everything as JSON (--out) for comparison across commits. Each figure is the
median of --repeats rounds after one warm-up round; a round measures (a), (b) and (c) one after
the other, so that a change of load on the machine hits all of them alike.

Then each phase against its floor: (a) against the `floor` model's (a) (a 1-layer, 64-wide Qwen3
through the same engine: the engine's loop at near-zero model cost), (b) and the loop's learn
phase against (b)'s FLOPs (torch's FlopCounterMode) at this CPU's measured matrix-product rate
through the learner's backend, the weight push against copying its bytes once.

Models: `toy` (toy_base, shipped), `big` (a random-init Qwen3 of about 25 M parameters with
the toy tokenizer, built at artifacts/bench_big on first use), `floor` (1 layer, 64 wide,
artifacts/bench_floor), or any Hugging Face folder.
On a GPU the same script runs unchanged: bf16 (as configs say for GPUs), clock() synchronizes
CUDA before reading the time, and the tokens/s figures say how fast engine and learner are.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
MODELS = {"toy": os.path.join(ROOT, "toy_base"),
          "big": os.path.join(ROOT, "artifacts", "bench_big"),
          "floor": os.path.join(ROOT, "artifacts", "bench_floor")}
# the `big` model: tens of millions of parameters, still CPU-sized (about 25 M with vocab 98)
BIG = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
           num_key_value_heads=4, head_dim=64)
# the `floor` model: 1 layer, 64 wide, so that generating through the engine costs its loop alone
FLOOR = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=1,
             num_key_value_heads=1, head_dim=64)
SHAPES = {"big": BIG, "floor": FLOOR}
PHASES = ["generate", "grade", "ref", "learn", "optim", "metrics", "sync", "log", "eval"]
# what (a) and (b) stand for are generate and learn; every other phase of an update is overhead
OVERHEAD = ["grade", "ref", "optim", "metrics", "sync", "log", "eval", "other"]


def clock() -> float:
    """perf_counter after the GPU has finished its queued work (CUDA runs asynchronously)."""
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def random_toy_model(path: str, shape: dict) -> str:
    """A random-init Qwen3 of `shape` with the toy tokenizer (no warm-up: speed only)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    import torch
    import tasks
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = tasks.build_tokenizer()
    config = Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                         torch_dtype="float32", **shape)
    torch.manual_seed(0)
    net = Qwen3ForCausalLM(config)
    tmp = path.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    net.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    os.replace(tmp, path)
    return path


def padded_inputs(rollouts, pad_id: int, device) -> tuple:
    """(input ids, attention mask, response-token mask shifted to the predicted positions) of the
    rollouts as prompt + response rows, right-padded."""
    import torch

    seqs = [r.prompt_ids + r.response_ids for r in rollouts]
    width = max(map(len, seqs))
    ids = torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs], device=device)
    attn = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device)
    resp = torch.tensor([[0] * len(r.prompt_ids) + [1] * len(r.response_ids) + [0] * (width - len(s))
                         for r, s in zip(rollouts, seqs)], device=device)[:, 1:]
    return ids, attn, resp


def fwd_bwd(model, rollouts, pad_id: int) -> float:
    """Seconds of one plain forward/backward over the rollouts (inputs built beforehand)."""
    import torch

    ids, attn, resp = padded_inputs(rollouts, pad_id, next(model.parameters()).device)
    model.zero_grad(set_to_none=True)
    t0 = clock()
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]
    (-(logp * resp).sum() / resp.sum()).backward()
    return clock() - t0


def bench_model(name: str, path: str, repeats: int, losses: list) -> dict:
    """(a), (b), and (c) for each objective in `losses`, for one model, in this process.

    Measured in interleaved rounds, (a), (b), then (c) for each objective, so that a change of
    load on the machine hits all of them alike; the first round is a warm-up and is dropped.
    (c) runs train.train for two updates in a fresh out_dir and keeps the second.
    """
    import torch
    import config
    import learner
    import rollout
    import tasks
    import train

    on_gpu = torch.cuda.is_available()
    if name in SHAPES:
        random_toy_model(path, SHAPES[name])

    def run_config(round_, loss):
        return config.load_config(os.path.join(ROOT, "configs", "toy.yaml"), [
            f"model={path}", f"out_dir={tempfile.mkdtemp(prefix='bench-')}", "delay=0",
            "eval_every=0", f"loss={loss}", "updates=2", f"seed={round_}",
            f"build_toy_model={str(name == 'toy').lower()}",
            f"dtype={'bfloat16' if on_gpu else 'float32'}"])

    cfg = run_config(0, losses[0])
    threads_before = torch.get_num_threads()
    t0 = time.perf_counter()
    sampler = rollout.make_sampler(cfg)
    engine_start = time.perf_counter() - t0
    pad_id = sampler.tokenizer.pad_token_id
    model = learner.load_learner(cfg).train()
    n_params = sum(p.numel() for p in model.parameters())
    gen, gen_tokens, fb, fb_tokens = [], [], [], []
    rows = {loss: [] for loss in losses}
    for round_ in range(1 + repeats):
        # (a) standalone generation of one rollout batch
        prompts = [p["prompt"] for p in tasks.prompts_for_batch(cfg, 10_000 + round_)]
        t0 = clock()
        rollouts = sampler.sample(prompts, cfg["group_size"], cfg["max_tokens"],
                                  cfg["temperature"], seed=round_)
        gen.append(clock() - t0)
        gen_tokens.append(sum(len(r.response_ids) for r in rollouts))
        # (b) one plain forward/backward of the learner over it
        fb.append(fwd_bwd(model, rollouts, pad_id))
        fb_tokens.append(sum(len(r.prompt_ids) + len(r.response_ids) for r in rollouts))
        # (c) whole updates of the loop
        for loss in losses:
            cfg = run_config(round_, loss)
            rows[loss].append(train.train(cfg, sampler=sampler)[-1])
            shutil.rmtree(cfg["out_dir"], ignore_errors=True)

    med = statistics.median
    a, b = med(gen[1:]), med(fb[1:])
    floors = learner_floors({**cfg, "loss": "grpo_tis"}, model, rollouts, pad_id)
    result = {
        "model": path, "params": n_params, "repeats": repeats,
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "dtype": cfg["dtype"], "engine_start_s": engine_start,
        "torch_threads": {"before_engine": threads_before, "after_engine": torch.get_num_threads()},
        "generate_s": a, "generate_tokens_per_s": med(gen_tokens[1:]) / a,
        "fwd_bwd_s": b, "fwd_bwd_tokens_per_s": med(fb_tokens[1:]) / b,
        "all_s": {"generate": gen[1:], "fwd_bwd": fb[1:]}, "floors": floors, "loops": {}}
    for loss in losses:
        kept = rows[loss][1:]
        phases = {k: med([r.get(f"time/{k}", 0.0) for r in kept]) for k in PHASES}
        update = med([r["time/update"] for r in kept])
        phases["other"] = max(0.0, update - sum(phases.values()))
        result["loops"][loss] = {
            "update_s": update, "ratio": update / (a + b), "phases_s": phases,
            "overhead_pct": {k: 100 * v / update for k, v in phases.items() if k in OVERHEAD},
            "all_update_s": [r["time/update"] for r in kept]}
    return result


def learner_floors(cfg: dict, model, rollouts: list, pad_id: int) -> dict:
    """What the arithmetic alone would take here: the FLOPs (torch's FlopCounterMode, on a copy
    with torch's own linear layers: the count is the same) of (b), of one update of the loop's
    learner (train.learn, GRPO+TIS) and of one forward pass over the batch (what sampling it
    computes, at least); the matrix-product rate of this CPU through the learner's backend at its
    largest linear layer's shape with the batch's token count; and the weight push's bytes
    against this machine's copy bandwidth."""
    import copy
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    import cpu
    import rollout
    import train

    plain = copy.deepcopy(model)
    for module in plain.modules():
        if isinstance(module, cpu.OneDNNLinear):
            module.__class__ = torch.nn.Linear
    with FlopCounterMode(display=False) as counter:
        fwd_bwd(plain, rollouts, pad_id)
    flops = counter.get_total_flops()
    optimizer = torch.optim.AdamW(plain.parameters(), lr=cfg["lr"])
    batch = rollout.RolloutBatch(0, rollouts, [float(i % 2) for i in range(len(rollouts))])
    with FlopCounterMode(display=False) as counter:
        train.learn(cfg, plain, None, optimizer, batch, pad_id)
    learn_flops = counter.get_total_flops()
    ids, attn, _ = padded_inputs(rollouts, pad_id, next(plain.parameters()).device)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        plain(input_ids=ids, attention_mask=attn, use_cache=False)
    forward_flops = counter.get_total_flops()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    widest = max(linears, key=lambda m: m.weight.numel())
    tokens = sum(len(r.prompt_ids) + len(r.response_ids) for r in rollouts)
    x = torch.randn(tokens, widest.in_features, device=widest.weight.device, dtype=widest.weight.dtype)
    times = []
    with torch.no_grad():
        for _ in range(30):
            t0 = clock()
            widest(x)
            times.append(clock() - t0)
    rate = 2 * tokens * widest.in_features * widest.out_features / statistics.median(times[5:])
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    src = torch.empty(n_bytes // 4 + 1, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    copies = []
    for _ in range(30):
        t0 = clock()
        dst.copy_(src)
        copies.append(clock() - t0)
    copy_s = statistics.median(copies[5:])
    return {"fwd_bwd_flops": flops, "learn_flops": learn_flops, "forward_flops": forward_flops,
            "matmul_flops_per_s": rate, "matmul_shape": [tokens, widest.in_features, widest.out_features],
            "weight_bytes": n_bytes, "copy_s": copy_s}


def print_floors(results: dict) -> None:
    """Each phase against its floor, what the phase cannot go below here: generation, the
    engine's loop at near-zero model cost (the `floor` model's (a)) plus one forward pass's
    FLOPs at this CPU's matmul rate; the learner, its FLOPs at that rate; the weight push, the
    engine's fixed cost of a push (the `floor` model's sync) plus copying the weights once."""
    print("\n== floors (the phase as measured, what it cannot go below here, measured / floor)")
    tiny = results.get("floor")
    for name, r in results.items():
        if name == "floor":
            continue
        f, rate = r["floors"], r["floors"]["matmul_flops_per_s"]
        print(f"{name}: matmul {rate / 1e9:.1f} GFLOP/s at {'x'.join(map(str, f['matmul_shape']))}; "
              f"GFLOP: (b) {f['fwd_bwd_flops'] / 1e9:.2f}, one loop update's learn "
              f"{f['learn_flops'] / 1e9:.2f}, one forward {f['forward_flops'] / 1e9:.2f}")
        rows = [("(b) fwd/bwd", r["fwd_bwd_s"], f["fwd_bwd_flops"] / rate, "its FLOPs")]
        if tiny:
            rows.insert(0, ("(a) generate", r["generate_s"], tiny["generate_s"] + f["forward_flops"] / rate,
                            "engine loop + a forward's FLOPs"))
        for loss, c in r["loops"].items():
            rows.append((f"(c) {loss} learn", c["phases_s"]["learn"], f["learn_flops"] / rate,
                         "GRPO+TIS learn's FLOPs"))
            if tiny:
                fixed = statistics.median(x["phases_s"]["sync"] for x in tiny["loops"].values())
                rows.append((f"(c) {loss} sync", c["phases_s"]["sync"], fixed + f["copy_s"],
                             f"engine's push + copying {f['weight_bytes'] / 1e6:.1f} MB"))
        for what, measured, floor, how in rows:
            print(f"  {what:20s} {measured:8.4f} s   floor {floor:8.4f} s ({how})   {measured / floor:5.2f}x")


def print_result(name: str, r: dict) -> None:
    print(f"\n== {name}: {r['model']} ({r['params'] / 1e6:.1f} M params, {r['device']}, "
          f"{r['dtype']}, median of {r['repeats']}; torch threads "
          f"{r['torch_threads']['before_engine']} -> {r['torch_threads']['after_engine']} "
          f"after engine start)")
    print(f"(a) generate   {r['generate_s']:8.4f} s   {r['generate_tokens_per_s']:9.0f} tokens/s")
    print(f"(b) fwd/bwd    {r['fwd_bwd_s']:8.4f} s   {r['fwd_bwd_tokens_per_s']:9.0f} tokens/s")
    for loss, c in r["loops"].items():
        print(f"(c) update {loss:8s} {c['update_s']:8.4f} s   ratio (c)/((a)+(b)) = {c['ratio']:.3f}"
              f"   (range {min(c['all_update_s']):.4f} .. {max(c['all_update_s']):.4f} s)")
        print("    " + "  ".join(f"{k} {v:.4f} s {100 * v / c['update_s']:.1f}%"
                                 + ("*" if k in OVERHEAD else "")
                                 for k, v in c["phases_s"].items()))
    print("    (* overhead: not generation, not the learner's forward/backward)")
    if "other_processes_cpus" in r:
        print(f"    other processes kept {r['other_processes_cpus']:.2f} of {os.cpu_count()} CPUs "
              f"busy on average meanwhile")


def busy_cpu_seconds():
    """CPU-seconds the whole machine has been busy so far (Linux /proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


def children_cpu_seconds() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def profile_updates(updates: int, top: int) -> None:
    """cProfile of on-policy toy GRPO updates (16 x 8, 16 tokens, eval off), after 10 warm-up
    updates: where one update's time goes, by function, the engine's and torch's included."""
    import cProfile
    import pstats
    import config
    import rollout
    import train

    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"), [
        "delay=0", "eval_every=0", f"updates={10 + updates}", f"out_dir={tempfile.mkdtemp(prefix='bench-')}"])
    sampler = rollout.make_sampler(cfg)
    train.train({**cfg, "updates": 10}, sampler=sampler)  # warm-up
    shutil.rmtree(cfg["out_dir"])
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    rows = train.train(cfg, sampler=sampler)[10:]
    profiler.disable()
    wall = time.perf_counter() - t0
    print(f"{updates} updates after 10 of warm-up: {wall / (10 + updates):.3f} s per update "
          f"(whole run, profiler on); median time/update {statistics.median(r['time/update'] for r in rows):.3f} s;"
          f" phases (median s): " + ", ".join(
              f"{k[5:]} {statistics.median(r.get(k, 0.0) for r in rows):.4f}"
              for k in ("time/generate", "time/grade", "time/behavior", "time/ref", "time/learn",
                        "time/optim", "time/metrics", "time/sync", "time/log")))
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)
    shutil.rmtree(cfg["out_dir"], ignore_errors=True)


COMPARE_RUN = ["configs/toy.yaml", "delay=0", "eval_every=0", "updates=60", "loss=grpo"]
COMPARE_PHASES = ["generate", "behavior", "learn", "optim", "sync"]


def compare_commits(ref: str, rounds: int) -> None:
    """The toy speed contract: on-policy toy GRPO (16 x 8, 16 tokens, eval off, 60 updates) run
    by this checkout's train.py and by commit `ref`'s (a git worktree under artifacts/), one
    process at a time and alternately, `rounds` times each (compare_runs). Same venv for both."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    ref_dir = os.path.join(ROOT, "artifacts", f"bench_ref-{sha}")
    if not os.path.isdir(ref_dir):
        subprocess.run(["git", "worktree", "add", "--detach", ref_dir, sha], cwd=ROOT, check=True,
                       capture_output=True)
    compare_runs({f"commit {sha}": (ref_dir, []), "this checkout": (ROOT, [])}, rounds)


def compare_samplers(rounds: int) -> None:
    """The same toy runs as compare_commits, in this checkout, with sampler=vllm and with
    sampler=transformers, alternately."""
    compare_runs({"sampler=vllm": (ROOT, ["sampler=vllm"]),
                  "sampler=transformers": (ROOT, ["sampler=transformers"])}, rounds)


def compare_cpu_matmul(rounds: int, batches: int = 8) -> None:
    """The learner's update (train.learn: forward, backward, AdamW step) with cpu_matmul=onednn
    and with cpu_matmul=torch, in one process, alternately on the same toy batches (on-policy
    GRPO, 16 x 8, 16 tokens, sampled once by the engine), `rounds` passes over `batches`
    batches after one warm-up pass; the order of the two alternates too, so that a change of
    load on the machine hits both alike. Prints the median seconds of each and what auto picks
    here (auto runs exactly that backend's code)."""
    import torch
    import config
    import cpu
    import learner
    import rollout
    import train

    backend, why = cpu.cpu_matmul_backend("auto")
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"), [
        "delay=0", "eval_every=0", "loss=grpo", f"out_dir={tempfile.mkdtemp(prefix='bench-')}"])
    sampler = rollout.make_sampler(cfg)
    pad_id = sampler.tokenizer.pad_token_id
    data = [rollout.sample_batch(cfg, sampler, i)[0] for i in range(batches)]
    learners = {m: learner.build_learner({**cfg, "cpu_matmul": m}) for m in ("onednn", "torch")}
    seconds = {m: [] for m in learners}
    for round_ in range(1 + rounds):
        for i, batch in enumerate(data):
            for m in (("onednn", "torch") if (round_ + i) % 2 else ("torch", "onednn")):
                model, ref_model, optimizer = learners[m]
                t0 = time.perf_counter()
                train.learn(cfg, model, ref_model, optimizer, batch, pad_id)
                if round_:  # the first pass warms up
                    seconds[m].append(time.perf_counter() - t0)
    med = {m: statistics.median(v) for m, v in seconds.items()}
    print(f"learner update (train.learn), toy GRPO 16 x 8, {torch.get_num_threads()} threads, "
          f"median of {rounds * batches}: onednn {med['onednn']:.4f} s, torch {med['torch']:.4f} s "
          f"(torch / onednn {med['torch'] / med['onednn']:.3f}); cpu_matmul=auto here: {backend} "
          f"({why}): {med[backend]:.4f} s")
    shutil.rmtree(cfg["out_dir"], ignore_errors=True)


TRL_VERSION = "1.16.0"
TRL_VENV = os.path.join(ROOT, "artifacts", "venv-trl")


def trl_python() -> str:
    """The python of a venv with TRL (not a dependency of the project), built under artifacts/
    on first use with this venv's torch and transformers versions."""
    python = os.path.join(TRL_VENV, "bin", "python")
    if os.path.exists(os.path.join(TRL_VENV, "ready")):
        return python
    import torch
    import transformers
    versions = [f"torch=={torch.__version__.split('+')[0]}", f"trl=={TRL_VERSION}",
                f"transformers=={transformers.__version__}"]
    print(f"building {TRL_VENV} (first use, a few minutes): {', '.join(versions)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", TRL_VENV], check=True)
    pip = [python, "-m", "pip", "install", "-q"]
    subprocess.run(pip + versions[:1], check=True)  # first alone: pip takes the CPU build here
    subprocess.run(pip + versions[1:], check=True)
    open(os.path.join(TRL_VENV, "ready"), "w").close()
    return python


def trl_child(job_path: str, out_path: str) -> None:
    """bench/bench.py --trl-child (in the TRL venv): TRL's GRPOTrainer with HF generate on the toy
    model, prompts and reward of the job file, one optimizer step per batch of 16 prompts x 8
    responses; per step its seconds and the seconds of its generation, to out_path."""
    import datasets
    import torch
    import trl
    sys.path.insert(0, ROOT)
    from grading import _quick_grade, last_boxed  # the toy's reward, as the project grades it

    with open(job_path) as f:
        job = json.load(f)
    rows = [p for batch in job["batches"] for p in batch]
    dataset = datasets.Dataset.from_list(rows)

    def reward(completions, answer, **_):
        return [float(bool(_quick_grade(last_boxed(c), a))) for c, a in zip(completions, answer)]

    args = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"), per_device_train_batch_size=len(job["batches"][0]) * job["group_size"],
        num_generations=job["group_size"], max_completion_length=job["max_tokens"],
        temperature=job["temperature"], learning_rate=job["lr"], lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=job["grad_clip"], beta=0.0,
        num_iterations=1, loss_type="dapo", max_steps=len(job["batches"]), shuffle_dataset=False,
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False,
        seed=0, disable_dropout=True)
    trainer = trl.GRPOTrainer(model=job["model"], reward_funcs=reward, args=args, train_dataset=dataset)
    steps, generate = [], []
    generate_once = trainer._generate_single_turn

    def timed_generate(*a, **k):
        t0 = time.perf_counter()
        out = generate_once(*a, **k)
        generate.append(time.perf_counter() - t0)
        return out

    trainer._generate_single_turn = timed_generate

    class StepTimes(__import__("transformers").TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            steps.append(time.perf_counter() - self.t0)

    trainer.add_callback(StepTimes())
    trainer.train()
    with open(out_path, "w") as f:
        json.dump({"step_s": steps, "generate_s": generate, "threads": torch.get_num_threads(),
                   "versions": {"trl": trl.__version__, "torch": torch.__version__}}, f)


def compare_trl(rounds: int) -> None:
    """On-policy toy GRPO in this project (train.py, COMPARE_RUN: the vLLM engine, 60 updates)
    and in TRL's GRPOTrainer (HF generate), one process at a time and alternately, `rounds`
    times each, on the same toy model, the same 60 batches of 16 prompts (tasks.prompts_for_batch,
    seed 0), 8 responses of at most 16 tokens at temperature 1, the same reward (grading's toy
    path), lr, AdamW and grad clip, no reference (beta 0), one optimizer step per batch. TRL
    takes loss_type dapo (the token mean over the batch, as the project's GRPO). Median seconds
    per update over updates 11-60 of each, and its phases (TRL: generate and the rest)."""
    import config
    import tasks
    python = trl_python()
    out_dir = tempfile.mkdtemp(prefix="bench-trl-job-")
    cfg = config.load_config(os.path.join(ROOT, COMPARE_RUN[0]), COMPARE_RUN[1:] + [f"out_dir={out_dir}"])
    job = {k: cfg[k] for k in ("model", "group_size", "max_tokens", "temperature", "lr", "grad_clip")}
    job["model"] = os.path.abspath(os.path.join(ROOT, cfg["model"]))
    job["batches"] = [[{"prompt": p["prompt"], "answer": p["answer"]} for p in tasks.prompts_for_batch(cfg, i)]
                      for i in range(cfg["updates"])]
    job_path = os.path.join(out_dir, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    result = {"project": [], "trl": []}
    for round_ in range(rounds):
        ours = compare_runs({"this project": (ROOT, [])}, 1, quiet=True)["this project"]
        result["project"].append(ours)
        t0 = time.perf_counter()
        out = os.path.join(out_dir, "trl.json")
        done = subprocess.run([python, __file__, "--trl-child", job_path, "--out", out], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"TRL run failed:\n{done.stderr[-5000:]}")
        with open(out) as f:
            trl_times = json.load(f)
        theirs = {"update_s": statistics.median(trl_times["step_s"][10:60]),
                  "generate": statistics.median(trl_times["generate_s"][10:60]),
                  "wall_s": time.perf_counter() - t0}
        theirs["rest"] = theirs["update_s"] - theirs["generate"]
        result["trl"].append(theirs)
        print(f"round {round_ + 1}/{rounds}  project {ours['update_s']:.4f} s/update (generate "
              f"{ours['generate']:.4f}, learn {ours['learn']:.4f}, optim {ours['optim']:.4f}, sync "
              f"{ours['sync']:.4f}; whole run {ours['wall_s']:.1f} s)  TRL {theirs['update_s']:.4f} "
              f"s/step (generate {theirs['generate']:.4f}, the rest {theirs['rest']:.4f}; whole run "
              f"{theirs['wall_s']:.1f} s, {trl_times['threads']} threads)", flush=True)
    med = {side: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
           for side, rows in result.items()}
    print(f"\nmedian over {rounds} rounds: project {med['project']['update_s']:.4f} s/update, TRL "
          f"{TRL_VERSION} {med['trl']['update_s']:.4f} s/step: the project is "
          f"{med['trl']['update_s'] / med['project']['update_s']:.2f}x TRL's speed (generate "
          f"{med['project']['generate']:.4f} against HF generate {med['trl']['generate']:.4f}; "
          f"learner phases {med['project']['update_s'] - med['project']['generate']:.4f} against "
          f"{med['trl']['rest']:.4f})")
    shutil.rmtree(out_dir, ignore_errors=True)


def compare_runs(runs: dict, rounds: int, quiet: bool = False) -> dict:
    """COMPARE_RUN by train.py for each of runs {name: (checkout, extra overrides)}, one process
    at a time and alternately, `rounds` times each. Per run: the median time/update over updates
    11-60 (after the sampler and the learner are warm), its phases, and the wall time of the
    whole process (interpreter, sampler start and every update). The summary compares the
    second run against the first."""
    result = {name: [] for name in runs}
    for round_ in range(rounds):
        for name, (root, extra) in runs.items():
            out_dir = tempfile.mkdtemp(prefix="bench-compare-")
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "train.py", *COMPARE_RUN, *extra,
                                   f"out_dir={out_dir}"], cwd=root, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if done.returncode:
                sys.exit(f"{name}: train.py failed:\n{done.stderr[-5000:]}")
            with open(os.path.join(out_dir, "metrics.jsonl")) as f:
                rows = [r for r in map(json.loads, f) if 11 <= r.get("update", 0) <= 60]
            shutil.rmtree(out_dir, ignore_errors=True)
            med = lambda key: statistics.median(r.get(key, 0.0) for r in rows)
            result[name].append({"update_s": med("time/update"), "wall_s": wall,
                                 **{k: med(f"time/{k}") for k in COMPARE_PHASES}})
            if not quiet:
                print(f"round {round_ + 1}/{rounds}  {name:22s} median s/update {med('time/update'):.4f}  "
                      f"whole run {wall:5.1f} s  " + "  ".join(f"{k} {med(f'time/{k}'):.4f}"
                                                              for k in COMPARE_PHASES), flush=True)
    summary = {name: {k: statistics.median(r[k] for r in runs_) for k in runs_[0]}
               for name, runs_ in result.items()}
    if len(summary) == 1:
        return summary
    (first, theirs), (second, ours) = summary.items()
    print(f"\nmedian over {rounds} rounds: s/update {theirs['update_s']:.4f} ({first}) -> "
          f"{ours['update_s']:.4f} ({second}): {theirs['update_s'] / ours['update_s']:.2f}x; "
          f"whole run {theirs['wall_s']:.1f} -> {ours['wall_s']:.1f} s: "
          f"{theirs['wall_s'] / ours['wall_s']:.2f}x")
    for k in COMPARE_PHASES:
        print(f"  {k:9s} {theirs[k]:.4f} -> {ours[k]:.4f} s")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="toy,big,floor",
                   help="toy, big, floor or Hugging Face folders, comma-separated")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--losses", default="grpo,ggpo",
                   help="objectives of the updates in (c), comma-separated (ggpo: with reference)")
    p.add_argument("--out", default="bench.json")
    p.add_argument("--profile", type=int, metavar="UPDATES",
                   help="instead: cProfile this many on-policy toy GRPO updates, top functions")
    p.add_argument("--compare", metavar="REF",
                   help="instead: this checkout against git commit REF on on-policy toy GRPO")
    p.add_argument("--compare-samplers", action="store_true",
                   help="instead: sampler=vllm against sampler=transformers on on-policy toy GRPO")
    p.add_argument("--compare-cpu-matmul", action="store_true",
                   help="instead: the learner's update with cpu_matmul=onednn and torch, alternately")
    p.add_argument("--vs-trl", action="store_true",
                   help="instead: on-policy toy GRPO here against TRL's GRPOTrainer (its own venv, "
                        "built on first use), alternately")
    p.add_argument("--rounds", type=int, default=3, help="--compare*, --vs-trl: runs of each, alternately")
    p.add_argument("--trl-child", help=argparse.SUPPRESS)  # internal: the TRL side, in its venv
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one model, result JSON to --out
    args = p.parse_args()
    if args.profile:
        return profile_updates(args.profile, top=30)
    if args.compare:
        return compare_commits(args.compare, args.rounds)
    if args.compare_samplers:
        return compare_samplers(args.rounds)
    if args.compare_cpu_matmul:
        return compare_cpu_matmul(args.rounds)
    if args.vs_trl:
        return compare_trl(args.rounds)
    if args.trl_child:
        return trl_child(args.trl_child, args.out)
    if args.child:
        name, path = args.child.split("=", 1)
        result = bench_model(name, path, args.repeats, args.losses.split(","))
        with open(args.out, "w") as f:
            json.dump(result, f)
        return

    load_before = os.getloadavg()
    results = {}
    for name in args.models.split(","):
        path = MODELS.get(name, name)
        t0, busy0, ours0 = time.time(), busy_cpu_seconds(), children_cpu_seconds()
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp, \
                tempfile.NamedTemporaryFile(suffix=".log") as log:
            # one process per model: one vLLM engine per process is what is safe. Its stderr
            # (engine and progress-bar noise) is shown only if it fails.
            done = subprocess.run([sys.executable, __file__, "--child", f"{name}={path}",
                                   "--repeats", str(args.repeats), "--losses", args.losses,
                                   "--out", tmp.name], stdout=log, stderr=subprocess.STDOUT)
            if done.returncode:
                sys.exit(f"bench of {name} failed:\n" + open(log.name).read()[-5000:])
            with open(tmp.name) as f:
                results[name] = json.load(f)
        if busy0 is not None:  # how much of the machine other processes took meanwhile
            others = busy_cpu_seconds() - busy0 - (children_cpu_seconds() - ours0)
            results[name]["other_processes_cpus"] = max(0.0, others) / (time.time() - t0)
        print_result(name, results[name])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    report = {"commit": commit + ("+dirty" if dirty else ""), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
              "cpus": os.cpu_count(), "results": results}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print_floors(results)
    print(f"\nload average before/after: {load_before[0]:.2f} / {report['loadavg_after'][0]:.2f} "
          f"on {os.cpu_count()} CPUs; written to {args.out}")


if __name__ == "__main__":
    main()
