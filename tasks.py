"""The problems: prompts, the toy task, benchmark and training-data loading, the training stream.

- `math_prompt(problem)`: the one prompt template for math problems given to base models.
- The toy arithmetic task: "a+b=" -> "\\boxed{a+b}", difficulty = number of digits of the operands.
- Benchmarks (`load_benchmark`): `toy`, a hub data set through `datasets`, or a local JSONL file.
- `prompts_for_batch(cfg, index)`: the problems of rollout batch `index`, a pure function of
  (seed, index), so a resumed run sees the same prompts.
- `build_tokenizer()`: a character-level tokenizer made in code, saved as an ordinary HF tokenizer.
- `build_base_model(path)`: a small Qwen3-architecture model with a short supervised warm-up,
  saved as an ordinary Hugging Face folder (vLLM and transformers load it like any other model).
  The repository ships the one it built (toy_base/, 4 MB, its sha256 in build_info.json and in
  TOY_BASE_SHA256), because the warm-up's floating-point results differ between processors:
  every machine trains from the same base model. `python tasks.py DIR` rebuilds it elsewhere.
Grading lives in grading.py.
"""
import functools
import hashlib
import json
import os
import random
import shutil
import socket
import sys
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
HUB_PROBE_TIMEOUT_S = 3.0  # a quick TCP probe spares datasets' retries when offline


# ----------------------------------------------------------------------------- math prompts

# The prompt for base models (no chat template): step-by-step reasoning, final answer in \boxed{}.
# Every math prompt (training data and benchmarks) is made here, by math_prompt.
MATH_TEMPLATE = ("Question: {problem}\n"
                 "Please reason step by step, and put your final answer within \\boxed{}.\n"
                 "Answer: Let's think step by step.")
PROMPT_TEMPLATES = {"math": MATH_TEMPLATE, "plain": "{problem}"}


def math_prompt(problem: str, template: str = "math") -> str:
    """The prompt for `problem`: `template` is a name in PROMPT_TEMPLATES or a string holding
    "{problem}" (filled by plain replacement, so LaTeX braces in either need no escaping)."""
    text = PROMPT_TEMPLATES.get(template, template)
    if "{problem}" not in text:
        raise ValueError(f"prompt template {template!r} is neither one of "
                         f"{sorted(PROMPT_TEMPLATES)} nor a string containing {{problem}}")
    return text.replace("{problem}", problem)


# ----------------------------------------------------------------------------- the toy task

TOY_DIGITS = {1: 0.2, 2: 0.4, 3: 0.3, 4: 0.1}  # default digits -> weight of training/eval problems
TOY_TERMS = {2: 1}  # default number of terms -> weight: a sum of two numbers, answered in one box


def toy_problem(rng: random.Random, digits: int, terms: int = 2) -> dict:
    """One sum of `terms` `digits`-digit integers, answer in \\boxed{}. A sum of more than two
    terms records its term count ("terms"), for its worked answer and the evaluation's split."""
    low = 0 if digits == 1 else 10 ** (digits - 1)
    operands = [rng.randint(low, 10 ** digits - 1) for _ in range(terms)]
    problem = {"prompt": "+".join(map(str, operands)) + "=", "answer": str(sum(operands)),
               "digits": digits}
    return problem if terms == 2 else {**problem, "terms": terms}


def toy_key(problem: dict) -> tuple:
    """The operands of a toy sum, sorted: a+b and b+a (any order of the terms) are one problem."""
    return tuple(sorted(map(int, problem["prompt"][:-1].split("+"))))


def draw_toy_problem(rng: random.Random, digit_weights: dict, term_weights: dict) -> dict:
    """A toy problem of a digit count drawn by `digit_weights` and, where `term_weights` offers
    more than one, a term count drawn by it (one count draws nothing: the two-term stream stays
    what it always was)."""
    digits = rng.choices(list(digit_weights), list(digit_weights.values()))[0]
    terms = next(iter(term_weights)) if len(term_weights) == 1 else \
        rng.choices(list(term_weights), list(term_weights.values()))[0]
    return toy_problem(rng, digits, terms)


