"""The study's GPU path rehearsed on the CPU at Qwen3-1.7B-Base's real shape, through the real engine.

    python bench/rehearse_gpu_path.py [--layers 2] [--updates 4] [--keep DIR] [--check-exact]

A random-init Qwen3 with Qwen3-1.7B-Base's config (width 2048, 16 query / 8 KV heads of 128,
MLP 6144, vocabulary 151,936, tied embeddings, RoPE theta 1e6) but --layers of its 28 layers,
and a byte-level BPE tokenizer of that vocabulary size, both made in code (no downloads), go
through train.py as configs/qwen3_1.7b_quick.yaml sets it up: task=math on
tests/fixtures/mini_math.jsonl with the math template and its stop strings, a bf16 vLLM engine
and a bf16-autocast learner over fp32 weights, gradient checkpointing, chunked logits (a small
chunk, so that a few-token batch takes several), vllm.max_model_len auto, N = 2. What differs
from the GPU: the CPU engine (its older model runner, eager), 2 prompts x 2 responses of at
most 32 tokens per update, and 2 layers. The run is stopped by SIGTERM after update 2 and
resumed with resume=true; evaluation (tests/fixtures/mini_aime.jsonl, 2 samples) at updates 0
and --updates. Prints seconds per phase and each process's peak memory (resident set).
--check-exact also runs the same 4 updates without a stop and compares every non-time value.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
QWEN3_1_7B = dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                  max_position_embeddings=32768, rope_theta=1_000_000, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)
EOS = "<|endoftext|>"


def qwen_sized_bpe_tokenizer(vocab_size: int = QWEN3_1_7B["vocab_size"]):
    """A byte-level BPE tokenizer with exactly `vocab_size` tokens: trained on the fixture
    problems in the math template (its common merges), then filled up with merges of pairs of
    its first tokens (valid rules that rarely fire), so that lookups run over a table of the
    real size. Qwen's pre-tokenizer splits digits one by one, as here."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    import tasks

    texts = []
    for name in ("mini_math.jsonl", "mini_aime.jsonl"):
        with open(os.path.join(ROOT, "tests", "fixtures", name)) as f:
            texts += [tasks.math_prompt(json.loads(line)["problem"]) for line in f if line.strip()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts * 4, trainers.BpeTrainer(
        vocab_size=4000, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    spec = json.loads(tok.to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    pieces = sorted(vocab, key=vocab.get)[1:600]  # the special token aside
    for a in pieces:
        for b in pieces:
            if len(vocab) >= vocab_size:
                break
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
                merges.append([a, b])
    tok = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)


def random_qwen3_1_7b(folder: str, layers: int) -> None:
    """A random-init Qwen3-1.7B of `layers` layers with qwen_sized_bpe_tokenizer, in `folder`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    tokenizer = qwen_sized_bpe_tokenizer()
    assert len(tokenizer) == QWEN3_1_7B["vocab_size"], len(tokenizer)
    torch.manual_seed(0)
    eos = tokenizer.eos_token_id
    net = Qwen3ForCausalLM(Qwen3Config(**{**QWEN3_1_7B, "num_hidden_layers": layers},
                                       bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                                       torch_dtype="float32"))
    net.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def run(argv: list, log: str, stop_after: int = None, metrics: str = None) -> tuple:
    """Run train.py; with stop_after, send SIGTERM once metrics.jsonl has that update. Returns
    (exit code, wall seconds, peak resident set in GiB)."""
    t0 = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py")] + argv, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err)
        while stop_after is not None and proc.poll() is None:
            if os.path.exists(metrics) and any(json.loads(line)["update"] >= stop_after
                                               for line in open(metrics) if line.strip()):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.2)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - t0, usage.ru_maxrss / 2 ** 20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--updates", type=int, default=4)
    p.add_argument("--keep", help="a folder for the model and the run (default: a temporary one)")
    p.add_argument("--check-exact", action="store_true",
                   help="also run it without a stop and compare metrics.jsonl (every non-time key)")
    args = p.parse_args()
    sys.path.insert(0, ROOT)
    root = args.keep or tempfile.mkdtemp(prefix="rehearsal-")
    model, out = os.path.join(root, "model"), os.path.join(root, "run")
    t0 = time.perf_counter()
    if not os.path.exists(os.path.join(model, "config.json")):
        random_qwen3_1_7b(model, args.layers)
    print(f"model and tokenizer built in {time.perf_counter() - t0:.0f} s: {model}", flush=True)
    fixtures = os.path.join(ROOT, "tests", "fixtures")
    argv = [os.path.join(ROOT, "configs", "qwen3_1.7b_quick.yaml"), f"model={model}",
            f"out_dir={out}", "device=cpu", f"train_data.file={fixtures}/mini_math.jsonl",
            f"eval_benchmarks=[mini_aime={fixtures}/mini_aime.jsonl]", "eval_n=2",
            f"eval_every={args.updates}", "eval_max_tokens=32", "max_tokens=32", "delay=2",
            "group_size=2", "prompts_per_update=2", "micro_batch_size=2", "logits_chunk_mib=8",
            f"updates={args.updates}", "ckpt_every=0", "vllm.enforce_eager=true", "grade_workers=1"]
    results = [("until SIGTERM after update 2", *run(argv, os.path.join(root, "first.log"), 2,
                                                      os.path.join(out, "metrics.jsonl")))]
    results.append(("resume=true to the end", *run(argv + ["resume=true"],
                                                   os.path.join(root, "second.log"))))
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    print(f"\n{'process':32s} {'exit':>5s} {'wall s':>8s} {'peak RSS GiB':>13s}")
    for name, code, wall, peak in results:
        print(f"{name:32s} {code:5d} {wall:8.1f} {peak:13.2f}")
    phases = ["time/generate", "time/grade", "time/behavior", "time/ref", "time/learn",
              "time/optim", "time/metrics", "time/sync", "time/eval", "time/update"]
    print(f"\n{'update':>6s} " + " ".join(f"{k[5:]:>9s}" for k in phases) + "  response tokens")
    for r in rows:
        if r["update"] > 0:
            print(f"{r['update']:6d} " + " ".join(f"{r.get(k, 0.0):9.2f}" for k in phases)
                  + f"  {r['response_len_mean'] * 4:.0f}, skipped {r['skipped']:.0f}")
    evals = [(r["update"], r["time/eval_generate"]) for r in rows if "time/eval_generate" in r]
    print("evaluation (16 samples): " + ", ".join(f"update {u} {s:.1f} s" for u, s in evals))
    print(f"updates logged: {[r['update'] for r in rows]}; run folder {out}")
    if any(code not in (0, 128 + signal.SIGTERM) for _, code, _, _ in results):
        sys.exit(f"a process failed: see {root}/first.log and {root}/second.log")
    if args.check_exact:
        ref = os.path.join(root, "uninterrupted")
        code, wall, peak = run([a.replace(f"out_dir={out}", f"out_dir={ref}") for a in argv],
                               os.path.join(root, "uninterrupted.log"))
        ref_rows = [json.loads(line) for line in open(os.path.join(ref, "metrics.jsonl"))]
        values = [(r["update"], k, r.get(k), q.get(k)) for r, q in zip(rows, ref_rows)
                  for k in sorted(set(r) | set(q)) if not k.startswith("time/")]
        differ = [v for v in values if v[2] != v[3]]
        print(f"uninterrupted run: exit {code}, {wall:.0f} s; {len(values)} non-time values of "
              f"{len(rows)} rows (its own: {len(ref_rows)}) compared, {len(differ)} differ "
              f"{differ[:5]}; eval records "
              + ("identical" if open(os.path.join(out, "eval_records.jsonl")).read()
                 == open(os.path.join(ref, "eval_records.jsonl")).read() else "DIFFER"))


if __name__ == "__main__":
    main()
