"""Offline training (Fig. 4): one pool made once by the base model, read back, reproducible."""
import json

import pytest

import checkpoint
import rollout
import train
from conftest import toy_config

POOL = {"batches": 3, "seed": 7}


def _offline(tmp_path, out, **overrides):
    pool = {**POOL, "path": str(tmp_path / "pool")}
    return toy_config(tmp_path / out, delay=0, updates=5, lr=1e-3, offline_pool=pool, **overrides)


def _logged(rows):
    """Rows as metrics.jsonl holds them, timings left out (NaN -> null, so equal compares)."""
    return [json.dumps({k: v for k, v in checkpoint.jsonable(r).items() if not k.startswith("time/")},
                       sort_keys=True) for r in rows]


def _pool_files(tmp_path):
    """The pool's files (its .lock, which makes two sweep workers build one pool once, left out)."""
    return {p.name: p.read_bytes() for p in sorted((tmp_path / "pool").iterdir())
            if p.name != ".lock"}


def test_offline_training_is_reproducible_and_never_samples(tmp_path, sampler):
    cfg = _offline(tmp_path, "a")
    first = train.train(cfg, sampler=sampler)
    made = _pool_files(tmp_path)
    assert list(made) == ["batch-000000.json", "batch-000001.json", "batch-000002.json", "recipe.json"]
    second = train.train(_offline(tmp_path, "b"), sampler=sampler)
    assert _pool_files(tmp_path) == made             # read back, not made again
    assert _logged(first) == _logged(second)         # same pool, seed and config: same metrics
    # update 1 is on-policy (the pool's policy is the base model); then the learner moves away
    assert first[0]["logp_diff_max"] < 1e-4 and first[-1]["logp_diff_max"] > 1e-3

    # every response was generated before the first update, none after; staleness grows by one
    assert [r["responses_total"] for r in first] == [48] * 5
    assert [r["staleness"] for r in first] == [0, 1, 2, 3, 4]
    # update t trains on pool_batch(t): each pass over the pool visits every batch once
    used = [rollout.pool_batch(cfg, t) for t in range(1, 6)]
    assert {b.index for b in used[:3]} == {0, 1, 2} and used[3].index != used[4].index
    assert all(r.policy_version == 0 and len(b.rollouts) == 16 for b in used for r in b.rollouts)
    assert [r["reward_mean"] for r in first] == [sum(b.rewards) / 16 for b in used]
    # another seed visits the same pool in another order
    other = [rollout.pool_batch({**cfg, "seed": 1}, t).index for t in range(1, 7)]
    assert other != [b.index for b in used] + [rollout.pool_batch(cfg, 6).index]

    # a stopped pool generation continues where it stopped, to the same pool
    (tmp_path / "pool" / "batch-000001.json").unlink()
    third = train.train(_offline(tmp_path, "c"), sampler=sampler)
    assert _pool_files(tmp_path) == made
    assert _logged(third) == _logged(first)
    # a resumed run never samples the pool again: a missing batch is an error, not a new batch
    (tmp_path / "pool" / "batch-000002.json").unlink()
    with pytest.raises(FileNotFoundError, match="restore it"):
        rollout.pool_batch(cfg, 1 + [b.index for b in used].index(2))


def test_offline_pool_of_another_recipe_is_refused(tmp_path):
    cfg = _offline(tmp_path, "a")
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "recipe.json").write_text(json.dumps(rollout.pool_recipe(cfg)))
    train.preflight(cfg)  # the same recipe passes
    assert rollout.pool_recipe(cfg)["toy_terms"] == {"2": 1}  # which sums: the long toy's pools differ
    with pytest.raises(ValueError, match=r"another recipe \(max_tokens: 16 -> 8\)"):
        train.preflight(_offline(tmp_path, "b", max_tokens=8))