def toy_dataset(n: int, seed, digit_weights: dict, exclude: frozenset = frozenset(),
                term_weights: dict = None) -> list:
    """`n` toy problems drawn by random.Random(seed); `digit_weights` maps number of digits ->
    sampling weight, `term_weights` number of terms -> weight (default TOY_TERMS). A sum whose
    operands (in any order, toy_key) are in `exclude` is drawn again."""
    rng = random.Random(seed)
    problems = []
    while len(problems) < n:
        problem = draw_toy_problem(rng, digit_weights, term_weights or TOY_TERMS)
        if toy_key(problem) not in exclude:
            problems.append(problem)
    return problems


def partial_sums(problem: dict, slip: float = 0.0, rng: random.Random = None) -> list:
    """The worked lines of a sum of more than two terms: "s+a=t", one per term after the first,
    each starting from the line before. With `slip` > 0 (the base model's warm-up data), each
    line's result is off by one digit with that probability, and the slip carries into every
    later line, as a slip in long addition does."""
    first, *rest = map(int, problem["prompt"][:-1].split("+"))
    lines, total = [], first
    for a in rest:
        result = total + a
        if slip and rng.random() < slip:
            result = int(_near_miss(rng, str(result)))
        lines.append(f"{total}+{a}={result}")
        total = result
    return lines


def toy_response(problem: dict, slip: float = 0.0, rng: random.Random = None) -> str:
    """The correct response (with `slip`: the warm-up's noisy one): a two-term sum is answered
    in one box; a longer one writes every partial sum on its own line, then boxes the last."""
    if problem.get("terms", 2) == 2:
        return "\\boxed{" + problem["answer"] + "}"
    lines = partial_sums(problem, slip, rng)
    return "\n".join(lines) + "\n\\boxed{" + lines[-1].split("=")[1] + "}"


def toy_longest(digit_weights: dict, term_weights: dict) -> dict:
    """The toy problem with the longest prompt and correct response the weights can draw: the
    most terms of the most digits, every one 9...9."""
    digits = max(d for d, w in digit_weights.items() if w > 0)
    terms = max(t for t, w in term_weights.items() if w > 0)
    problem = {"prompt": "+".join(["9" * digits] * terms) + "=",
               "answer": str(terms * (10 ** digits - 1)), "digits": digits}
    return problem if terms == 2 else {**problem, "terms": terms}


def check_toy_budget(cfg: dict) -> None:
    """Refuse a toy config with worked answers (toy_terms above 2) whose max_tokens or
    eval_max_tokens cannot hold the longest correct response and its end token: its longest
    problems could only ever be graded wrong."""
    if cfg["task"] != "toy" or max(cfg["toy_terms"]) == 2:
        return
    longest = toy_longest(cfg["toy_digits"], cfg["toy_terms"])
    need = len(toy_response(longest)) + 1  # one token a character, and <eos>
    for key in ("max_tokens",) + ("eval_max_tokens",) * (cfg["eval_every"] > 0):
        if cfg[key] < need:
            raise ValueError(f"{key}={cfg[key]} cannot hold the longest correct answer of this toy "
                             f"({longest['prompt']} takes {need} tokens with its end token): set "
                             f"{key} >= {need}, or draw fewer terms or digits")


# ----------------------------------------------------------------------------- benchmarks

class BenchmarkUnavailable(RuntimeError):
    """A benchmark could be found neither on the hub nor in a local file."""



# The toy's two random streams are keyed by strings that cannot be equal ("toy-eval" against
# "toy-train:SEED:INDEX"), so no run seed or batch index makes a training batch replay the
# evaluation set (they were integers once, and training batch 1234 at seed 0 was its start).
TOY_EVAL_KEY = "toy-eval"


def toy_train_key(seed: int, index: int) -> str:
    """The random.Random key of toy training batch `index` of a run seeded `seed`."""
    return f"toy-train:{seed}:{index}"


