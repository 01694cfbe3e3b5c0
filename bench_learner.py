"""The learner at the study's shape, without vLLM: memory and time of train.learn().

    python bench_learner.py memory [--layers 2] [--group-size 2]       # CPU: chunked vs not
    python bench_learner.py update [--layers 28] [--groups 8]          # GPU: one update per objective
    python bench_learner.py update --layers 2 --groups 2 --max-tokens 1024   # the same, CPU-sized
    python bench_learner.py loop                                       # GPU: train.py's loop, no vLLM

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
  logits of one micro-batch), and the largest differences of log-probs, entropy, loss and
  gradients.
update: one learn() per objective on a rollout batch of --groups groups of 8 (on a GPU 8 by
  default, an eighth of the study's 64, sized for a few minutes of GPU time in all: time per
  update grows with the groups, the peak does not, being that of one micro-batch), whose first
  group's responses all run to --max-tokens (the largest micro-batch the study can make): peak
  memory and seconds per phase (time/behavior, time/ref, time/learn, time/optim, time/metrics).
loop: the whole loop of train.train, sampling included, with the transformers sampler (no vLLM)
  and configs/qwen3_1.7b_quick.yaml's settings (bf16 sampler copy, bf16 autocast, gradient
  checkpointing, one group per micro-batch) on toy prompts, with a tokenizer of --vocab tokens
  built in code (the toy's characters, then filler tokens; nothing is downloaded): N = 1, 3
  updates of GRPO, stopped by SIGTERM after update 2 (its checkpoint), resumed (resume=true,
  a new learner and sampler from that checkpoint) for update 3. Prints each update's seconds by
  phase, each run's wall time and peak memory, and checks that the resumed update trained on the
  checkpoint's queued batch (staleness 1). Defaults: 16 prompts x 8 responses of --max-tokens 512
  (the quick config's batch, half its response length; random weights never sample eos, so
  every response is that long).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
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
    cfg = config.load_config(os.path.join(HERE, "configs", "qwen3_1.7b_base.yaml"), [
        f"model={args.model_dir}", "device=auto", f"max_tokens={args.max_tokens}",
        f"group_size={args.group_size}",
        f"micro_batch_size={args.group_size}"] + list(overrides))
    if not torch.cuda.is_available() and args.cpu_autocast == "none":
        cfg["autocast"] = None
    return cfg


def build_model(folder: str, layers: int, vocab: int, with_tokenizer: bool = False) -> None:
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
        build_tokenizer(vocab).save_pretrained(folder)


def build_tokenizer(vocab: int):
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
    out = {"loss": loss, "layers": model.config.num_hidden_layers, "responses": len(lengths),
           "response_tokens": sum(lengths), "longest": max(lengths),
           "logits_chunk_mib": cfg["logits_chunk_mib"],
           "chunk_tokens": learner.chunk_tokens(cfg, model),
           "learn_peak_added_GiB": (peak - before) / 2 ** 30, "peak_GiB": peak / 2 ** 30,
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           **times, **{k: v for k, v in metrics.items() if k.startswith("time/")},
           **{k: metrics[k] for k in ("loss", "k3", "entropy", "grad_norm")}}
    if save_to:  # learn() leaves the (clipped) gradients of its step in p.grad
        torch.save({"grads": {n: p.grad.cpu() for n, p in model.named_parameters()},
                    "logp": logp0.cpu()}, save_to)
    return out


def child(args) -> None:
    result = one_learn(args, args.loss, [f"logits_chunk_mib={args.chunk_mib}"], args.save_to)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(args, chunk_mib: int, save_to: str, loss: str = "grpo") -> dict:
    cmd = [sys.executable, __file__, f"_child_{args.mode}", "--layers", str(args.layers), "--groups",
           str(args.groups), "--max-tokens", str(args.max_tokens), "--group-size",
           str(args.group_size), "--model-dir", args.model_dir, "--loss", loss,
           "--chunk-mib", str(chunk_mib), "--save-to", save_to, "--cpu-autocast", args.cpu_autocast]
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
          f"tensor's largest entry; loss {r0['loss']:.8f} vs {r1['loss']:.8f}; entropy "
          f"{r0['entropy']:.6f} vs {r1['entropy']:.6f}; grad norm {r0['grad_norm']:.6f} vs "
          f"{r1['grad_norm']:.6f}")
    print(json.dumps({str(k): v for k, v in results.items()}))


def update(args) -> None:
    print(f"one learn() per objective: {args.groups} groups of {args.group_size}, max_tokens {args.max_tokens}, "
          f"{args.layers} layers", flush=True)
    t0 = time.perf_counter()
    for loss in args.losses.split(","):
        r = run_child(args, run_config(args)["logits_chunk_mib"], os.devnull, loss)
        phases = "  ".join(f"{k[5:]} {r[k]:.2f}" for k in ("time/behavior", "time/ref", "time/learn",
                                                             "time/optim", "time/metrics"))
        print(f"{loss:9s} peak {r['peak_GiB']:6.2f} GiB (learn() +{r['learn_peak_added_GiB']:.2f})  "
              f"{r['response_tokens']} response tokens, longest {r['longest']}  seconds: {phases}",
              flush=True)
    print(f"wall {time.perf_counter() - t0:.0f} s for {len(args.losses.split(','))} objectives "
          f"(each a fresh process: load, behavior pass, one tiny and one full learn())")


def loop(args) -> None:
    """train.train at the study's shape without vLLM: N = 1, 3 updates, SIGTERM after update 2,
    resume for update 3 (see the module docstring)."""
    import signal
    import torch
    import config
    import learner
    import train

    on_gpu = torch.cuda.is_available()
    cfg = config.load_config(os.path.join(HERE, "configs", "qwen3_1.7b_quick.yaml"), [
        f"model={args.model_dir}", f"out_dir={os.path.join(args.tmp, 'run')}", "task=toy",
        "sampler=transformers", "device=auto", "delay=1", "updates=3", "eval_every=0",
        "ckpt_every=0", "loss=grpo", "stop_strings=[]", f"prompts_per_update={args.prompts}",
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

    rows = []
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
        if on_gpu:
            torch.cuda.empty_cache()
    assert [r["update"] for r in rows] == [1, 2, 3], [r["update"] for r in rows]
    assert [r["staleness"] for r in rows] == [0, 1, 1] and rows[2]["sampler_version"] == 1
    print("resumed from the update-2 checkpoint: update 3 trained on its queued batch "
          "(sampled by version 1, staleness 1)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["memory", "update", "loop", "_child_memory", "_child_update"])
    p.add_argument("--layers", type=int, help="decoder layers (default: 2 on CPU, 28 on GPU)")
    p.add_argument("--groups", type=int, help="groups per batch (memory: 1; update: 8 on GPU, 1 on CPU)")
    p.add_argument("--group-size", type=int, help="responses per group, one group per micro-batch "
                                                  "(memory: 2 on CPU, else 8)")
    p.add_argument("--max-tokens", type=int, help="response length limit (default: 3072; loop: 512)")
    p.add_argument("--prompts", type=int, default=16, help="loop: prompts per update")
    p.add_argument("--vocab", type=int, default=QWEN3_1_7B["vocab_size"],
                   help="vocabulary size (the real one by default; smaller only to smoke-test)")
    p.add_argument("--losses", default="grpo,grpo_tis,agro,ggpo")
    p.add_argument("--cpu-autocast", choices=["bfloat16", "none"], default="bfloat16",
                   help="on CPU: keep the config's bf16 autocast, or run fp32 throughout")
    p.add_argument("--model-dir"), p.add_argument("--loss", default="grpo")
    p.add_argument("--chunk-mib", type=int, help="memory: the chunked setting (default: the config's)")
    p.add_argument("--save-to")
    args = p.parse_args()
    sys.path.insert(0, HERE)
    if args.mode.startswith("_child"):
        return child(args)
    import torch
    on_gpu = torch.cuda.is_available()
    args.layers = args.layers or (28 if on_gpu else 2)
    args.groups = args.groups or (8 if args.mode == "update" and on_gpu else 1)
    args.group_size = args.group_size or (2 if args.mode == "memory" and not on_gpu else 8)
    args.max_tokens = args.max_tokens or (512 if args.mode == "loop" else 3072)
    with tempfile.TemporaryDirectory(prefix="bench-learner-") as tmp:
        args.tmp, args.model_dir = tmp, os.path.join(tmp, "model")
        t0 = time.perf_counter()
        build_model(args.model_dir, args.layers, args.vocab, with_tokenizer=args.mode == "loop")
        print(f"random-init Qwen3-1.7B shape, {args.layers} layers, vocabulary {args.vocab:,}, built in "
              f"{time.perf_counter() - t0:.0f} s ({'GPU ' + torch.cuda.get_device_name() if on_gpu else 'CPU'}, "
              f"torch {torch.__version__})", flush=True)
        {"memory": memory, "update": update, "loop": loop}[args.mode](args)


if __name__ == "__main__":
    main()
