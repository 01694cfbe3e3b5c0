"""The loop: exact staleness, on-policy at N = 0, real weight sync, config errors."""
import itertools
import json
import os

import pytest
import torch

import config
import cpu
import learner
import rollout
import tasks
import train
from conftest import ROOT, altered_copy, toy_config


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_staleness_is_exact(tmp_path, sampler, delay):
    """The update v -> v+1 trains on a batch sampled by version max(0, v - N)."""
    cfg = toy_config(tmp_path, delay=delay, updates=6)
    rows = train.train(cfg, sampler=sampler)
    assert [r["update"] for r in rows] == list(range(1, 7))
    for r in rows:
        v = r["update"] - 1                      # learner version before the update
        assert r["sampler_version"] == max(0, v - delay)
        assert r["staleness"] == min(v, delay)
    # every response the sampler generated is counted, warm-up batches included
    assert rows[-1]["responses_total"] == 6 * 4 * 4
    logged = [json.loads(line) for line in open(os.path.join(tmp_path, "metrics.jsonl"))]
    assert [r["update"] for r in logged] == list(range(1, 7))


def test_on_policy_behavior_equals_learner(tmp_path, sampler):
    """N = 0: the sampler's log-probs are the learner's before the step (fp32)."""
    cfg = toy_config(tmp_path, delay=0, updates=3, lr=1e-3)
    rows = train.train(cfg, sampler=sampler)
    for r in rows:
        assert r["logp_diff_max"] < 1e-4
        assert r["k3"] < 1e-8
    # while a stale batch is off-policy as soon as the learner has moved
    rows = train.train(toy_config(tmp_path / "stale", delay=2, updates=4, lr=1e-3), sampler)
    assert rows[-1]["logp_diff_max"] > 1e-3


def test_on_policy_at_a_temperature(tmp_path, sampler):
    """At T != 1 the engine samples from softmax(logits / T) and its behavior log-probs are of
    that distribution; the learner's log-probs are taken at the same T, so at N = 0 in fp32 the
    two agree (with the learner at T = 1: k3 ~ 0.02, logp_diff_max ~ 2 on the toy)."""
    cfg = toy_config(tmp_path, delay=0, updates=2, lr=1e-3, temperature=0.7)
    for r in train.train(cfg, sampler=sampler):
        assert r["logp_diff_max"] < 1e-4 and r["k3"] < 1e-8 and r["engine_k3"] < 1e-8


def _learner_logp(model, rollouts, temperature=1.0):
    out = []
    with torch.no_grad():
        for r in rollouts:
            ids = torch.tensor([r.prompt_ids + r.response_ids])
            lp = torch.log_softmax(model(ids).logits[0].float() / temperature, -1)
            P = len(r.prompt_ids)
            pos = torch.arange(P - 1, P - 1 + len(r.response_ids))
            out.append(lp[pos, torch.tensor(r.response_ids)])
    return torch.cat(out)