def toy_benchmark(size: int = 200, digit_weights: dict = None, term_weights: dict = None) -> list:
    """The toy eval set: `size` distinct sums drawn by the TOY_EVAL_KEY stream."""
    rng, problems, seen = random.Random(TOY_EVAL_KEY), [], set()
    digit_weights, term_weights = digit_weights or TOY_DIGITS, term_weights or TOY_TERMS
    digits = list(digit_weights)
    if size > sum(81 * 10 ** (2 * d - 2) if d > 1 else 100 for d in digits):
        raise ValueError(f"eval_toy_size {size} is more than the distinct sums of {digits} digits")
    while len(problems) < size:
        problem = draw_toy_problem(rng, digit_weights, term_weights)
        if problem["prompt"] not in seen:
            seen.add(problem["prompt"])
            problems.append({**problem, "id": f"toy-{len(problems)}"})
    return problems


@functools.lru_cache(maxsize=8)
def toy_held_out(size: int, digit_items: tuple, term_items: tuple = None) -> frozenset:
    """The operands (toy_key) the toy training stream never draws: those of the evaluation set's
    sums of two digits or more, in any order. One-digit sums are the exception: there are only 55
    two-term ones (a+b and b+a alike), and the evaluation holds most, so holding them out would
    leave training almost none. The evaluation reports them apart (eval/toy/d1/...), beside
    d2..d4, which are held out."""
    bench = toy_benchmark(size, dict(digit_items), dict(term_items) if term_items else None)
    return frozenset(toy_key(p) for p in bench if p["digits"] > 1)


def resolve(entry: str, table: dict) -> tuple:
    """(name, spec) of one benchmark entry: `toy`, a name in `table`, NAME=PATH, or a path."""
    if entry == "toy":
        return "toy", {"toy": True}
    if "=" in entry:
        name, path = entry.split("=", 1)
        return name, {"file": path}
    if entry in table:
        return entry, dict(table[entry])
    if entry.endswith((".jsonl", ".json")) or os.sep in entry:
        return os.path.splitext(os.path.basename(entry))[0], {"file": entry}
    raise ValueError(f"unknown benchmark {entry!r}: use toy, one of {sorted(table)} (the "
                     f"`benchmarks` table of the config), a JSONL file path, or NAME=PATH")


def _unavailable(name: str, spec: dict, why: str) -> BenchmarkUnavailable:
    hub = (f"{spec['hub']}, split {spec['split']}" if spec.get("hub") else "no hub name set")
    return BenchmarkUnavailable(
        f"benchmark {name!r} is not available: {why}.\nSupply it in one of two ways:\n"
        f"  1. Hugging Face hub ({hub}): run where the hub is reachable, or where the HF cache "
        f"holds it, with HF_HUB_OFFLINE=1;\n"
        f"  2. a local JSONL file, one problem per line with `problem` and `answer` fields: "
        f"set benchmarks.{name}.file=PATH in the config or as a key=value override (train.py "
        f"and evaluate.py take both), or give {name}=PATH in --benchmarks / eval_benchmarks.")


def answer_text(value) -> str:
    """A reference answer as a string: integral floats as integers (AMC files store 27.0)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def read_jsonl(name: str, path: str, spec: dict = None) -> list:
    """Problems of a local JSONL file: `problem` and `answer` fields, optional `id`."""
    if not os.path.isfile(path):
        raise _unavailable(name, spec or {}, f"file {path!r} does not exist")
    problems = []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            missing = [key for key in ("problem", "answer") if key not in row]
            if missing:
                raise ValueError(f"{path} line {line_no} lacks the field(s) {missing}; every line "
                                 f"needs `problem` and `answer` (and may have `id`)")
            problems.append({"id": str(row.get("id", f"{name}-{len(problems)}")),
                             "problem": row["problem"], "answer": answer_text(row["answer"])})
    return problems


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub endpoint (HF_ENDPOINT or huggingface.co) opens."""
    from urllib.parse import urlparse
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout_s).close()
        return True
    except OSError:
        return False


