"""The learner: building the policy, the reference and the optimizer, precision, sequence packing,
and the log-probs of response tokens.

`response_logp(model, batch_inputs(rollouts, ...))` gives the [B, T] token log-probs of the
responses under a transformers model; the output layer and the softmax run on response tokens
only. Weights stay in `dtype` (float32); `autocast` sets the forward's precision.
"""
import contextlib
import itertools
import os
import shutil
import time

import torch
import torch.utils.checkpoint
from transformers import AutoModelForCausalLM

import cpu
import losses


class DeviceUnavailable(RuntimeError):
    """A GPU is expected (device=cuda, or an NVIDIA GPU is present) but torch cannot use it."""


def pick_device(cfg: dict) -> str:
    """"cuda" or "cpu" for the learner, per cfg["device"]. Refuses to fall back to the CPU when a
    GPU is expected: a 1.7B learner would run there for weeks without saying why."""
    if cfg["device"] == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    present = shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidiactl")
    if cfg["device"] == "auto" and not present:
        return "cpu"
    build = (f"a CUDA {torch.version.cuda} build" if torch.version.cuda else
             "a CPU-only build; `pip install torch==2.13.0` from PyPI gives the CUDA 13.0 one")
    raise DeviceUnavailable(
        f"device={cfg['device']}: {'an NVIDIA GPU is present' if present else 'a GPU is expected'}, "
        f"but torch {torch.__version__} cannot use it (torch.cuda.is_available() is False; this "
        f"torch is {build}). The pinned stack (torch 2.13.0, CUDA 13.0) needs an NVIDIA driver of "
        f"branch 580 or newer: check the driver version with `nvidia-smi` and update it, or "
        f"install a torch build that matches your driver. To run on the CPU on purpose, set "
        f"device=cpu.")


def autocast(cfg: dict):
    """The learner's forward precision: `autocast` (e.g. bfloat16 on GPU) over `dtype` weights.

    Weights, gradients and AdamW states stay in `dtype` (float32): a 1e-6 step is below bf16's
    resolution for weights of size ~1e-2, so pure-bf16 weights would silently not train.
    """
    if not cfg["autocast"]:
        return contextlib.nullcontext()
    return torch.autocast(pick_device(cfg), dtype=getattr(torch, cfg["autocast"]))


def load_learner(cfg: dict):
    """The Hugging Face model at cfg["model"], in `dtype`, on the GPU when there is one."""
    dtype = getattr(torch, cfg["dtype"])
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=dtype).to(pick_device(cfg))
    if cpu.cpu_matmul_backend(cfg["cpu_matmul"])[0] == "onednn":
        cpu.use_onednn_linears(model)
    check_output_layer(model)
    if cfg["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    return model


def build_learner(cfg: dict) -> tuple:
    """(model, ref_model, optimizer): the policy in train mode, the frozen reference (None for
    objectives that never read it: no second copy of the model), and AdamW over the policy."""
    model = load_learner(cfg).train()
    ref_model = (load_learner(cfg).eval().requires_grad_(False)
                 if losses.objective(cfg["loss"]).needs_ref else None)
    # fused: one kernel for all parameters instead of a loop over them (faster on the CPU)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=tuple(cfg["adam_betas"]),
                                  weight_decay=cfg["weight_decay"], fused=True)
    return model, ref_model, optimizer


def check_output_layer(model) -> None:
    """Refuse a model whose logits are not its output layer applied to its decoder's last hidden
    state (e.g. soft-capped or scaled logits): response_logp computes them that way."""
    device = next(model.parameters()).device
    ids = torch.arange(2, 10, device=device)[None] % model.config.vocab_size
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        ours = model.get_output_embeddings()(model.get_decoder()(input_ids=ids, use_cache=False)
                                             .last_hidden_state)
    if not torch.allclose(full.float(), ours.float(), rtol=1e-3, atol=1e-3):
        raise ValueError(f"{type(model).__name__}: logits are not the output layer applied to the "
                         f"decoder's last hidden state; learner.response_logp needs them to be")


