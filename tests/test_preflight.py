"""The GPU path's checks before any long work: the engine's context against every prompt, the
in-process engine, and the choices that differ between CPU and GPU."""
import json
import os
import random
import shutil
import time

import pytest
import torch

import checkpoint
import config
import learner
import rollout
import tasks
import train
from conftest import ROOT, TOY_MODEL, sampler_of, toy_config

MINI_MATH = os.path.join(ROOT, "tests", "fixtures", "mini_math.jsonl")


@pytest.fixture
def no_model_load(monkeypatch):
    monkeypatch.setattr(learner, "load_learner", lambda cfg: pytest.fail("loaded the model"))
    monkeypatch.setattr(rollout, "Sampler", lambda *a, **k: pytest.fail("started the engine"))


def toy_with_context(tmp_path, context: int) -> str:
    """A copy of the toy base model whose config allows `context` positions (RoPE has no table)."""
    path = str(tmp_path / f"toy_{context}")
    shutil.copytree(TOY_MODEL, path)
    with open(os.path.join(path, "config.json")) as f:
        model_config = json.load(f)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({**model_config, "max_position_embeddings": context}, f)
    return path


def test_auto_context_is_the_longest_prompt_plus_its_max_tokens(tmp_path):
    cfg = toy_config(tmp_path)  # toy sums of up to 4 digits: "9999+9999=" is 10 tokens
    assert cfg["vllm"]["max_model_len"] == "auto"
    assert tasks.max_model_len(cfg) == 10 + 16
    eval_cfg = toy_config(tmp_path, eval_every=5, eval_max_tokens=30, eval_toy_size=20)
    need = tasks.context_need(eval_cfg)
    assert (need["where"], need["max_tokens"], need["need"]) == ("toy", 30, need["length"] + 30)
    assert tasks.max_model_len({**cfg, "vllm": {**cfg["vllm"], "max_model_len": 40}}) == 40


def test_a_math_prompt_beyond_the_model_is_refused_before_any_work(tmp_path, no_model_load):
    """A training prompt too long: the toy model (64 positions) on mini_math with the math template."""
    cfg = toy_config(tmp_path, task="math", prompt_template="math",
                     train_data={**config.load_config()["train_data"], "file": MINI_MATH})
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"^the longest training prompt \(mini_math-\d+\) has \d+ "
                                         r"tokens, which with max_tokens=16 needs a context of \d+, "
                                         r"more than the model's max_position_embeddings 64: use a "
                                         r"shorter prompt_template"):
        train.train(cfg)
    assert time.perf_counter() - t0 < 10
    # a model with room for it: auto sizes the engine to the longest of the 34 problems
    cfg["model"], cfg["build_toy_model"] = toy_with_context(tmp_path, 512), False
    lengths = [len(tasks.math_prompt(json.loads(line)["problem"])) for line in open(MINI_MATH)]
    assert tasks.max_model_len(cfg) == max(lengths) + 16  # one token per character


def test_an_eval_prompt_too_long_for_a_set_context_is_refused_naming_it(tmp_path, no_model_load):
    """An evaluation prompt too long: a 48-token prompt with 40 max tokens."""
    bench = tmp_path / "long.jsonl"
    bench.write_text(json.dumps({"id": "long-1", "problem": "1" * 48, "answer": "1"}) + "\n")
    cfg = toy_config(tmp_path / "run", eval_every=2, eval_benchmarks=[f"long={bench}"],
                     prompt_template="plain", eval_max_tokens=40)
    with pytest.raises(ValueError, match=r"long benchmark prompt \(long-1\) has 48 tokens, which "
                                         r"with eval_max_tokens=40 needs a context of 88, more than "
                                         r"the model's max_position_embeddings 64: lower "
                                         r"eval_max_tokens to 16"):
        train.train(cfg)
    cfg["model"], cfg["build_toy_model"] = toy_with_context(tmp_path, 128), False
    cfg["vllm"] = {**cfg["vllm"], "max_model_len": 64}
    with pytest.raises(ValueError, match=r"^vllm.max_model_len=64 is too small: the longest long "
                                         r"benchmark prompt \(long-1\) has 48 tokens.*; set "
                                         r"vllm.max_model_len=88 \(or auto\)$"):
        train.train(cfg)
    cfg["vllm"]["max_model_len"] = 200
    with pytest.raises(ValueError, match=r"^vllm.max_model_len=200 is more than the model's "
                                         r"max_position_embeddings 128: set at most that, or auto$"):
        train.train(cfg)
    cfg["vllm"]["max_model_len"] = "auto"
    assert tasks.max_model_len(cfg) == 88