def read_hub(name: str, spec: dict) -> list:
    """Problems of a hub data set through `datasets`, fields named by the spec."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if not offline and not hub_reachable():
        raise _unavailable(name, spec, f"the hub ({os.environ.get('HF_ENDPOINT') or 'huggingface.co'}) "
                                       f"cannot be reached and HF_HUB_OFFLINE is not set")
    import datasets
    try:
        ds = datasets.load_dataset(spec["hub"], spec.get("subset"), split=spec["split"])
    except Exception as e:  # noqa: BLE001 - any failure here means: not available, say why
        raise _unavailable(name, spec, f"datasets.load_dataset({spec['hub']!r}, "
                                       f"split={spec['split']!r}) failed: {type(e).__name__}: {e}") from e
    fields = [spec["problem_field"], spec["answer_field"]] + [spec["id_field"]] * bool(spec.get("id_field"))
    missing = [f for f in fields if f not in ds.column_names]
    if missing:
        raise ValueError(f"benchmark {name!r}: {spec['hub']} has no field(s) {missing}; its fields "
                         f"are {ds.column_names}: set benchmarks.{name}.problem_field / "
                         f"answer_field / id_field in the config")
    return [{"id": str(row[spec["id_field"]]) if spec.get("id_field") else f"{name}-{i}",
             "problem": row[spec["problem_field"]], "answer": answer_text(row[spec["answer_field"]])}
            for i, row in enumerate(ds)]


_LOADED = {}


def load_benchmark(name: str, spec: dict, template: str = "math", toy_size: int = 200,
                   toy_digits: dict = None, toy_terms: dict = None) -> list:
    """Problems {id, prompt, answer, ...} of one benchmark; loaded once per process."""
    key = json.dumps([name, spec, template, toy_size, toy_digits, toy_terms], sort_keys=True,
                     default=str)
    if key not in _LOADED:
        if spec.get("toy"):
            problems = toy_benchmark(toy_size, toy_digits, toy_terms)
        else:
            if spec.get("file"):
                problems = read_jsonl(name, spec["file"], spec)
            elif spec.get("hub"):
                problems = read_hub(name, spec)
            else:
                raise _unavailable(name, spec, "its config entry has neither `file` nor `hub`")
            problems = [{**p, "prompt": math_prompt(p["problem"], template)}
                        for p in problems]
        ids = [p["id"] for p in problems]
        if not problems or len(set(ids)) != len(ids):
            raise ValueError(f"benchmark {name!r} has no problems or repeated ids")
        _LOADED[key] = problems
    return _LOADED[key]



def load_config_benchmarks(cfg: dict) -> dict:
    """{name: problems} for cfg['eval_benchmarks']."""
    out = {}
    for entry in cfg["eval_benchmarks"]:
        name, spec = resolve(entry, cfg["benchmarks"])
        out[name] = load_benchmark(name, spec, cfg["prompt_template"], cfg["eval_toy_size"],
                                   cfg["toy_digits"], cfg["toy_terms"])
    return out



# ----------------------------------------------------------------------------- the training stream

def normalized_problem(text: str) -> str:
    """A problem's text for comparison: Unicode NFKC, case and all whitespace ignored."""
    return "".join(unicodedata.normalize("NFKC", text).casefold().split())


def train_problems(cfg: dict) -> list:
    """task=math: the training problems {id, prompt, answer} (loaded once per process), less
    those whose problem text (normalized_problem) is also in an evaluation benchmark of the
    config (with eval_every > 0): they are dropped, and the count said once."""
    keys = ("train_data", "prompt_template", "eval_every", "eval_benchmarks", "benchmarks")
    key = json.dumps([cfg[k] for k in keys], sort_keys=True, default=str)
    if key in _TRAIN:
        return _TRAIN[key]
    problems = load_benchmark("train_data", cfg["train_data"], cfg["prompt_template"])
    if cfg["eval_every"] > 0:
        held_out = {normalized_problem(p["problem"]) for bench in load_config_benchmarks(cfg).values()
                    for p in bench if "problem" in p}  # the toy benchmark's sums have none
        kept = [p for p in problems if normalized_problem(p["problem"]) not in held_out]
        if not kept:
            raise ValueError(f"every training problem of train_data is also an evaluation problem "
                             f"({cfg['eval_benchmarks']}): train on another set, or evaluate on another")
        if len(kept) < len(problems):
            print(f"train_data: dropped {len(problems) - len(kept)} of {len(problems)} problems "
                  f"that are also evaluation problems ({', '.join(cfg['eval_benchmarks'])})",
                  file=sys.stderr)
        problems = kept
    _TRAIN[key] = problems
    return problems