def pack(lengths: list, width: int) -> tuple:
    """First-fit decreasing: the (row, offset) of each sequence in rows of `width` tokens, and
    the number of rows."""
    place, free = [None] * len(lengths), []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, f in enumerate(free) if f >= lengths[i]), len(free))
        if row == len(free):
            free.append(width)
        place[i] = (row, width - free[row])
        free[row] -= lengths[i]
    return place, len(free)


def batch_inputs(rollouts: list, pad_id: int, hidden_size: int, may_pack: bool = True,
                 may_share: bool = False) -> dict:
    """The tensors response_logp needs for these rollouts: the sequences (prompt + response),
    one per row right-padded, or (may_pack) packed several to a row, or (may_share) each group's
    prompt once with its responses after it (shared_prompt_inputs), whichever costs least.

    ids [rows, width]: the tokens. position_ids: None for one sequence per row (plain causal
    attention; a pad is never attended to by the real tokens before it); for packed rows the
    positions restart at 0 with each sequence, which makes transformers attend within each
    sequence only (pads, position 0 each, attend to themselves alone). mask [B, T]: response
    tokens, T the longest response; rows, cols: their places in mask (row-major); at: the flat
    index in ids of the position that predicts each of them (response token j of a sequence
    whose prompt has length P is predicted at position P - 1 + j of the sequence); targets:
    the tokens themselves.

    Cost of a layout, in token slots: rows x width x (1 + width / (7.5 d)), d = hidden_size,
    because attention spans a whole row (per token and layer about 4 width d flops against
    about 30 d^2 for the matrix products), and x 1.05 for packed rows, whose attention needs an
    explicit mask (slower than plain causal at equal shapes: docs/speed.md).
    """
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in rollouts]
    longest = max(lengths)
    cost = lambda n_rows, width: n_rows * width * (1 + width / (7.5 * hidden_size))
    layouts = [(cost(len(lengths), longest), "rows", longest,
                [(i, 0) for i in range(len(lengths))], len(lengths))]
    for width in (2 * longest, 4 * longest) if may_pack else ():
        place, n_rows = pack(lengths, width)
        layouts.append((1.05 * cost(n_rows, width), "rows", width, place, n_rows))
    groups = prompt_groups(rollouts) if may_share else []
    if 0 < len(groups) < len(rollouts):
        units = [len(rollouts[a].prompt_ids) + sum(len(r.response_ids) for r in rollouts[a:b])
                 for a, b in groups]
        for width in (max(units), 2 * max(units)):
            place, n_rows = pack(units, width)
            layouts.append((1.05 * cost(n_rows, width), "shared", width, place, n_rows))
    _, kind, width, place, n_rows = min(layouts, key=lambda layout: layout[0])
    if kind == "shared":
        return shared_prompt_inputs(rollouts, pad_id, groups, place, n_rows, width)
    length = torch.tensor(lengths)
    start = torch.tensor([row * width + offset for row, offset in place])  # in the flat rows
    seq = torch.repeat_interleave(torch.arange(len(lengths)), length)   # sequence of each token
    offset = torch.arange(int(length.sum())) - (torch.cumsum(length, 0) - length)[seq]
    ids = torch.full((n_rows * width,), pad_id, dtype=torch.long)
    ids[start[seq] + offset] = torch.tensor(
        list(itertools.chain.from_iterable(r.prompt_ids + r.response_ids for r in rollouts)))
    position_ids = None
    if n_rows < len(lengths):
        position_ids = torch.zeros(n_rows * width, dtype=torch.long)
        position_ids[start[seq] + offset] = offset
        position_ids = position_ids.view(n_rows, width)
    prompt_len = torch.tensor([len(r.prompt_ids) for r in rollouts])
    mask, rows, cols = response_places(rollouts)
    at = start[rows] + prompt_len[rows] - 1 + cols
    return {"ids": ids.view(n_rows, width), "position_ids": position_ids, "attention_mask": None,
            "mask": mask, "rows": rows, "cols": cols, "at": at, "targets": ids[at + 1]}