def test_response_logp_matches_one_sequence_at_a_time(toy_model):
    """The batched learner log-probs, with sequences packed several to a row or one per row, and
    the output layer on response tokens only, equal a plain forward pass over each sequence
    alone; the entropy is that of the full logits; both at the sampling temperature."""
    import rollout
    model = learner.load_learner({"model": toy_model, "dtype": "float32", "gradient_checkpointing": False,
                                  "cpu_matmul": "onednn", "device": "auto"})
    long = rollout.Rollout(0, list(range(5, 16)), [13], "", [-1.0], 0, False)
    short = [rollout.Rollout(0, [5, 6], [8], "", [-0.5], 0, True),
             rollout.Rollout(1, [20], [22, 1], "", [-0.125] * 2, 0, True),
             rollout.Rollout(1, [30], [31, 1], "", [-0.5] * 2, 0, True),
             rollout.Rollout(2, [40], [41, 42], "", [-0.25] * 2, 0, False)]
    mid = rollout.Rollout(2, [50, 51], [52, 53, 54, 1], "", [-0.75] * 4, 0, True)
    for (rollouts, shape), T in itertools.product(
            [([long] + short + [mid], (2, 24)),  # 12 + 6 + 3 + 3 | 3 + 3 + pads
             ([long, mid], (2, 12))], (1.0, 0.6)):  # one per row: cheaper here
        inputs = learner.batch_inputs(rollouts, 0, model.config.hidden_size)
        assert inputs["ids"].shape == shape
        logp, mask, entropy_sum = learner.response_logp(model, inputs, True, temperature=T)
        assert mask.sum(1).tolist() == [len(r.response_ids) for r in rollouts]
        assert torch.allclose(logp[mask.bool()], _learner_logp(model, rollouts, T), atol=1e-5)
        if T != 1:  # and not those at T = 1
            assert not torch.allclose(logp[mask.bool()], _learner_logp(model, rollouts), atol=1e-2)
        assert (logp[~mask.bool()] == 0).all()
        entropies = []
        with torch.no_grad():
            for r in rollouts:
                ids = torch.tensor([r.prompt_ids + r.response_ids])
                lp = torch.log_softmax(model(ids).logits[0] / T, -1)
                P = len(r.prompt_ids)
                entropies.append(-(lp.exp() * lp).sum(-1)[P - 1:P - 1 + len(r.response_ids)])
        assert float(entropy_sum) == pytest.approx(float(torch.cat(entropies).sum()), rel=1e-5)
    behavior = learner.padded([r.behavior_logp for r in [long, mid]], 4, "cpu")
    assert behavior.tolist() == [[-1.0, 0, 0, 0], [-0.75] * 4]


def test_shared_prompts_give_the_log_probs_and_gradients_of_separate_sequences(toy_model):
    """Groups laid out as [prompt, response 1, ..., response m] (each prompt once, an explicit
    attention mask) give every response token the log-prob and the weights the gradient they get
    with one sequence per row: within 1e-5 (log-probs) and 3e-5 of each gradient's largest entry.
    A 3-token prompt with 4 responses of 1-9 tokens (an empty-context first token included), a
    second group, and a rollout alone; the layout is chosen for costing less than the others."""
    import rollout
    model = learner.load_learner({"model": toy_model, "dtype": "float32", "gradient_checkpointing": False,
                                  "cpu_matmul": "onednn", "device": "auto"})
    group_a = [rollout.Rollout(0, [5, 6, 7], list(range(10, 10 + n)), "", [], 0, True)
               for n in (1, 9, 4, 6)]
    group_b = [rollout.Rollout(1, [30, 31, 32, 33, 34, 35, 36], [40 + i, 41, 1], "", [], 0, True)
               for i in range(3)]
    alone = [rollout.Rollout(2, [50, 51], [52, 53], "", [], 0, True)]
    rollouts = group_a + group_b + alone
    hidden = model.config.hidden_size
    shared = learner.batch_inputs(rollouts, 0, hidden, may_pack=False, may_share=True)
    plain = learner.batch_inputs(rollouts, 0, hidden, may_pack=False)
    assert shared["attention_mask"] is not None and plain["attention_mask"] is None
    assert shared["ids"].numel() < plain["ids"].numel()
    grads = []
    for inputs in (plain, shared):
        model.zero_grad()
        logp, mask, _ = learner.response_logp(model, inputs)
        (logp * torch.linspace(-1, 1, logp.numel()).view(logp.shape)).sum().backward()
        grads.append((logp.detach(), mask, [p.grad.clone() for p in model.parameters()]))
    (lp_plain, mask_plain, g_plain), (lp_shared, mask_shared, g_shared) = grads
    assert torch.equal(mask_plain, mask_shared)
    assert torch.allclose(lp_shared, lp_plain, atol=1e-5)
    assert torch.allclose(lp_plain[mask_plain.bool()], _learner_logp(model, rollouts), atol=1e-5)
    worst = max(float((a - b).abs().max() / a.abs().max()) for a, b in zip(g_plain, g_shared))
    assert worst <= 3e-5  # float32 sums over the batch's tokens, in another order; a wrong mask: >1e-2