def test_the_context_is_fixed_on_resume_and_the_memory_share_is_not(tmp_path):
    cfg = toy_config(tmp_path)
    vllm = cfg["vllm"]
    assert config.config_differences(cfg, {**cfg, "vllm": {**vllm, "max_model_len": 100}}) == \
        ["vllm.max_model_len: 'auto' -> 100"]
    assert config.config_differences(cfg, {**cfg, "keep_checkpoints": 5, "vllm": {
        **vllm, "gpu_memory_utilization": 0.2, "enforce_eager": False}}) == []
    with pytest.raises(TypeError, match="vllm.max_model_len must be auto or a positive integer"):
        config.load_config(None, ["vllm.max_model_len=big"])
    assert config.load_config(None, ["vllm.max_model_len=1536"])["vllm"]["max_model_len"] == 1536


def test_a_shared_engine_too_small_for_a_run_is_refused(tmp_path, sampler, no_model_load):
    assert sampler.max_model_len == 64  # either sampler (the transformers one caps at it too)
    cfg = toy_config(tmp_path, model=toy_with_context(tmp_path, 128), build_toy_model=False,
                     max_tokens=60)
    with pytest.raises(ValueError, match=r"shared engine's max_model_len 64 is too small for this "
                                         r"run: training prompt a 4-digit sum has 10 tokens and "
                                         r"needs 70"):
        train.train(cfg, sampler=sampler)


@pytest.mark.parametrize("value", [None, "0", "1"])
def test_the_engine_is_always_in_process(monkeypatch, capsys, value):
    """VLLM_ENABLE_V1_MULTIPROCESSING=1 in the environment would put the engine in another process,
    where the first weight push fails: it is set to 0, with a one-line note."""
    if value is None:
        monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    else:
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", value)
    rollout.in_process_engine()
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    err = capsys.readouterr().err
    assert err == ("" if value != "1" else "note: VLLM_ENABLE_V1_MULTIPROCESSING=1 from the "
                   "environment is set to 0: this code pushes weights into the engine in its own process\n")


def test_cpu_engine_has_no_prefix_caching(request):
    """On this CPU prefix caching is off: toy prompts share nothing worth caching."""
    assert not torch.cuda.is_available()
    sampler = sampler_of("vllm", request)  # (skips where vLLM does not import)
    assert sampler.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching is False


def test_cpu_learner_packs_and_a_gpu_learner_does_not():
    """Packing allowed on the CPU; on CUDA the learner never packs (per-sequence masks rule out
    the flash kernel)."""
    model = learner.load_learner({"model": TOY_MODEL, "dtype": "float32", "gradient_checkpointing": False,
                                  "cpu_matmul": "torch", "device": "cpu"})
    rollouts = [rollout.Rollout(0, [5, 6], [7] * n, "", [], 0, True) for n in (30, 2, 2, 2)]
    assert learner.model_inputs(model, rollouts, 0)["ids"].shape[0] < 4  # packed rows
    model.to("meta")  # a non-CPU device: one sequence per row
    assert learner.model_inputs(model, rollouts, 0)["ids"].shape[0] == 4


# ----------------------------------------------------------------------------- disk

def toy_checkpoint_state(cfg) -> dict:
    """A state.pt whose queue holds `delay` batches of responses at their longest (max_tokens),
    of distinct tokens and log-probs (pickle stores a repeated object once)."""
    rng, T, n = random.Random(0), cfg["max_tokens"], cfg["prompts_per_update"] * cfg["group_size"]
    prompt = tasks.build_tokenizer()("9999+9999=")["input_ids"]
    queue = [rollout.RolloutBatch(b, [rollout.Rollout(
        i, prompt, [rng.randrange(2, 98) for _ in range(T)], "".join(rng.choices("0123456789", k=T)),
        [-rng.random() for _ in range(T)], b, False) for i in range(n)], [0.0] * n)
        for b in range(cfg["delay"])]
    return train.RunState(update=1, next_batch=3, queue=queue).to_dict(cfg["seed"])


