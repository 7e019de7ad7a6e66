"""The fast decode path of `TorchEngine` (and of its continuous decode, `rlvr.engines.stream`):
a Llama-family decode step on the model's own modules.

How it is fast. Hugging Face `generate` recomputes a shared prompt G times and, per step,
re-concatenates the whole KV cache (`DynamicCache` grows by `torch.cat`), rebuilds a 4-D
mask and runs a stack of generic logits processors. For Llama-family models (llama, qwen2,
qwen3, mistral without sliding window) the engine instead runs its own decode step on the
model's own modules (norms, projections, MLP, rotary):
* the prompt KV is kept once per *unique* prompt ([U, kv_heads, L, d]) and each group's G
  slots attend to it with one batched matmul — no copy of the prompt KV per sample;
* the generated part of the KV lives in a per-slot buffer written in place (allocated in
  blocks that double when full, never per step);
* the two attention parts are merged with the log-sum-exp trick (as flash-decoding does);
* the prompt is prefilled right-padded with a causal SDPA (no padding mask needed; each
  group's decode masks its own padding), reusing a prefix's KV from the prefix cache
  (`rlvr.engines.prefix_cache`) where one serves;
* on small models q/k/v and gate/up run as single matmuls and RMSNorm as one op (a decode
  step of a tiny model is bound by per-op overhead, not FLOPs).
Which slots decode (grouping, compaction) is the engine's; this module is the arithmetic.
"""
from __future__ import annotations

import sys
from typing import Sequence

import torch
import torch.nn.functional as F

from rlvr.engines.prefix_cache import CacheEntry

FAST_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Fuse q/k/v and gate/up into single matmuls (a weight copy per generate call) only for
# models this small, where per-op overhead, not FLOPs, bounds a decode step.
FUSE_MAX_PARAMS = 200_000_000
# Generated-token KV buffers start this long and double when full (no per-step allocation).
SUFFIX_BLOCK = 256
# A prefill chunk whose suffix queries attend to reused KV needs an explicit mask of
# n x suffix x total positions; keep it within this multiple of `prefill_chunk_tokens`.
MASKED_CHUNK_FACTOR = 2048


