"""The vLLM sampler: one in-process engine, sampling with per-token behavior log-probs, weight sync.

`Sampler.sample` returns one `Rollout` per response. Its `behavior_logp` are the log-probs of
the sampled tokens under the distribution actually sampled from (temperature applied, top_p 1,
no top-k: vLLM's `processed_logprobs`), so importance ratios against the learner are exact.
`Sampler.sync` pushes the learner's weights into the engine in place (no reload from disk).
"""
import logging
import os
import random
import sys
from dataclasses import dataclass

# The engine must live in this process so that weights can be pushed into it by reference, and
# vLLM's CPU backend otherwise takes most of the machine's memory for KV cache.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
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


def batch_seed(run_seed: int, batch_index: int) -> int:
    """Sampling seed of one rollout batch: a pure function of (run seed, batch index), so a
    resumed run draws exactly the samples the uninterrupted run would have."""
    return random.Random(f"{run_seed}:{batch_index}").getrandbits(30)


class Sampler:
    def __init__(self, model_path: str, dtype: str = "float32", max_model_len: int = 64,
                 gpu_memory_utilization: float = 0.35, enable_sleep_mode: bool = False,
                 enforce_eager: bool = True, seed: int = 0):
        import torch
        from vllm import LLM

        if not os.path.isdir(model_path):
            raise FileNotFoundError(f"model path {model_path!r} does not exist: build the toy "
                                    f"model (tasks.build_base_model) or give a Hugging Face folder")
        threads = torch.get_num_threads()  # vLLM's CPU backend may change it; the learner needs it
        self.llm = LLM(model=model_path, dtype=dtype, max_model_len=max_model_len, seed=seed,
                       gpu_memory_utilization=gpu_memory_utilization,
                       enable_sleep_mode=enable_sleep_mode, enable_prefix_caching=False,
                       logprobs_mode="processed_logprobs", max_logprobs=1, enforce_eager=enforce_eager)
        # the learner shares this process: vLLM sets 1 thread for serving on GPU (restored here);
        # its CPU backend keeps the count but turns torch.set_num_threads into a no-op
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if torch.get_num_threads() != threads:
            print(f"warning: vLLM left torch {torch.get_num_threads()} threads (was {threads}); "
                  f"the learner will be slower", file=sys.stderr)
        # every in-place reload warns that the tied lm_head and the rotary cache "failed to load"
        # (they have no checkpoint tensors of their own); _refresh_tied_lm_head handles the former
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
        self.tokenizer = self.llm.get_tokenizer()
        self.version = 0

    def sample(self, prompts: list, m: int, max_tokens: int, temperature: float = 1.0,
               seed: int = None) -> list:
        """m responses for each prompt, grouped: rollouts[i*m:(i+1)*m] answer prompts[i].

        With `seed`, prompt i is sampled with seeds seed + i*m .. seed + i*m + m-1 (vLLM gives
        the j-th of n samples seed + j), so a batch is reproducible independently of the others.
        """
        from vllm import SamplingParams

        # flat_logprobs: plain lists (with logprobs=0, one entry per position: the sampled
        # token's) instead of a dict of objects per token
        params = [SamplingParams(n=m, temperature=temperature, top_p=1.0, top_k=0,
                                 max_tokens=max_tokens, logprobs=0, flat_logprobs=True,
                                 seed=None if seed is None else seed + i * m)
                  for i in range(len(prompts))]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        rollouts = []
        for i, out in enumerate(outputs):
            for comp in sorted(out.outputs, key=lambda c: c.index):
                token_ids = list(comp.token_ids)
                if comp.logprobs.token_ids != token_ids:
                    raise RuntimeError("vLLM's flat log-probs are not one per sampled token")
                rollouts.append(Rollout(i, list(out.prompt_token_ids), token_ids, comp.text,
                                        list(comp.logprobs.logprobs), self.version,
                                        comp.finish_reason == "stop"))
        return rollouts

    def sync(self, model, version: int) -> None:
        """Load the learner's current weights into the engine in place; tag later samples."""
        weights = ((name, p.detach()) for name, p in model.named_parameters())
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.collective_rpc(_refresh_tied_lm_head)
        self.llm.reset_prefix_cache()
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