def response_places(rollouts: list) -> tuple:
    """mask [B, T] of the response tokens (T the longest response), and their (row, col) places
    in it, row-major: the order of the responses' tokens one after the other."""
    resp_len = torch.tensor([len(r.response_ids) for r in rollouts])
    mask = torch.arange(int(resp_len.max())) < resp_len[:, None]
    rows, cols = mask.nonzero(as_tuple=True)
    return mask, rows, cols


def prompt_groups(rollouts: list) -> list:
    """(first, end) of each run of consecutive rollouts with the same prompt (a GRPO group)."""
    starts = [i for i in range(len(rollouts))
              if i == 0 or rollouts[i].prompt_ids != rollouts[i - 1].prompt_ids]
    return list(zip(starts, starts[1:] + [len(rollouts)]))


def shared_prompt_inputs(rollouts: list, pad_id: int, groups: list, place: list, n_rows: int,
                         width: int) -> dict:
    """batch_inputs with each group's prompt once: a group's unit is [prompt, response 1, ...,
    response m] at `place` (row, offset) in rows of `width` tokens. Response i sees the prompt
    and itself (an explicit [rows, 1, width, width] attention mask; positions continue from the
    prompt's in each response), so every response token has the context, position and hence
    log-prob it has alone after its prompt, while the group's forward pass runs over the
    prompt once instead of m times (the gradient through the prompt sums the m responses'
    contributions, as m copies would). Response token j is predicted at the prompt's last
    position (j = 0) or at its own token j - 1."""
    # per token, in unit order: its flat index in the rows, id, position, block (the prompt or
    # one response) and the block it also sees (a response's prompt; -2: none)
    flat, tokens, positions, blocks, parents, at, n_blocks = [], [], [], [], [], [], 0
    for (first, end), (row, offset) in zip(groups, place):
        prompt = rollouts[first].prompt_ids
        P, start, prompt_block = len(prompt), row * width + offset, n_blocks
        tokens += prompt
        positions += range(P)
        blocks += [prompt_block] * P
        parents += [-2] * P
        pos = start + P
        for r in rollouts[first:end]:
            n_blocks, n = n_blocks + 1, len(r.response_ids)
            tokens += r.response_ids
            positions += range(P, P + n)
            blocks += [n_blocks] * n
            parents += [prompt_block] * n
            at += ([start + P - 1] if n else []) + list(range(pos, pos + n - 1))
            pos += n
        flat += range(start, pos)
        n_blocks += 1
    index = torch.tensor(flat, dtype=torch.long)

    def rows_of(values: list, fill: int):  # pads: pad_id, position 0, block -1 (among themselves)
        out = torch.full((n_rows * width,), fill, dtype=torch.long)
        out[index] = torch.tensor(values, dtype=torch.long)
        return out.view(n_rows, width)

    ids, position = rows_of(tokens, pad_id), rows_of(positions, 0)
    block, parent = rows_of(blocks, -1), rows_of(parents, -2)
    k_block = block[:, None, :]
    causal = torch.arange(width)[:, None] >= torch.arange(width)[None, :]
    attend = causal & ((block[:, :, None] == k_block) | (parent[:, :, None] == k_block))
    mask, rows, cols = response_places(rollouts)
    targets = torch.tensor(list(itertools.chain.from_iterable(r.response_ids for r in rollouts)),
                           dtype=torch.long)
    return {"ids": ids, "position_ids": position, "attention_mask": attend[:, None],
            "mask": mask, "rows": rows, "cols": cols, "at": torch.tensor(at, dtype=torch.long),
            "targets": targets}