def test_weight_sync_is_real(tmp_path, sampler, toy_model, monkeypatch):
    """After a few updates vLLM samples from the learner's weights, not the base model's."""
    cfg = toy_config(tmp_path, delay=0, updates=3, lr=3e-3)
    built = {}
    orig = learner.load_learner

    def keep(cfg):
        model = orig(cfg)
        built.setdefault("model", model)
        return model

    monkeypatch.setattr(learner, "load_learner", keep)
    train.train(cfg, sampler=sampler)
    monkeypatch.setattr(learner, "load_learner", orig)
    rollouts = sampler.sample(["12+34=", "567+89=", "4321+1234="], m=4, max_tokens=16, seed=5)
    vllm_logp = torch.tensor([x for r in rollouts for x in r.behavior_logp])
    trained = _learner_logp(built["model"], rollouts)
    base = _learner_logp(learner.load_learner({**cfg, "model": toy_model}), rollouts)
    assert (vllm_logp - trained).abs().max() < 1e-4
    assert (vllm_logp - base).abs().max() > 1e-2
    assert sampler.version == 3


def test_config_overrides_and_errors():
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"),
                            ["delay=3", "loss_args.beta=0.1", "lr=1e-3", "loss=ggpo"])
    assert (cfg["delay"], cfg["loss_args"]["beta"], cfg["lr"], cfg["loss"]) == (3, 0.1, 1e-3, "ggpo")
    with pytest.raises(ValueError, match="unknown config key 'dealy'"):
        config.load_config(None, ["dealy=3"])
    with pytest.raises(ValueError, match="unknown config key 'loss_args.betta'"):
        config.load_config(None, ["loss_args.betta=3"])
    with pytest.raises(TypeError, match="group_size must be an integer"):
        config.load_config(None, ["group_size=2.5"])
    with pytest.raises(ValueError, match="delay"):
        config.load_config(None, ["delay=-1"])
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        config.load_config(None, ["group_size=1", "micro_batch_size=1"])
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        config.load_config("nope.yaml")


def test_grpo_on_policy_raises_toy_accuracy(tmp_path, sampler):
    """Learning is real: after 50 on-policy GRPO updates the policy earns more reward than the
    base model on the same ten training batches (updates 41-50: the same prompts and sampling
    seeds, so the batches' difficulty and most of the sampling noise cancel), and the held-out
    toy eval has not fallen. Nothing here bets on a trajectory's noise (the toy rounds
    differently on another processor, and its trajectory with it): over seeds 0-5 and the
    rounding paths at hand (cpu_matmul onednn / torch, 1 / 2 threads, the vLLM / transformers
    sampler; AMD EPYC) the reward gain is 0.029-0.051, against 0 exactly without learning; the
    held-out mean@4 moves by -0.011 (Intel Xeon) to +0.055, within its noise after 50 updates
    (the first updates cost reward: updates 1-10 earn 0.01-0.05 less than the base model)."""
    import rollout
    cfg = toy_config(tmp_path, delay=0, updates=50, prompts_per_update=16, group_size=8,
                     micro_batch_size=128, lr=2e-4, eval_every=50)
    rows = train.train(cfg, sampler=sampler)
    trained = sum(r["reward_mean"] for r in rows[41:51]) / 10   # rows[t]: update t, batch t - 1
    sampler.sync(learner.load_learner(cfg), 0)                  # the base model, same batches
    base_reward = sum(sum(rollout.sample_batch(cfg, sampler, index)[0].rewards)
                      for index in range(40, 50)) / (10 * 16 * 8)
    assert trained > base_reward + 0.01, (trained, base_reward)
    base, final = rows[0]["eval/toy/mean@4"], rows[-1]["eval/toy/mean@4"]
    assert 0.3 < base < 0.5 and final > base - 0.05, (base, final)
    # by digit count: easy sums mostly solved, 4-digit ones not; together the overall mean@4
    share = {d: sum(p["digits"] == d for p in tasks.toy_benchmark()) / 200 for d in (1, 2, 3, 4)}
    for row in (rows[0], rows[-1]):
        by_digits = {d: row[f"eval/toy/d{d}/mean@4"] for d in share}
        assert sum(share[d] * by_digits[d] for d in share) == pytest.approx(row["eval/toy/mean@4"])
        assert by_digits[1] > 0.6 > by_digits[2] > by_digits[4]


