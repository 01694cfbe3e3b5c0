"""Data, grading and the toy lab.

- `grade(response, answer)`: the last \\boxed{...} of a response checked against a reference answer,
  exact match first, Math-Verify (sympy underneath) otherwise. Used for the toy and for MATH alike.
- The toy arithmetic task: "a+b=" -> "\\boxed{a+b}", difficulty = number of digits of the operands.
- `build_tokenizer()`: a character-level tokenizer made in code, saved as an ordinary HF tokenizer.
- `build_base_model(path)`: a small Qwen3-architecture model with a short supervised warm-up,
  saved as an ordinary Hugging Face folder (vLLM and transformers load it like any other model),
  cached on disk and rebuilt only when missing.
"""
import json
import os
import random
import re
import shutil
import time

# ----------------------------------------------------------------------------- grading

_BOXED = "\\boxed{"
_INT = re.compile(r"^[+-]?\d+$")


def last_boxed(text: str):
    """Content of the last \\boxed{...} in `text` (nested braces allowed), or None."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def grade(response: str, answer: str, timeout_s: int = 5) -> bool:
    """True when the last \\boxed{} of `response` equals `answer`.

    Cheap exact paths first (string equality, integer equality), which settle every toy response
    and many MATH ones; then Math-Verify. Any grader error or timeout counts as wrong, never raises.
    """
    pred = last_boxed(response)
    if pred is None:
        return False
    pred, answer = pred.strip(), str(answer).strip()
    if pred == answer:
        return True
    if _INT.match(pred) and _INT.match(answer):
        return int(pred) == int(answer)
    return _math_verify(pred, answer, timeout_s)


def _math_verify(pred: str, answer: str, timeout_s: int) -> bool:
    from math_verify import parse, verify  # imported lazily: sympy import costs ~1 s
    try:
        gold = parse("$" + answer + "$", parsing_timeout=timeout_s)
        target = parse("$" + pred + "$", parsing_timeout=timeout_s)
        return bool(verify(gold, target, timeout_seconds=timeout_s))
    except Exception:  # noqa: BLE001 - a grader failure is a wrong answer, by design
        return False


# ----------------------------------------------------------------------------- the toy task

TOY_DIGITS = {1: 0.2, 2: 0.4, 3: 0.3, 4: 0.1}  # default digits -> weight of training/eval problems


def toy_problem(rng: random.Random, digits: int) -> dict:
    """One sum of two `digits`-digit integers, answer in \\boxed{}."""
    low = 0 if digits == 1 else 10 ** (digits - 1)
    a, b = rng.randint(low, 10 ** digits - 1), rng.randint(low, 10 ** digits - 1)
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "digits": digits}


def toy_dataset(n: int, seed: int, digit_weights: dict) -> list:
    """`n` toy problems; `digit_weights` maps number of digits -> sampling weight."""
    rng = random.Random(seed)
    digits = list(digit_weights)
    weights = [digit_weights[d] for d in digits]
    return [toy_problem(rng, rng.choices(digits, weights)[0]) for _ in range(n)]


def toy_response(problem: dict) -> str:
    return "\\boxed{" + problem["answer"] + "}"


# ----------------------------------------------------------------------------- tokenizer

PAD, EOS = "<pad>", "<eos>"
_CHARS = [chr(c) for c in range(32, 127)] + ["\n"]


def build_tokenizer():
    """Character-level tokenizer: one token per printable ASCII character, plus <pad> and <eos>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, EOS: 1}
    for ch in _CHARS:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS,
                                   bos_token=None, unk_token=PAD)


# ----------------------------------------------------------------------------- the toy base model

# Defaults of the toy base model; every knob is an argument of build_base_model.
TOY_MODEL = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32)
TOY_WARMUP = dict(steps=1000, batch_size=128, lr=2e-3, digit_weights={1: 0.3, 2: 0.5, 3: 0.2},
                  seed=0)


def build_base_model(path: str, model: dict = None, warmup: dict = None, log=print) -> str:
    """Create the toy base model at `path` unless it is already there; return `path`.

    A fresh char-level Qwen3 model gets a short supervised warm-up on toy sums so that, sampled at
    temperature 1, it solves easy problems often, medium ones sometimes and hard ones never. The
    folder appears atomically (built under a temporary name, renamed when complete), so an
    interrupted build never leaves a folder that looks valid.
    """
    if os.path.exists(os.path.join(path, "build_info.json")):
        return path
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model_kw = {**TOY_MODEL, **(model or {})}
    warm = {**TOY_WARMUP, **(warmup or {})}
    tokenizer = build_tokenizer()
    torch.manual_seed(warm["seed"])
    config = Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=64,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                         torch_dtype="float32", **model_kw)
    net = Qwen3ForCausalLM(config)
    n_params = sum(p.numel() for p in net.parameters())
    log(f"building toy base model at {path}: {n_params / 1e6:.2f} M parameters, "
        f"{warm['steps']} warm-up steps")
    t0 = time.time()
    _supervised_warmup(net, tokenizer, warm, log)
    tmp = path.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    net.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, "build_info.json"), "w") as f:
        json.dump({"model": model_kw, "warmup": {**warm, "digit_weights": {
            str(k): v for k, v in warm["digit_weights"].items()}},
            "params": n_params, "seconds": round(time.time() - t0, 1)}, f, indent=1)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return path


def _supervised_warmup(net, tokenizer, warm: dict, log) -> None:
    """Teacher forcing on prompt + response + <eos>, loss on the response tokens only."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(warm["seed"])
    opt = torch.optim.AdamW(net.parameters(), lr=warm["lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * max(0.05, 1 - s / warm["steps"]))
    digits = list(warm["digit_weights"])
    weights = [warm["digit_weights"][d] for d in digits]
    net.train()
    for step in range(warm["steps"]):
        ids, labels = [], []
        for _ in range(warm["batch_size"]):
            prob = toy_problem(rng, rng.choices(digits, weights)[0])
            p = tokenizer.encode(prob["prompt"])
            r = tokenizer.encode(toy_response(prob)) + [tokenizer.eos_token_id]
            ids.append(p + r)
            labels.append([-100] * len(p) + r)
        width = max(map(len, ids))
        ids = torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in ids])
        labels = torch.tensor([x + [-100] * (width - len(x)) for x in labels])
        logits = net(input_ids=ids).logits[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 200 == 0 or step == warm["steps"] - 1:
            log(f"  warm-up step {step:5d}  loss {loss.item():.4f}")
    net.eval()