def response_logp(model, inputs: dict, with_entropy: bool = False, chunk_tokens: int = 0,
                  temperature: float = 1.0):
    """Token log-probs of the responses under `model` at `temperature`: ([B, T] logp, [B, T]
    float mask, entropy sum or None); `inputs` from batch_inputs, on the model's device.

    temperature T: the log-probs and the entropy are those of softmax(logits / T), the
    distribution the sampler draws from at T (its behavior log-probs are of that one too), so
    that rho = exp(logp - behavior_logp) compares like with like at any temperature.

    The output layer and the softmax run on the response tokens only, not on prompts and
    padding (with a 150k vocabulary those would dominate time and memory); check_output_layer
    makes sure that is what the model's own forward computes. With chunk_tokens > 0 they run on
    at most chunk_tokens tokens at a time, and under autograd each chunk is recomputed in the
    backward pass (torch.utils.checkpoint), so the memory of the logits is that of one chunk,
    not (response tokens x vocabulary): the same values and gradients up to float rounding.
    """
    hidden = model.get_decoder()(input_ids=inputs["ids"], position_ids=inputs["position_ids"],
                                 attention_mask=inputs["attention_mask"],
                                 use_cache=False).last_hidden_state
    h = hidden.flatten(0, 1)[inputs["at"]]
    head, targets, n = model.get_output_embeddings(), inputs["targets"], h.size(0)
    size = chunk_tokens if 0 < chunk_tokens < n else n
    recompute = size < n and torch.is_grad_enabled() and h.requires_grad
    parts = []
    for i in range(0, n, size):
        args = (head, h[i:i + size], targets[i:i + size], with_entropy, temperature)
        parts.append(torch.utils.checkpoint.checkpoint(token_logp, *args, use_reentrant=False)
                     if recompute else token_logp(*args))
    flat = torch.cat([lp for lp, _ in parts]) if len(parts) > 1 else parts[0][0]
    mask = inputs["mask"]
    logp = torch.zeros(mask.shape, dtype=flat.dtype, device=flat.device).index_put(
        (inputs["rows"], inputs["cols"]), flat)
    entropy_sum = sum(ent for _, ent in parts) if with_entropy else None
    return logp, mask.to(flat.dtype), entropy_sum


def token_logp(head, h, targets, with_entropy: bool, temperature: float = 1.0) -> tuple:
    """log softmax(head(h) / T)[targets] per token, in float32, and the sum of the tokens'
    entropies of that distribution (no gradient; None unless with_entropy)."""
    logits = head(h).float()
    if temperature != 1.0:  # skipped at T = 1, where dividing changes nothing
        logits = logits / temperature
    logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
    entropy_sum = None
    if with_entropy:
        with torch.no_grad():
            entropy_sum = losses.entropy_from_logits(logits, torch.ones_like(logp)) * logp.numel()
    return logp, entropy_sum


def model_inputs(model, rollouts: list, pad_id: int) -> dict:
    """batch_inputs for `model`, on its device. sdpa and eager attention keep packed sequences
    apart (a mask built from the position ids); flash-attention does so only for one row. Shared
    prompts need sdpa (it takes their explicit boolean mask as it is; eager would add it). Both
    are used on the CPU only: on a GPU their per-sequence mask rules out the flash kernel, and
    the 1.05 cost factor of batch_inputs was measured on CPU; on a GPU that trade is unmeasured."""
    device = next(model.parameters()).device
    attention = model.config._attn_implementation
    inputs = batch_inputs(rollouts, pad_id, model.config.hidden_size,
                          may_pack=attention in ("sdpa", "eager") and device.type == "cpu",
                          may_share=attention == "sdpa" and device.type == "cpu")
    return {k: v if v is None else v.to(device) for k, v in inputs.items()}


@torch.no_grad()
def rollout_logp(cfg: dict, model, rollouts: list, pad_id: int) -> list:
    """Each rollout's response token log-probs under `model` at the sampling temperature (lists
    of floats), in micro-batches of micro_batch_size under the learner's autocast: the learner's own view of the behavior
    policy when `model` holds the weights that sampled the rollouts."""
    out, chunk = [], chunk_tokens(cfg, model)
    for start in range(0, len(rollouts), cfg["micro_batch_size"]):
        part = rollouts[start:start + cfg["micro_batch_size"]]
        with autocast(cfg):
            logp, _, _ = response_logp(model, model_inputs(model, part, pad_id), chunk_tokens=chunk,
                                       temperature=cfg["temperature"])
        out += ragged(logp, part)
    return out