def test_math_training_prompts_cover_each_epoch_in_a_seeded_order():
    fixture = os.path.join(ROOT, "tests", "fixtures", "mini_math.jsonl")
    cfg = config.load_config(None, ["task=math", f"train_data.file={fixture}",
                                   "prompts_per_update=5", "prompt_template=plain"])
    n = len(tasks.train_problems(cfg))
    stream = [p["id"] for b in range(2 * n) for p in tasks.prompts_for_batch(cfg, b)]
    for epoch in range(5):  # 2n batches of 5 = 10 epochs
        assert sorted(stream[epoch * n:(epoch + 1) * n]) == sorted({p["id"] for p in tasks.train_problems(cfg)})
    assert stream[:n] != stream[n:2 * n]                       # reshuffled each epoch
    assert tasks.prompts_for_batch(cfg, 3) == tasks.prompts_for_batch(cfg, 3)
    other = config.load_config(None, ["task=math", f"train_data.file={fixture}",
                                     "prompts_per_update=5", "prompt_template=plain", "seed=1"])
    assert [p["id"] for p in tasks.prompts_for_batch(other, 0)] != stream[:5]


def test_math_task_refuses_missing_training_data(tmp_path):
    cfg = toy_config(tmp_path, task="math", model=str(tmp_path))
    cfg["train_data"] = {**cfg["train_data"], "file": "/nowhere.jsonl"}
    with pytest.raises(tasks.BenchmarkUnavailable, match="'/nowhere.jsonl' does not exist"):
        train.train(cfg)


def test_chunked_output_layer_gives_the_same_logp_entropy_and_gradients(toy_model):
    """The output layer and softmax over chunks of 3 response tokens, recomputed in the backward
    pass, against all tokens at once, in fp32: log-probs within 1e-5 (on values ~10), entropy
    within 1e-6 relative, gradients within 1e-5 of each tensor's largest entry."""
    import rollout
    model = learner.load_learner({"model": toy_model, "dtype": "float32", "gradient_checkpointing": False,
                                  "cpu_matmul": "onednn",
                                  "device": "auto"})
    rollouts = [rollout.Rollout(0, [5 + i, 6, 7], list(range(10 + i, 17 + 2 * i)), "", [], 0, True)
                for i in range(4)]  # 7, 9, 11, 13 response tokens: 40 in all
    inputs = learner.batch_inputs(rollouts, 0, model.config.hidden_size)
    results = []
    for chunk in (0, 3, 40):
        model.zero_grad()
        logp, mask, entropy = learner.response_logp(model, inputs, True, chunk)
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        results.append((logp.detach(), float(entropy), [p.grad.clone() for p in model.parameters()]))
    (full, full_entropy, full_grads), *others = results
    for logp, entropy, grads in others:
        assert (logp - full).abs().max() < 1e-5  # fp32 rounding of log-probs of size ~10
        assert entropy == pytest.approx(full_entropy, rel=1e-6)
        for g, g_full in zip(grads, full_grads):
            ratio = float((g - g_full).abs().max() / g_full.abs().max())
            assert ratio <= 1e-5, ratio  # of the tensor's largest entry
    assert learner.chunk_tokens({"logits_chunk_mib": 1}, model) == 2 ** 20 // (4 * model.config.vocab_size)
    assert learner.chunk_tokens({"logits_chunk_mib": 0}, model) == 0