_TRAIN = {}


@functools.lru_cache(maxsize=4)
def epoch_order(seed: int, epoch: int, size: int) -> list:
    """A permutation of range(size), new for each (seed, epoch): the order of one pass over a
    data set (training problems, offline pool batches)."""
    order = list(range(size))
    random.Random(f"{seed}:epoch{epoch}").shuffle(order)
    return order


def prompts_for_batch(cfg: dict, index: int) -> list:
    """The problems of rollout batch `index`: a pure function of (seed, index), so a resumed run
    sees the same prompts. Toy: fresh sums, none of them an evaluation sum of two digits or
    more (toy_held_out). Math: the training set in a new random order each epoch; batch `index`
    takes items index*P .. index*P+P-1 of that stream."""
    P = cfg["prompts_per_update"]
    if cfg["task"] == "toy":
        terms = tuple(cfg["toy_terms"].items())
        held_out = toy_held_out(cfg["eval_toy_size"], tuple(cfg["toy_digits"].items()), terms)
        return toy_dataset(P, toy_train_key(cfg["seed"], index), cfg["toy_digits"], held_out,
                           cfg["toy_terms"])
    problems = train_problems(cfg)
    stream = (divmod(j, len(problems)) for j in range(index * P, (index + 1) * P))
    return [problems[epoch_order(cfg["seed"], epoch, len(problems))[pos]] for epoch, pos in stream]


# ----------------------------------------------------------------------------- the engine's context

_BUDGETS = {}


def context_need(cfg: dict) -> dict:
    """What the engine's context must hold: every training prompt (task=math: all of
    train_data; toy: the longest sum toy_digits can make) with max_tokens after it, and every
    evaluation prompt (when eval_every > 0) with eval_max_tokens, in the model's tokens.

    need = max over those prompts of (prompt tokens + its response limit). Returns {need, length,
    where, id, max_tokens (of that prompt), model_limit (max_position_embeddings)}; tokenized
    once per process (a fast tokenizer, batched)."""
    key = json.dumps([cfg[k] for k in ("model", "task", "train_data", "prompt_template", "toy_digits", "toy_terms",
                                       "eval_every", "eval_benchmarks", "benchmarks",
                                       "eval_toy_size", "max_tokens", "eval_max_tokens")],
                     sort_keys=True, default=str)
    if key in _BUDGETS:
        return _BUDGETS[key]
    from transformers import AutoConfig, AutoTokenizer
    if os.path.isdir(cfg["model"]):
        tokenizer = AutoTokenizer.from_pretrained(cfg["model"])
        model_config = AutoConfig.from_pretrained(cfg["model"])
        model_limit = getattr(model_config, "max_position_embeddings", None) or 10 ** 9
    else:  # the toy base model, built when the run starts: its tokenizer and context
        tokenizer, model_limit = build_tokenizer(), TOY_CONTEXT
    sets = []  # (where, problems, response limit)
    if cfg["task"] == "toy":
        longest = toy_longest(cfg["toy_digits"], cfg["toy_terms"])
        what = f"{longest['terms']}-term " if "terms" in longest else ""
        sets.append(("training", [{"id": f"a {what}{longest['digits']}-digit sum", **longest}],
                     cfg["max_tokens"]))
    else:
        sets.append(("training", train_problems(cfg), cfg["max_tokens"]))
    if cfg["eval_every"] > 0:
        sets += [(name, problems, cfg["eval_max_tokens"])
                 for name, problems in load_config_benchmarks(cfg).items()]
    best = None
    for where, problems, max_tokens in sets:
        lengths = [len(ids) for ids in tokenizer([p["prompt"] for p in problems])["input_ids"]]
        i = max(range(len(problems)), key=lengths.__getitem__)
        if best is None or lengths[i] + max_tokens > best["need"]:
            best = {"need": lengths[i] + max_tokens, "length": lengths[i], "where": where,
                    "id": problems[i]["id"], "max_tokens": max_tokens}
    _BUDGETS[key] = {**best, "model_limit": model_limit}
    return _BUDGETS[key]