def response_grad_sq(cfg: dict, model, rollouts: list, pad_id: int) -> torch.Tensor:
    """Per rollout, G_i = ||grad_theta sum_t log pi(y_t)||^2 under `model` at the sampling
    temperature and the learner's autocast: [B] float64 (VCPO's baseline weighs each response by
    it). One forward and one backward pass per micro-batch (ghost_grad_sq) where every module
    with trainable parameters is one ghost_grad_sq knows; otherwise one pair per response
    (response_grad_sq_loop). p.grad is left as it was."""
    kinds = ghost_modules(model)
    if kinds is None:
        return response_grad_sq_loop(cfg, model, rollouts, pad_id)
    mb = cfg["micro_batch_size"]
    return torch.cat([ghost_grad_sq(cfg, model, rollouts[i:i + mb], pad_id, kinds)
                      for i in range(0, len(rollouts), mb)])


def response_grad_sq_loop(cfg: dict, model, rollouts: list, pad_id: int) -> torch.Tensor:
    """response_grad_sq by one forward and one backward pass per response: any architecture."""
    params = [p for p in model.parameters() if p.requires_grad]
    out, chunk = [], chunk_tokens(cfg, model)
    for r in rollouts:
        with autocast(cfg):
            logp, mask, _ = response_logp(model, model_inputs(model, [r], pad_id), chunk_tokens=chunk,
                                          temperature=cfg["temperature"])
        grads = torch.autograd.grad((logp * mask).sum(), params, allow_unused=True)
        out.append(sum(g.double().pow(2).sum() for g in grads if g is not None))
    return torch.stack(out)


# RMSNorm classes whose forward is weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x.dtype), x32 = x
# in float32: the per-sample gradient of their weight is recomputed from their input
RMS_NORMS = ("Qwen3RMSNorm", "Qwen2RMSNorm", "LlamaRMSNorm")


def ghost_modules(model):
    """{module: kind} of every module that holds trainable parameters, kind "linear", "embedding"
    or "rms_norm"; None if one is of another kind, or if a parameter is shared other than as a
    tied input embedding and bias-free output layer (ghost_grad_sq knows no other)."""
    kinds, users = {}, {}
    for module in model.modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        if isinstance(module, torch.nn.Linear):
            kinds[module] = "linear"
        elif isinstance(module, torch.nn.Embedding):
            kinds[module] = "embedding"
        elif type(module).__name__ in RMS_NORMS and [n for n, _ in module.named_parameters(recurse=False)] == ["weight"]:
            kinds[module] = "rms_norm"
        else:
            return None
        for p in own:
            users.setdefault(id(p), []).append(module)
    for shared in (u for u in users.values() if len(u) > 1):
        if sorted(kinds[m] for m in shared) != ["embedding", "linear"] or \
                any(kinds[m] == "linear" and m.bias is not None for m in shared):
            return None
    return kinds