class FastDecoder:
    """Llama-family decode with a shared prompt KV per unique prompt (the module docstring)."""

    @staticmethod
    def supports(model) -> bool:
        cfg = model.config
        if getattr(cfg, "model_type", None) not in FAST_MODEL_TYPES:
            return False
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
            return False
        if getattr(cfg, "use_sliding_window", False) or (
                cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None)):
            return False
        inner = getattr(model, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if inner is None or not all(hasattr(inner, a) for a in needed) \
                or not hasattr(model, "lm_head"):
            return False
        attn = inner.layers[0].self_attn
        return all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling",
                                              "head_dim"))

    def __init__(self, model, chunk_tokens: int):
        inner = model.model
        cfg = model.config
        p = next(model.parameters())
        self.dev, self.dtype = p.device, p.dtype
        self.embed, self.rotary, self.lm_head = inner.embed_tokens, inner.rotary_emb, model.lm_head
        attn = inner.layers[0].self_attn
        self.rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.d, self.scale = attn.head_dim, attn.scaling
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.rep = self.nh // self.nkv
        self.chunk_tokens = chunk_tokens
        fuse = sum(q.numel() for q in model.parameters()) <= FUSE_MAX_PARAMS
        self.layers = [LayerPlan(layer, fuse, self.dtype) for layer in inner.layers]
        self.norm = _rms_norm(inner.norm, self.dtype)

    def qkv(self, plan: "LayerPlan", x: torch.Tensor, shape: tuple[int, ...]):
        """Layer input -> q [*shape, nh, d], k and v [*shape, nkv, d], before rotary."""
        q, k, v = plan.qkv(plan.ln1(x))
        q = q.view(*shape, self.nh, self.d)
        k = k.view(*shape, self.nkv, self.d)
        v = v.view(*shape, self.nkv, self.d)
        if plan.q_norm is not None:
            q, k = plan.q_norm(q), plan.k_norm(k)
        return q, k, v

    def prefill(self, prompts: list[list[int]],
                prefixes: Sequence[tuple[CacheEntry | None, int]]) -> torch.Tensor:
        """KV of every prompt into Kp (right-padded) and the logits after its last token.
        `prefixes[u]` = (cache entry, c): the first c tokens of prompt u share the entry's
        tokens, so their KV is copied and only the rest is computed."""
        U = len(prompts)
        lens = torch.tensor([len(p) for p in prompts])
        L = int(lens.max())
        self.lens = lens.to(self.dev)
        self.Kp = [torch.zeros(U, self.nkv, L, self.d, dtype=self.dtype, device=self.dev)
                   for _ in self.layers]
        self.Vp = [torch.zeros_like(k) for k in self.Kp]
        cached = [c for _, c in prefixes]
        for u, (entry, c) in enumerate(prefixes):
            if c:
                for layer, (Kp, Vp) in enumerate(zip(self.Kp, self.Vp)):
                    Kp[u, :, :c] = entry.k[layer, :, :c]
                    Vp[u, :, :c] = entry.v[layer, :, :c]
        logits = None
        suffix = [len(p) - c for p, c in zip(prompts, cached)]
        order = sorted(range(U), key=lambda i: -suffix[i])
        start = 0
        while start < U:  # chunks of similar suffix length (sorted), bounded work
            idx = self._chunk(order, start, suffix, lens.tolist(), cached)
            start += len(idx)
            chunk_logits = self._prefill_chunk([prompts[i] for i in idx],
                                               [cached[i] for i in idx], idx)
            if logits is None:
                logits = chunk_logits.new_empty(U, chunk_logits.shape[-1])
            logits[torch.tensor(idx, device=self.dev)] = chunk_logits
        keypos = torch.arange(L, device=self.dev)
        self.bias = torch.zeros(U, 1, 1, L, dtype=torch.float32, device=self.dev).masked_fill_(
            (keypos[None, :] >= self.lens[:, None])[:, None, None, :], float("-inf"))
        return logits

    def _chunk(self, order, start, suffix, lens, cached) -> list[int]:
        """The next prompts of `order` for one prefill: padded suffix tokens within
        `chunk_tokens` and, where reused KV needs an explicit mask, its size within
        MASKED_CHUNK_FACTOR times that."""
        Sc = suffix[order[start]]
        n, Lc, masked = 1, lens[order[start]], cached[order[start]] > 0
        while start + n < len(order) and (n + 1) * Sc <= self.chunk_tokens:
            i = order[start + n]
            Lc2, masked2 = max(Lc, lens[i]), masked or cached[i] > 0
            if masked2 and (n + 1) * Sc * Lc2 > self.chunk_tokens * MASKED_CHUNK_FACTOR:
                break
            n, Lc, masked = n + 1, Lc2, masked2
        return order[start:start + n]

    def _prefill_chunk(self, prompts, cached, idx) -> torch.Tensor:
        """Prefill the uncached suffix of n prompts (rows idx of Kp); logits [n, V]. With no
        reused KV this is a plain causal SDPA over the prompts; otherwise suffix query j of
        row r (position c_r + j) attends to keys 0..c_r + j of its row of Kp, which holds the
        reused KV and, written layer by layer, the suffix's own."""
        n = len(prompts)
        suf = [len(p) - c for p, c in zip(prompts, cached)]
        Sc, Lc = max(suf), max(len(p) for p in prompts)
        ids = torch.zeros(n, Sc, dtype=torch.long)
        for r, (p, c) in enumerate(zip(prompts, cached)):
            ids[r, :len(p) - c] = torch.tensor(p[c:])  # right padding
        c_t = torch.tensor(cached, device=self.dev)
        idx_t = torch.tensor(idx, device=self.dev)
        x = self.embed(ids.to(self.dev))
        pos = c_t[:, None] + torch.arange(Sc, device=self.dev)[None, :]
        cos, sin = self.rotary(x, pos)
        masked = any(cached)
        if masked:
            allowed = (torch.arange(Lc, device=self.dev)[None, None, :]
                       <= pos[:, :, None])[:, None]  # [n, 1, Sc, Lc]
            rows = torch.tensor([i for i, s in zip(idx, suf) for _ in range(s)], device=self.dev)
            qry = torch.tensor([j for s in suf for j in range(s)], device=self.dev)
            keyp = torch.tensor([c + j for c, s in zip(cached, suf) for j in range(s)],
                                device=self.dev)
            src = torch.tensor([r for r, s in enumerate(suf) for _ in range(s)], device=self.dev)
        for plan, Kp, Vp in zip(self.layers, self.Kp, self.Vp):
            q, k, v = self.qkv(plan, x, (n, Sc))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = self.rope(q, k, cos, sin)
            if masked:
                Kp[rows, :, keyp] = k[src, :, qry]
                Vp[rows, :, keyp] = v[src, :, qry]
                o = F.scaled_dot_product_attention(q, Kp[idx_t, :, :Lc], Vp[idx_t, :, :Lc],
                                                   attn_mask=allowed, scale=self.scale,
                                                   enable_gqa=self.rep > 1)
            else:
                Kp[idx_t, :, :Sc] = k
                Vp[idx_t, :, :Sc] = v
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                                   enable_gqa=self.rep > 1)
            x = x + plan.o_proj(o.transpose(1, 2).reshape(n, Sc, self.nh * self.d))
            x = x + plan.mlp(plan.ln2(x))
        last = x[torch.arange(n, device=self.dev), torch.tensor(suf, device=self.dev) - 1]
        return self.lm_head(self.norm(last)).float()

    def kv(self, slot: int, u: int, prompt_len: int, n_gen: int):
        """Copies of slot's KV: its group's prompt then its first n_gen generated tokens,
        as K and V [layers, kv_heads, prompt_len + n_gen, d]."""
        k = torch.stack([torch.cat([Kp[u, :, :prompt_len], Ks[slot, :, :n_gen]], dim=1)
                         for Kp, Ks in zip(self.Kp, self.Ks)])
        v = torch.stack([torch.cat([Vp[u, :, :prompt_len], Vs[slot, :, :n_gen]], dim=1)
                         for Vp, Vs in zip(self.Vp, self.Vs)])
        return k, v

    def start(self, G: int, T: int) -> None:
        U = len(self.lens)
        self.U, self.G, self.T = U, G, T
        cap = min(T, SUFFIX_BLOCK)  # grown by doubling: most turns stop long before T
        self.Ks = [torch.zeros(U * G, self.nkv, cap, self.d, dtype=self.dtype, device=self.dev)
                   for _ in self.layers]
        self.Vs = [torch.zeros_like(k) for k in self.Ks]
        self.pos = self.lens.repeat_interleave(G)

    def _grow(self) -> None:
        cap = min(self.T, 2 * self.Ks[0].shape[2])
        def grown(buf):
            new = buf.new_zeros(*buf.shape[:2], cap, self.d)
            new[:, :, :buf.shape[2]] = buf
            return new
        self.Ks = [grown(k) for k in self.Ks]
        self.Vs = [grown(v) for v in self.Vs]

    def select(self, U: int, G: int, src: torch.Tensor) -> None:
        groups = src.view(U, G)[:, 0] // self.G
        if U != self.U:
            self.Kp = [k.index_select(0, groups) for k in self.Kp]
            self.Vp = [v.index_select(0, groups) for v in self.Vp]
            self.bias = self.bias.index_select(0, groups)
        self.Ks = [k.index_select(0, src) for k in self.Ks]
        self.Vs = [v.index_select(0, src) for v in self.Vs]
        self.pos = self.pos.index_select(0, src)
        self.U, self.G = U, G

    def step(self, tok: torch.Tensor, t: int) -> torch.Tensor:
        """Feed the token sampled at step t (position prompt_len + t); logits for step t+1."""
        U, G, S, nkv, rep, d = self.U, self.G, len(tok), self.nkv, self.rep, self.d
        if t >= self.Ks[0].shape[2]:
            self._grow()
        x = self.embed(tok)
        cos, sin = self.rotary(x, (self.pos + t)[:, None])
        cos, sin = cos[:, 0], sin[:, 0]  # [S, d]
        for plan, Kp, Vp, Ks, Vs in zip(self.layers, self.Kp, self.Vp, self.Ks, self.Vs):
            q, k, v = self.qkv(plan, x, (S,))
            q, k = self.rope(q, k, cos, sin)  # [S, heads, d]
            Ks[:, :, t] = k
            Vs[:, :, t] = v
            q = q * self.scale
            # generated part: each slot against its own keys  -> [S, nkv, rep, t+1]
            s_s = torch.matmul(q.view(S, nkv, rep, d), Ks[:, :, :t + 1].transpose(-1, -2)).float()
            m_s = s_s.amax(-1, keepdim=True)
            e_s = (s_s - m_s).exp()
            z_s = e_s.sum(-1, keepdim=True)
            o_s = torch.matmul(e_s.to(self.dtype), Vs[:, :, :t + 1]).float()
            # prompt part: all G slots of a group against the group's keys at once
            qp = q.view(U, G, nkv, rep, d).permute(0, 2, 1, 3, 4).reshape(U, nkv, G * rep, d)
            s_p = torch.matmul(qp, Kp.transpose(-1, -2)).float() + self.bias
            m_p = s_p.amax(-1, keepdim=True)
            e_p = (s_p - m_p).exp()
            z_p = _to_slots(e_p.sum(-1, keepdim=True), U, G, nkv, rep)
            o_p = _to_slots(torch.matmul(e_p.to(self.dtype), Vp).float(), U, G, nkv, rep)
            m_p = _to_slots(m_p, U, G, nkv, rep)
            m = torch.maximum(m_p, m_s)
            a_p, a_s = (m_p - m).exp(), (m_s - m).exp()
            o = (o_p * a_p + o_s * a_s) / (z_p * a_p + z_s * a_s)
            x = x + plan.o_proj(o.to(self.dtype).reshape(S, self.nh * d))
            x = x + plan.mlp(plan.ln2(x))
        return self.lm_head(self.norm(x)).float()


_RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")


def _rms_norm(module, dtype):
    """One fused op instead of HF's six for the standard RMSNorm in fp32; else the module."""
    if dtype == torch.float32 and type(module).__name__ in _RMS_NORMS:
        w, eps = module.weight, module.variance_epsilon
        return lambda x: F.rms_norm(x, (w.shape[-1],), w, eps)
    return module


def _fused_linear(mods):
    """Linears sharing one input as one matmul (weights concatenated for this generate call;
    cheap for the small models it is used on). Returns h -> tuple of outputs."""
    weight = torch.cat([m.weight for m in mods])
    bias = None
    if any(m.bias is not None for m in mods):
        bias = torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features)
                          for m in mods])
    sizes = [m.out_features for m in mods]
    return lambda h: F.linear(h, weight, bias).split(sizes, dim=-1)


class LayerPlan:
    """A decoder layer as the few calls the fast path makes (norms, qkv, o_proj, MLP)."""

    def __init__(self, layer, fuse: bool, dtype):
        attn, mlp = layer.self_attn, layer.mlp
        self.ln1 = _rms_norm(layer.input_layernorm, dtype)
        self.ln2 = _rms_norm(layer.post_attention_layernorm, dtype)
        self.o_proj = attn.o_proj
        self.q_norm = _rms_norm(attn.q_norm, dtype) if hasattr(attn, "q_norm") else None
        self.k_norm = _rms_norm(attn.k_norm, dtype) if hasattr(attn, "k_norm") else None
        gated = all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn"))
        if fuse:
            self.qkv = _fused_linear([attn.q_proj, attn.k_proj, attn.v_proj])
        else:
            self.qkv = lambda h: (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h))
        if fuse and gated:
            gate_up = _fused_linear([mlp.gate_proj, mlp.up_proj])
            act, down = mlp.act_fn, mlp.down_proj

            def fused_mlp(h):
                g, u = gate_up(h)
                return down(act(g) * u)
            self.mlp = fused_mlp
        else:
            self.mlp = mlp


def _to_slots(a: torch.Tensor, U: int, G: int, nkv: int, rep: int) -> torch.Tensor:
    """[U, nkv, G*rep, k] (group layout) -> [U*G, nkv, rep, k] (slot layout)."""
    return a.view(U, nkv, G, rep, -1).permute(0, 2, 1, 3, 4).reshape(U * G, nkv, rep, -1)