def max_model_len(cfg: dict) -> int:
    """The engine's context for this run: vllm.max_model_len, or with `auto` the context_need,
    so no response is ever cut by the context rather than by its max_tokens. Refuses, in one
    line, a set value below the need, and a need beyond the model's max_position_embeddings."""
    b, setting = context_need(cfg), cfg["vllm"]["max_model_len"]
    limit = "max_tokens" if b["where"] == "training" else "eval_max_tokens"
    prompt = (f"the longest {'training' if b['where'] == 'training' else b['where'] + ' benchmark'} "
              f"prompt ({b['id']}) has {b['length']} tokens, which with {limit}={b['max_tokens']} "
              f"needs a context of {b['need']}")
    if b["need"] > b["model_limit"]:
        room = b["model_limit"] - b["length"]
        raise ValueError(f"{prompt}, more than the model's max_position_embeddings "
                         f"{b['model_limit']}: " + (f"lower {limit} to {room}, " if room > 0 else "")
                         + "use a shorter prompt_template, or leave that problem out of the data")
    if setting == "auto":
        return b["need"]
    if setting < b["need"]:
        raise ValueError(f"vllm.max_model_len={setting} is too small: {prompt}; set "
                         f"vllm.max_model_len={b['need']} (or auto)")
    if setting > b["model_limit"]:  # vLLM would refuse it too, but only after loading the model
        raise ValueError(f"vllm.max_model_len={setting} is more than the model's "
                         f"max_position_embeddings {b['model_limit']}: set at most that, or auto")
    return setting


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
                  correct_frac={1: 0.85, 2: 0.5, 3: 0.5}, seed=0)


TOY_CONTEXT = 64  # the toy base model's max_position_embeddings
TOY_BASE = os.path.join(HERE, "toy_base")  # the shipped toy base model
TOY_BASE_SHA256 = "f164c274f5f612d8f01a3cbfdde8aa1b8fa1ad410a13f4c89b3984c90c17addd"

# The long toy's base model (configs/toy_long.yaml): the same network with a context for 6-9
# two-digit terms and their worked answers, warmed up on worked sums of 3-9 terms whose partial
# sums slip (one digit off, carried on) with probability `slip`.
TOY_LONG_MODEL = {**TOY_MODEL, "max_position_embeddings": 160}
TOY_LONG_WARMUP = dict(steps=800, batch_size=64, lr=2e-3, digit_weights={2: 1},
                       term_weights={t: 1 for t in range(3, 10)}, slip=0.12, seed=0)
TOY_LONG_BASE = os.path.join(HERE, "toy_long_base")
TOY_LONG_BASE_SHA256 = "08c796ad391e74d45a144cdbe5344b6a4e2929927212ff3dab2c54fe0589845c"
RECIPES = {"short": (TOY_MODEL, TOY_WARMUP), "long": (TOY_LONG_MODEL, TOY_LONG_WARMUP)}


def weights_sha256(path: str) -> str:
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_model_hash(path: str) -> None:
    """Refuse a model folder whose weights are not those its build_info.json names (a toy model
    built by build_base_model records their sha256; other folders are not checked)."""
    info = os.path.join(path, "build_info.json")
    if not os.path.exists(info):
        return
    with open(info) as f:
        expected = json.load(f).get("sha256")
    if expected and weights_sha256(path) != expected:
        raise ValueError(f"{path}/model.safetensors is not the model its build_info.json names "
                         f"(sha256 {expected[:12]}...): restore it (`git checkout -- {path}` for "
                         f"the shipped toy_base), or rebuild it with `python tasks.py {path}`")


