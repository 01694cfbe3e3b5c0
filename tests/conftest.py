"""Shared fixtures: the shipped toy base model (toy_base/, checked by its hash) and one vLLM engine.

vLLM takes seconds to start, and one process should hold one engine: every test that samples
shares this one; train.train() pushes its own learner's weights in before sampling.
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


@pytest.fixture(scope="session")
def sampler(toy_model):
    import rollout
    return rollout.Sampler(toy_model, dtype="float32", seed=0)


def toy_config(tmp_path, **overrides):
    """A tiny, fast config for the loop tests."""
    import config
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"))
    cfg.update(out_dir=str(tmp_path), model=TOY_MODEL, updates=4, prompts_per_update=4,
               group_size=4, micro_batch_size=8, eval_every=0)
    cfg.update(overrides)
    config.validate(cfg)
    return cfg