def test_the_checkpoint_estimate_is_what_save_checkpoint_writes(tmp_path):
    """learner.pt P x 4 B, optimizer.pt 2 P x 4 B, reference.pt P x 4 B (GGPO, refreshed), state.pt
    at most its estimate: the toy's 996,992 parameters, against the files of a real checkpoint."""
    cfg = toy_config(tmp_path, loss="ggpo", ref_refresh_every=2, delay=3)
    sizes = checkpoint.checkpoint_bytes(cfg)
    assert sorted(sizes) == ["learner.pt", "optimizer.pt", "reference.pt", "state.pt"]
    assert sizes["learner.pt"] == sizes["reference.pt"] == 4 * 996_992
    assert sizes["optimizer.pt"] == 2 * sizes["learner.pt"]
    model, ref_model, optimizer = learner.build_learner(cfg)
    sum(p.sum() for p in model.parameters()).backward()
    optimizer.step()  # AdamW makes its two moments at its first step
    path = checkpoint.save_checkpoint(str(tmp_path), 1, model, optimizer, ref_model,
                                      toy_checkpoint_state(cfg))
    written = {n: os.path.getsize(os.path.join(path, n)) for n in sizes}
    for name in ("learner.pt", "optimizer.pt", "reference.pt"):
        assert written[name] == pytest.approx(sizes[name], rel=0.02), name
    assert written["state.pt"] <= sizes["state.pt"] < 3 * written["state.pt"] + 10 ** 5
    # GRPO reads no reference, and a fixed reference (the base model) is never saved
    assert "reference.pt" not in checkpoint.checkpoint_bytes(toy_config(tmp_path, loss="ggpo"))
    assert "reference.pt" not in checkpoint.checkpoint_bytes(toy_config(tmp_path, ref_refresh_every=2))


def test_a_disk_too_small_for_the_checkpoints_is_refused_before_any_model_loads(
        tmp_path, monkeypatch, no_model_load):
    cfg = toy_config(tmp_path / "run", keep_checkpoints=2)
    one = sum(checkpoint.checkpoint_bytes(cfg).values())
    free = {"bytes": int(2.5 * one)}  # room for 2 checkpoints and a half: keep 2 needs 3
    real_disk_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_disk_usage(path)._replace(
        free=free["bytes"]))
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=(
            rf"^out_dir '{tmp_path}/run' is on a disk with {2.5 * one / 1e6:.1f} MB free, but this "
            rf"run needs {3 * one / 1e6:.1f} MB for its checkpoints: keep_checkpoints=2 plus the "
            rf"one written before the oldest is deleted, 3 x {one / 1e6:.1f} MB \(learner \d+\.\d MB "
            rf"\+ optimizer \d+\.\d MB \+ state \d\.\d MB\)\. Free space there, lower "
            rf"keep_checkpoints \(at least 1\), or set out_dir on a larger disk$")):
        train.train(cfg)
    assert time.perf_counter() - t0 < 10
    assert not os.path.exists(cfg["out_dir"])  # refused before the run folder was made
    train.preflight({**cfg, "keep_checkpoints": 1})  # 2 fit
    # resumed with two checkpoints already there: the next write needs room for one more
    checkpoint.write_config(cfg["out_dir"], cfg)
    with open(os.path.join(cfg["out_dir"], "metrics.jsonl"), "w") as f:  # the log a resume needs
        f.write("".join(f'{{"update": {t}}}\n' for t in range(5)))
    with open(os.path.join(cfg["out_dir"], "run_info.json"), "w") as f:
        f.write('{"sessions": [{"start_update": 0}]}\n')
    for update in (2, 4):
        os.makedirs(os.path.join(cfg["out_dir"], f"ckpt-{update:06d}"))
        with open(os.path.join(cfg["out_dir"], f"ckpt-{update:06d}", "learner.pt"), "wb") as f:
            f.truncate(one)
    free["bytes"] = int(1.5 * one)
    assert train.preflight({**cfg, "resume": True}).endswith("ckpt-000004")
    free["bytes"] = int(0.5 * one)
    with pytest.raises(ValueError, match=rf"needs {one / 1e6:.1f} MB .*, less {2 * one / 1e6:.1f} "
                                         rf"MB already there\. Free space there"):
        train.preflight({**cfg, "resume": True})