def build_base_model(path: str, model: dict = None, warmup: dict = None, log=print) -> str:
    """Create the toy base model at `path` unless it is already there; return `path`.

    A fresh char-level Qwen3 model gets a short supervised warm-up on toy sums so that, sampled at
    temperature 1, it solves easy problems often, medium ones sometimes and hard ones never. The
    folder appears atomically (built under a temporary name, renamed when complete), so an
    interrupted build never leaves a folder that looks valid. A folder built with other settings
    (e.g. after the defaults here changed) is rebuilt. build_info.json records the recipe and
    the weights' sha256 (check_model_hash verifies it at every run's start).
    """
    model_kw = {**TOY_MODEL, **(model or {})}
    warm = {**TOY_WARMUP, **(warmup or {})}
    recipe = json.loads(json.dumps({"model": model_kw, "warmup": warm}))  # int keys -> str
    info_path = os.path.join(path, "build_info.json")
    if os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        if {"model": info.get("model"), "warmup": info.get("warmup")} == recipe:
            return path
        log(f"{path} was built with other settings: rebuilding it")
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(warm["seed"])
    config = Qwen3Config(vocab_size=len(tokenizer), tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id, torch_dtype="float32",
                         **{"max_position_embeddings": TOY_CONTEXT, **model_kw})
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
        json.dump({**recipe, "params": n_params, "seconds": round(time.time() - t0, 1),
                   "sha256": weights_sha256(tmp)}, f, indent=1)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return path


def toy_recipe(cfg: dict) -> str:
    """The base-model recipe of a toy config: long where it draws sums of more than two terms."""
    return "long" if max(cfg["toy_terms"]) > 2 else "short"


def prepare_model(cfg: dict) -> None:
    """Build the toy base model if the config asks for it (train.preflight refuses a missing path)."""
    if cfg["task"] == "toy" and cfg["build_toy_model"]:
        build_base_model(cfg["model"], *RECIPES[toy_recipe(cfg)])


def _near_miss(rng: random.Random, answer: str) -> str:
    """The answer with one digit changed: the kind of slip the warm-up data teaches."""
    i = rng.randrange(len(answer))
    digit = rng.choice([d for d in "0123456789" if d != answer[i] and (i or d != "0" or len(answer) == 1)])
    return answer[:i] + digit + answer[i + 1:]


def _supervised_warmup(net, tokenizer, warm: dict, log) -> None:
    """Teacher forcing on prompt + response + <eos>, loss on the response tokens only."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(warm["seed"])
    opt = torch.optim.AdamW(net.parameters(), lr=warm["lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * max(0.05, 1 - s / warm["steps"]))
    terms = warm.get("term_weights", TOY_TERMS)
    net.train()
    for step in range(warm["steps"]):
        ids, labels = [], []
        for _ in range(warm["batch_size"]):
            prob = draw_toy_problem(rng, warm["digit_weights"], terms)
            if "slip" in warm:  # worked answers: each partial sum may slip
                response = toy_response(prob, warm["slip"], rng)
            else:  # one box: the answer is a near miss with probability 1 - correct_frac
                if rng.random() > warm["correct_frac"][prob["digits"]]:
                    prob["answer"] = _near_miss(rng, prob["answer"])
                response = toy_response(prob)
            p = tokenizer.encode(prob["prompt"])
            r = tokenizer.encode(response) + [tokenizer.eos_token_id]
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


if __name__ == "__main__":  # rebuild a toy base model (after changing its recipe)
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["short"], ["long"]):
        sys.exit("usage: python tasks.py DIR [short|long]   (builds the toy base model, or the long "
                 "toy's, into DIR and prints its sha256)")
    recipe = (sys.argv[2:] or ["short"])[0]
    folder = build_base_model(sys.argv[1], *RECIPES[recipe])
    shipped = {"short": TOY_BASE_SHA256, "long": TOY_LONG_BASE_SHA256}[recipe]
    print(f"{folder}: sha256 {weights_sha256(folder)} (the shipped {recipe} model's is {shipped})")
