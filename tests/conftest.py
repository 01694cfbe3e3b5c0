"""Shared fixtures: the shipped toy base model (toy_base/, checked by its hash) and one sampler.

vLLM takes seconds to start, and one process should hold one engine: every test that samples
shares this one; train.train() pushes its own learner's weights in before sampling. Where vLLM
does not import (macOS, Windows, a GPU machine without it), `sampler` is the transformers
sampler instead, so the loop, resume and learning tests run there too; tests of vLLM itself
skip (sampler_of).
"""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TOY_MODEL = os.path.join(ROOT, "toy_base")


@pytest.fixture(scope="session")
def toy_model():
    import tasks
    tasks.check_model_hash(TOY_MODEL)
    return TOY_MODEL


def vllm_missing():
    """Why vLLM does not import here, or None."""
    import rollout
    return rollout.vllm_import_error()


def sampler_of(backend: str, request):
    """The session's vLLM engine (backend "vllm": the test skips where vLLM does not import) or its
    transformers sampler (backend "transformers"), for tests parametrized over both."""
    if backend == "vllm" and vllm_missing() is not None:
        pytest.skip(f"needs vLLM, which does not import here ({vllm_missing()})")
    return request.getfixturevalue("sampler" if backend == "vllm" else "transformers_sampler")


@pytest.fixture(scope="session")
def transformers_sampler(toy_model):
    import rollout
    return rollout.TransformersSampler(toy_model, dtype="float32", seed=0)


@pytest.fixture(scope="session")
def sampler(toy_model, request):
    """The vLLM engine, or where vLLM does not import the transformers sampler."""
    import rollout
    if vllm_missing() is not None:
        return request.getfixturevalue("transformers_sampler")
    return rollout.Sampler(toy_model, dtype="float32", seed=0)


def toy_config(tmp_path, **overrides):
    """A tiny, fast config for the loop tests."""
    import config
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"))
    cfg.update(out_dir=str(tmp_path), model=TOY_MODEL, updates=4, prompts_per_update=4,
               group_size=4, micro_batch_size=8, eval_every=0,
               engine_mismatch_every=1)  # the default's behavior pass on every batch at N > 0
    cfg.update(overrides)
    config.validate(cfg)
    return cfg


def altered_copy(model: str, where) -> str:
    """A copy of the model folder `model` under `where` with the last byte of its weights flipped
    (its build_info.json unchanged): what tasks.check_model_hash must refuse."""
    import shutil
    altered = where / os.path.basename(model)
    shutil.copytree(model, altered)
    data = bytearray((altered / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (altered / "model.safetensors").write_bytes(bytes(data))
    return str(altered)