def test_behavior_logp_sources_and_the_engine_mismatch(tmp_path, sampler):
    """N = 0, both sides fp32: the engine's and the learner's log-probs agree (engine_k3 ~ 0). With
    the learner under bf16 autocast they do not: engine_k3 is large, and K3 on the trained batch
    reads that numerical mismatch as if it were staleness, unless behavior_logp=learner, where
    the behavior log-probs are the learner's own and K3 is exactly 0 at N = 0."""
    base = dict(delay=0, updates=3, lr=1e-3)
    engine = train.train(toy_config(tmp_path / "engine", **base), sampler)
    assert all(r["engine_k3"] < 1e-8 and r["k3"] < 1e-8 for r in engine)
    ours = train.train(toy_config(tmp_path / "learner", behavior_logp="learner", **base), sampler)
    assert all(r["k3"] == 0 and r["logp_diff_max"] == 0 and r["engine_k3"] < 1e-8 for r in ours)
    # at N = 0 the learner's view comes from the training forward pass, micro-batch by micro-batch
    groups = train.train(toy_config(tmp_path / "learner_mb", behavior_logp="learner",
                                    micro_batch_size=4, **base), sampler)  # one group each, not two
    for one, split in zip(ours[1:], groups[1:]):
        assert split["k3"] == 0 and split["engine_k3"] < 1e-8
        assert split["surrogate"] == pytest.approx(one["surrogate"], rel=1e-4, abs=1e-8)

    bf16 = dict(base, autocast="bfloat16")
    engine = train.train(toy_config(tmp_path / "engine_bf16", **bf16), sampler)
    # at N = 0 the trained batch is the fresh one: all of its K3 is the numerical mismatch
    assert all(r["engine_k3"] > 1e-6 and r["k3"] == pytest.approx(r["engine_k3"]) for r in engine)
    assert sum(r["engine_k3"] for r in engine) / 3 > 3e-5  # fp32 on both sides: ~1e-9
    ours = train.train(toy_config(tmp_path / "learner_bf16", behavior_logp="learner", **bf16), sampler)
    assert all(r["engine_k3"] > 1e-6 and r["k3"] == 0 for r in ours)


def test_engine_mismatch_every_k_batches_leaves_training_as_it_was(tmp_path, sampler):
    """N = 2, 8 updates: at update t the loop samples batch N + t - 1 (batches 0 and 1 fill the
    queue first; none after the last that an update trains on). engine_mismatch_every=3 takes the
    learner pass, and logs engine_k3, on batches 3 and 6 only (updates 2 and 5); every logged
    number but engine_* and the timings is the same as with the pass on every batch."""
    base = dict(delay=2, updates=8, lr=1e-3)
    every = train.train(toy_config(tmp_path / "every", engine_mismatch_every=1, **base), sampler)
    third = train.train(toy_config(tmp_path / "third", engine_mismatch_every=3, **base), sampler)
    assert [r["update"] for r in every if "engine_k3" in r] == [1, 2, 3, 4, 5, 6]
    assert [r["update"] for r in third if "engine_k3" in r] == [2, 5]
    assert [r["update"] for r in third if "time/behavior" in r] == [2, 5]
    same = lambda r: json.dumps({k: v for k, v in r.items() if not k.startswith(("time/", "engine_"))},
                                sort_keys=True)  # NaN (a metric with no tokens) equals itself here
    assert [same(a) for a in every] == [same(b) for b in third]
    # behavior_logp=learner and an objective that reads old_logp need the pass on every batch
    for over in ({"behavior_logp": "learner"}, {"loss": "icepop"}):
        cfg = toy_config(tmp_path, engine_mismatch_every=0, **base, **over)
        assert all(learner.needs_fresh_behavior(cfg, i) for i in range(8))
    cfg = toy_config(tmp_path, engine_mismatch_every=0, **base)
    assert not any(learner.needs_fresh_behavior(cfg, i) for i in range(8))
    with pytest.raises(ValueError, match="engine_mismatch_every must be an integer >= 0"):
        config.load_config(None, ["engine_mismatch_every=-1"])


def test_eval_from_skips_the_early_evaluations_and_leaves_training_as_it_was(tmp_path, sampler):
    """eval_every=2, 8 updates: evaluations at 0, 2, 4, 6, 8; with eval_from=5 at 0, 6 and 8 only,
    the same records there, and every training number the same (evaluation draws from its own
    seeds)."""
    base = dict(delay=1, updates=8, lr=1e-3, eval_every=2, eval_toy_size=8, eval_n=2)
    every = train.train(toy_config(tmp_path / "every", **base), sampler)
    late = train.train(toy_config(tmp_path / "late", eval_from=5, **base), sampler)
    evaluated = lambda folder: [r["update"] for r in map(json.loads, open(folder / "metrics.jsonl"))
                                if "eval/toy/mean@2" in r]
    assert evaluated(tmp_path / "every") == [0, 2, 4, 6, 8] and evaluated(tmp_path / "late") == [0, 6, 8]
    schedule = lambda **kw: [t for t in range(kw["updates"] + 1) if train.evaluated_at(kw, t)]
    assert schedule(**{**base, "eval_from": 5}) == [0, 6, 8]  # what the loop did, from the rule alone
    assert schedule(updates=7, eval_every=3, eval_from=4) == [0, 6, 7]  # the last update, off the grid
    assert schedule(updates=7, eval_every=0, eval_from=0) == []
    records = lambda folder: [r for r in map(json.loads, open(folder / "eval_records.jsonl"))
                              if r["update"] in (0, 6, 8)]
    assert records(tmp_path / "every") == records(tmp_path / "late")
    train_part = lambda r: json.dumps({k: v for k, v in r.items()
                                       if not k.startswith(("time/", "eval/"))}, sort_keys=True)
    assert [train_part(r) for r in every] == [train_part(r) for r in late]


