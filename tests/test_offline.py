"""Offline training (Fig. 4): one pool made once by the base model, read back, reproducible."""
import json

import pytest

import train
from conftest import toy_config

POOL = {"batches": 3, "seed": 7}


def _offline(tmp_path, out, **overrides):
    pool = {**POOL, "path": str(tmp_path / "pool.jsonl")}
    return toy_config(tmp_path / out, delay=0, updates=5, lr=1e-3, offline_pool=pool, **overrides)


def _logged(rows):
    """Rows as metrics.jsonl holds them, timings left out (NaN -> null, so equal compares)."""
    return [json.dumps({k: v for k, v in train._jsonable(r).items() if not k.startswith("time/")},
                       sort_keys=True) for r in rows]


def test_offline_training_is_reproducible_and_never_samples(tmp_path, sampler):
    cfg = _offline(tmp_path, "a")
    first = train.train(cfg, sampler=sampler)
    pool_file = tmp_path / "pool.jsonl"
    made = pool_file.read_bytes()
    second = train.train(_offline(tmp_path, "b"), sampler=sampler)
    assert pool_file.read_bytes() == made            # read back, not made again
    assert _logged(first) == _logged(second)         # same pool, seed and config: same metrics
    assert first[-1]["loss"] != first[0]["loss"]     # and the learner did move

    pool = train.load_pool(cfg, None, may_generate=False)
    assert [len(b.rollouts) for b in pool] == [16, 16, 16]
    assert all(r.policy_version == 0 for b in pool for r in b.rollouts)
    # every response was generated before the first update, none after; staleness grows by one
    assert [r["responses_total"] for r in first] == [48] * 5
    assert [r["staleness"] for r in first] == [0, 1, 2, 3, 4]
    # update t trains on pool_batch(t): each pass over the pool visits every batch once
    used = [train.pool_batch(pool, cfg["seed"], t) for t in range(1, 6)]
    assert {b.index for b in used[:3]} == {0, 1, 2} and used[3].index != used[4].index
    assert [r["reward_mean"] for r in first] == [sum(b.rewards) / 16 for b in used]

    # a stopped pool generation (torn last line) continues where it stopped, to the same pool
    lines = made.split(b"\n")
    (tmp_path / "pool.jsonl.partial").write_bytes(b"\n".join(lines[:2]) + b"\n" + lines[2][:50])
    pool_file.unlink()
    third = train.train(_offline(tmp_path, "c"), sampler=sampler)
    assert pool_file.read_bytes() == made
    assert _logged(third) == _logged(first)


def test_offline_pool_of_another_recipe_is_refused(tmp_path):
    (tmp_path / "pool.jsonl").write_text(json.dumps({"recipe": train.pool_recipe(
        _offline(tmp_path, "a"))}) + "\n")
    train.preflight(_offline(tmp_path, "a"))  # the same recipe passes
    with pytest.raises(ValueError, match=r"another recipe \(max_tokens: 16 -> 8\)"):
        train.preflight(_offline(tmp_path, "b", max_tokens=8))