def ghost_grad_sq(cfg: dict, model, rollouts: list, pad_id: int, kinds: dict) -> torch.Tensor:
    r"""response_grad_sq of one micro-batch by per-sample ("ghost") norms: one forward pass, one
    backward pass to the activations only (no parameter gradient is formed), and per module the
    exact per-response norm of its parameters' gradient from its input a and its output's
    gradient g (response i's tokens t, s; products in the weights' precision, sums in float64):

        linear weight:  ||sum_t g_t a_t^T||^2 = sum_{t,s} (a_t . a_s)(g_t . g_s)   (or the outer
                        product itself, whichever is cheaper);  bias: ||sum_t g_t||^2
        embedding:      sum_{t,s: id_t = id_s != padding_idx} g_t . g_s
        RMSNorm weight: ||sum_t g_t * u_t||^2, u the normalized input as the module computes it
        tied embedding and output layer W: ||E + H||^2 = ||E||^2 + ||H||^2 + 2 <E, H>, with
        <E, H> = sum_s e_s . H[id_s], H[v] = sum_t g_{t,v} h_t (h the head's input)

    and G_i the sum over modules. Each sequence gets its own row (no packing, no shared prompt:
    a shared prompt's activations would carry several responses' gradients). The output layer
    runs on all response tokens at once (no logits chunks). Memory: that of a backward pass
    without parameter gradients, plus per module two [B, L, L] Gram matrices (L the row width)
    or one [B, d_out, d_in] outer product, and for a tied head [B, L, d]. kinds: ghost_modules
    of the model."""
    device = next(model.parameters()).device
    inputs = batch_inputs(rollouts, pad_id, model.config.hidden_size, may_pack=False, may_share=False)
    inputs = {k: v if v is None else v.to(device) for k, v in inputs.items()}
    B, ids = len(rollouts), inputs["ids"]
    total = torch.zeros(B, dtype=torch.float64, device=device)
    embedding = model.get_input_embeddings()
    tied = {m for m, kind in kinds.items() if kind == "linear" and m.weight is embedding.weight}
    head_rows = {}  # for a tied head: H[id_s] per sequence position, [B, L, d]
    calls, embedding_out = {}, []

    def per_sample(x):  # [B, L, ...] rows already, or the head's [n, d] response tokens -> [B, T, d]
        if x.dim() >= 3 and x.size(0) == B:
            return x.reshape(B, -1, x.size(-1))
        out = x.new_zeros((B, inputs["mask"].size(1), x.size(-1)))
        return out.index_put((inputs["rows"], inputs["cols"]), x)

    def gram_dot(a, g):  # sum_{t,s} (a_t . a_s)(g_t . g_s) per sample, or via the outer product
        L, g = a.size(1), g.to(a.dtype)
        if L * L * (a.size(2) + g.size(2)) <= L * a.size(2) * g.size(2):
            return (a @ a.transpose(1, 2) * (g @ g.transpose(1, 2))).sum((1, 2), dtype=torch.float64)
        return (g.transpose(1, 2) @ a).pow(2).sum((1, 2), dtype=torch.float64)

    def on_grad(module, x, grad):
        nonlocal total
        kind, g = kinds[module], per_sample(grad)
        if kind == "linear":
            a = per_sample(x)
            total = total + gram_dot(a, g)
            if module.bias is not None:
                total = total + g.sum(1).pow(2).sum(1, dtype=torch.float64)
            if module in tied:  # H[id_s] = sum_t g_{t, id_s} h_t, for <E, H> at the embedding
                picked = g.gather(2, ids[:, None, :].expand(B, g.size(1), ids.size(1)))
                head_rows["H"] = picked.transpose(1, 2) @ a
        elif kind == "embedding":
            real = (ids != module.padding_idx) if module.padding_idx is not None else torch.ones_like(ids, dtype=torch.bool)
            same = (ids[:, :, None] == ids[:, None, :]) & real[:, :, None] & real[:, None, :]
            total = total + (same * (g @ g.transpose(1, 2))).sum((1, 2), dtype=torch.float64)
            if "H" in head_rows:
                total = total + 2 * (head_rows.pop("H").to(g.dtype) * g * real[:, :, None]).sum(
                    (1, 2), dtype=torch.float64)
        else:
            x32 = x.to(torch.float32)
            u = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)).to(x.dtype)
            total = total + (g * per_sample(u)).sum(1).pow(2).sum(1, dtype=torch.float64)

    def on_forward(module, args, output):
        calls[module] = calls.get(module, 0) + 1
        if module is embedding:
            embedding_out.append(output)
        if output.requires_grad:
            x = args[0].detach()
            output.register_hook(lambda grad: on_grad(module, x, grad))

    handles = [m.register_forward_hook(on_forward) for m in kinds]
    try:
        with autocast(cfg):
            logp, mask, _ = response_logp(model, inputs, chunk_tokens=0, temperature=cfg["temperature"])
        if any(n != 1 for n in calls.values()) or len(calls) != len(kinds):
            raise RuntimeError("ghost_grad_sq: a module with parameters ran other than once in the "
                               "forward pass; use response_grad_sq_loop")
        torch.autograd.grad((logp * mask).sum(), embedding_out)  # the hooks add up `total`
    finally:
        for h in handles:
            h.remove()
    return total.cpu()


def ragged(logp, rollouts: list) -> list:
    """[B, T] response log-probs as one list of floats per rollout, padding dropped."""
    return [row[:len(r.response_ids)] for row, r in zip(logp.tolist(), rollouts)]