def test_stop_strings_cut_the_text_before_grading(tmp_path, sampler, toy_model):
    """A stop string ends the text that is graded (a base model's invented next problem would be
    cut the same way); the tokens and log-probs keep what was sampled."""
    import rollout
    cfg = toy_config(tmp_path, prompts_per_update=8, group_size=4, stop_strings=[])
    sampler.sync(learner.load_learner({**cfg, "model": toy_model}), 0)
    whole, _ = rollout.sample_batch(cfg, sampler, 0)
    cut, _ = rollout.sample_batch({**cfg, "stop_strings": ["}"]}, sampler, 0)
    assert sum(whole.rewards) > 0 and sum(cut.rewards) == 0
    closed = [i for i, r in enumerate(whole.rollouts) if "}" in r.text]
    assert closed
    for i in closed:
        assert cut.rollouts[i].text == whole.rollouts[i].text.split("}")[0]
        assert cut.rollouts[i].finished
        n = len(cut.rollouts[i].response_ids)
        assert cut.rollouts[i].response_ids == whole.rollouts[i].response_ids[:n]
        assert len(cut.rollouts[i].behavior_logp) == n
    # the default cuts where a base model would begin the next problem of the math template
    assert config.load_config(None)["stop_strings"] == ["\nQuestion:"]
    assert tasks.MATH_TEMPLATE.startswith("Question:")


def test_the_shipped_toy_base_model_is_checked_by_its_hash(tmp_path):
    """Every machine trains from the same toy base model: the shipped weights match their hash
    and the current recipe (so nothing rebuilds them), and altered weights are refused."""
    import json
    info = json.load(open(os.path.join(tasks.TOY_BASE, "build_info.json")))
    assert tasks.weights_sha256(tasks.TOY_BASE) == info["sha256"] == tasks.TOY_BASE_SHA256
    recipe = json.loads(json.dumps({"model": tasks.TOY_MODEL, "warmup": tasks.TOY_WARMUP}))
    assert {"model": info["model"], "warmup": info["warmup"]} == recipe
    assert config.load_config(None)["model"] == "toy_base"
    altered = altered_copy(tasks.TOY_BASE, tmp_path)
    with pytest.raises(ValueError, match="is not the model its build_info.json names"):
        train.preflight(toy_config(tmp_path / "run", model=altered))


def test_onednn_linear_matches_torch_linear():
    """The learner's oneDNN linear layer (cpu_matmul=onednn): output and the gradients of input,
    weight and bias equal nn.Linear's within float32 rounding (1e-5 of each tensor's largest entry),
    and a bias-free layer, as in Qwen3, gives no bias gradient."""
    torch.manual_seed(0)
    for bias in (True, False):
        plain = torch.nn.Linear(64, 48, bias=bias)
        ours = torch.nn.Linear(64, 48, bias=bias)
        ours.load_state_dict(plain.state_dict())
        cpu.use_onednn_linears(ours)
        assert type(ours) is cpu.OneDNNLinear
        x = torch.randn(3, 7, 64)
        upstream = torch.randn(3, 7, 48)
        grads = []
        for layer in (plain, ours):
            xi = x.clone().requires_grad_(True)
            y = layer(xi)
            (y * upstream).sum().backward()
            grads.append([y.detach(), xi.grad, layer.weight.grad] + ([layer.bias.grad] if bias else []))
        for a, b in zip(*grads):
            assert a.shape == b.shape
            assert (a - b).abs().max() <= 1e-5 * a.abs().max()