def fresh_behavior(cfg: dict, model, batch, pad_id: int) -> dict:
    """A batch just sampled, while the learner holds the weights that sampled it: the learner's
    log-probs of its tokens replace the engine's when behavior_logp=learner; returns their
    mismatch with the engine's (engine_mismatch)."""
    learner_logp = rollout_logp(cfg, model, batch.rollouts, pad_id)
    metrics = engine_mismatch([r.behavior_logp for r in batch.rollouts], learner_logp)
    adopt_learner_view(cfg, batch.rollouts, learner_logp)
    return metrics


def needs_fresh_behavior(cfg: dict, batch_index: int) -> bool:
    """Whether sampled batch `batch_index` (N > 0) takes fresh_behavior's learner pass: always when
    the learner's view replaces the engine's log-probs or the objective reads it (old_logp);
    otherwise only for the engine_mismatch diagnostic, every engine_mismatch_every-th batch."""
    every = cfg["engine_mismatch_every"]
    return (cfg["behavior_logp"] == "learner" or losses.objective(cfg["loss"]).reads_old_logp
            or (every > 0 and batch_index % every == 0))


def adopt_learner_view(cfg: dict, rollouts: list, learner_logp: list) -> None:
    """behavior_logp=learner: the rollouts' behavior log-probs become `learner_logp`, their
    tokens' log-probs under the learner holding the weights that sampled them. An objective
    that reads them beside the engine's (its Objective's reads_old_logp: icepop) keeps them as old_logp."""
    keep_old = losses.objective(cfg["loss"]).reads_old_logp
    for r, lp in zip(rollouts, learner_logp):
        if cfg["behavior_logp"] == "learner":
            r.behavior_logp = lp
        if keep_old:
            r.old_logp = lp


def engine_mismatch(engine_logp: list, learner_logp: list) -> dict:
    """The engine-vs-learner mismatch of the same tokens under the same weights, apart from
    staleness: engine_k3 = token-mean of (rho - 1) - log rho, rho = exp(learner - engine
    log-prob), and engine_logp_diff_max = max |learner - engine|; ~0 only if the two compute
    alike. Arguments: one list of floats per rollout."""
    T = max(len(lp) for lp in learner_logp)
    engine, ours = padded(engine_logp, T, "cpu"), padded(learner_logp, T, "cpu")
    mask = padded([[1.0] * len(lp) for lp in learner_logp], T, "cpu")
    return {"engine_k3": float(losses.k3(ours, engine, mask)),
            "engine_logp_diff_max": float(((ours - engine).abs() * mask).max())}


def chunk_tokens(cfg: dict, model) -> int:
    """Response tokens per output-layer chunk: logits_chunk_mib of float32 logits (0: no chunks)."""
    if cfg["logits_chunk_mib"] <= 0:
        return 0
    return max(1, int(cfg["logits_chunk_mib"] * 2 ** 20) // (4 * model.config.vocab_size))


def padded(rows: list, T: int, device):
    """Ragged rows of floats as a [len(rows), T] float32 tensor, right-padded with zeros."""
    lengths = torch.tensor([len(row) for row in rows])
    out = torch.zeros((len(rows), T), dtype=torch.float32)
    out[torch.arange(T) < lengths[:, None]] = torch.tensor(
        list(itertools.chain.from_iterable(rows)), dtype=torch.float32)
    return out.to(device)


def clock(device=None) -> float:
    """perf_counter once `device` has done its queued work (None: at once)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


@contextlib.contextmanager
def timed(times: dict, key: str, device=None):
    """Add the block's wall seconds to times[key]; on a CUDA device, once its queued work is done
    (kernels run asynchronously, so a phase's time is only its own after a synchronize)."""
    t0 = clock(device)
    yield
    times[key] = times.get(key, 0.0) + clock(device) - t0


class NonFiniteForward(FloatingPointError):
    """NaN/inf log-probs from the learner's or the reference's forward pass."""


def check_finite_forward(logp, ref_logp) -> None:
    """Raise NonFiniteForward before a non-finite forward pass reaches the loss (whose inputs
    check refuses NaN): train.learn_or_skip skips the update, as for a non-finite gradient."""
    for name, x in (("learner", logp), ("reference", ref_logp)):
        if x is not None and not bool(torch.isfinite(x).all()):
            raise NonFiniteForward(f"the {name}'s forward pass gave non-finite log-probs")
