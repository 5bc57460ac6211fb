"""``bet``: Bird-Eye attention (Sha et al. 2022, "Bird-Eye Transformers for
Text Generation Models"), for causal self-attention (``decoder_self``) only.

Per head, with Q, K, V the projections of the layer input and d_h the head
dimension:

    M_dp = mask(Q K^T / sqrt(d_h))   ordinary causal mask, diagonal visible
    A    = softmax(M_dp),  H = A V                                        (eq. 6)
    R_j  = sigmoid(w^T [H_j ; K_j])  token j's score of being "high-level"  (eq. 7)
    M'[i, j] = M_dp[i, j] * R_j      every key column rescaled by its score (eq. 8)
    A'   = softmax(mask'(M')),  H' = A' V                             (eqs. 9-10)

then the output projection of the concatenated heads. mask' is the
diagonal-free mask: query i sees keys j < i only (a token attends to its
history, "bird-eye" over the high-level tokens); a query that sees no other key
(the first token, or under left padding the first real token) sees itself only
(``causal_visibility`` in modules/shared.py). ``--bet-no-diag-free`` uses the
ordinary causal mask for A' instead (the paper's ablation).

Decisions (the paper leaves them open):

* Heads (``--bet-score-weights``): ``per-head`` (default): head h has its own
  w_h in R^{2 d_h} over its own [H_j ; K_j] and its own score R_{h,j};
  ``shared``: one w in R^{2d} over [H_j ; K_j] with H_j and K_j the
  concatenations of all heads (head-major, as the output projection sees them),
  one score per token used by every head. Both store w as ``score_weight``:
  per-head H x 2 d_h (row h: [w_H ; w_K] of head h), shared 2d ([w_H ; w_K]).
* No bias in eq. 7 (the paper has none): a bias would only shift every score
  alike, a global temperature that the q/k projections can already learn.
* w is initialised like a bias-free ``nn.Linear(2 d_h or 2d, 1)``:
  U(-1/sqrt(fan_in), 1/sqrt(fan_in)), so the scores start near 0.5 (M' about
  M_dp / 2) but differ from token to token and the score path has a gradient
  from the first step (w = 0 would make every R exactly 0.5).
* q/k/v/out projections as fairseq's MultiheadAttention (biases, its
  xavier initialisation); attention dropout acts on A' only (A is an
  intermediate of the scores, not an attention output); returned weights are A'
  before dropout.
* Padding: padded keys are hidden from both softmaxes of every real query. A
  query row with no visible key (a pad before the first real token) gets zero
  weights, never NaN; its H and R are never used (its key is hidden from every
  real query). Outputs at pad query positions are unspecified (no real position
  reads them): the fused path below lets them see pad keys.
* Speed: a full pass that returns no weights runs both softmaxes through
  ``scaled_dot_product_attention`` (fused kernels; eq. 8 as attention with the
  keys R_j k_j), with ``is_causal`` and no mask tensor at all when the batch has
  no padding or right padding only (the diagonal-free mask is the causal mask
  shifted by one key); weights, recording and decoding use the explicit form
  (``causal_softmax``: no mask at all for a decoding step of one unpadded
  token, which sees every key in eq. 6 and every earlier one in eq. 9).

Costs are those of softmax attention (two T x S softmaxes per head). Decoding
caches keys, values and every past token's R (each depends only on positions up
to that token), all with batch as dim 0, so the generic beam reorder applies.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor, nn

from ..options import AttentionContext
from ..registry import DECODER_SELF, AttentionConfigError, BaseAttention, register_attention
from ..shared import (at_least_float32, causal_softmax, causal_visibility, check_self_attention_key, padding_so_far,
                      without_cudnn_attention)
from .costs import BET_COSTS
from .naive import naive_attention, naive_token_scores
from .options import SCORE_WEIGHTS, BetOptions


def _naive_projections(module, query):
    """The module's parameters and q, k, v of the layer input, in float64."""
    x = query.double()
    params = {name: p.double() for name, p in module.named_parameters()}
    q, k, v = (x @ params[f"{n}_proj.weight"].T + params[f"{n}_proj.bias"] for n in "qkv")
    return params, q, k, v


def naive_bet_token_scores(module, query, key_padding_mask=None):
    """Eqs. 6-7 with the module's weights, in float64 (``naive.naive_token_scores``):
    R of every token, B x H x T (per-head score weights) or B x 1 x T (shared)."""
    params, q, k, v = _naive_projections(module, query)
    return naive_token_scores(q, k, v, params["score_weight"], module.num_heads, key_padding_mask, module.score_weights == "shared")


def naive_bet_attention(module, query, key, value, key_padding_mask=None):
    """The registered naive reference (module signature): eqs. 6-10 with the
    module's weights in float64 (``naive.py``), then the output projection."""
    params, q, k, v = _naive_projections(module, query)
    r = naive_token_scores(q, k, v, params["score_weight"], module.num_heads, key_padding_mask, module.score_weights == "shared")
    out = naive_attention(q, k, v, r, module.num_heads, key_padding_mask, module.diag_free)
    return (out @ params["out_proj.weight"].T + params["out_proj.bias"]).to(query.dtype)


@register_attention(
    "bet",
    placements=(DECODER_SELF,),
    naive_reference=naive_bet_attention,
    description="Bird-Eye attention (Sha et al. 2022): keys rescaled by learned token scores, diagonal-free mask (O(T^2))",
    conformance_variants={
        "shared": {"bet_score_weights": "shared"},
        "no_diag_free": {"bet_no_diag_free": True},
    },
    costs=BET_COSTS,
    attention_distribution=True,
    options=BetOptions,
)
class BetAttention(BaseAttention):
    uses_future_mask = False
    supports_quant_noise = True
    supports_head_dim = True
    # w = [w_H ; w_K] (per head: H x 2 d_h; shared: 2 C): the supernet slices the hidden and the key part alike
    concatenated_parameters = {"score_weight": 2}

    def __init__(
        self,
        placement: str,
        embed_dim: int,
        num_heads: int,
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
        dropout: float = 0.0,
        score_weights: str = "per-head",
        diag_free: bool = True,
        context: Optional[AttentionContext] = None,
        head_dim: Optional[int] = None,
    ):
        """``context``: the model's quantisation noise for the projections (none without); ``head_dim``:
        see ``BaseAttention`` (default: embed_dim / num_heads)."""
        kdim = kdim if kdim is not None else embed_dim
        vdim = vdim if vdim is not None else embed_dim
        super().__init__(placement, embed_dim, num_heads, kdim, vdim, head_dim)
        if placement != DECODER_SELF:
            raise AttentionConfigError(f"bet is causal self-attention and only supports {DECODER_SELF}, not {placement}")
        if kdim != embed_dim or vdim != embed_dim:
            raise AttentionConfigError("bet is self-attention: kdim and vdim must equal embed_dim")
        if score_weights not in SCORE_WEIGHTS:
            raise AttentionConfigError(f"--bet-score-weights must be one of {', '.join(SCORE_WEIGHTS)}, got {score_weights!r}")
        self.score_weights = score_weights
        self.diag_free = bool(diag_free)
        self.hides_diagonal = self.diag_free
        self.scaling = self.head_dim**-0.5
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        width = self.attention_dim
        self.q_proj = self._linear(embed_dim, width, context)
        self.k_proj = self._linear(embed_dim, width, context)
        self.v_proj = self._linear(embed_dim, width, context)
        self.out_proj = self._linear(width, embed_dim, context)
        shape = (num_heads, 2 * self.head_dim) if score_weights == "per-head" else (2 * width,)
        self.score_weight = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options: BetOptions, context: AttentionContext,
                    head_dim: Optional[int] = None):
        return cls(placement, embed_dim, num_heads, kdim=kdim, vdim=vdim, dropout=dropout,
                   score_weights=options.bet_score_weights, diag_free=not options.bet_no_diag_free, context=context,
                   head_dim=head_dim)

    def reset_parameters(self):
        # Projections as fairseq's MultiheadAttention.reset_parameters (q/k/v
        # biases keep nn.Linear's initialisation there too); w as a bias-free
        # nn.Linear(fan_in, 1) (module docstring).
        self._reset_projections()
        bound = 1.0 / math.sqrt(self.score_weight.size(-1))
        nn.init.uniform_(self.score_weight, -bound, bound)

    def extra_repr(self):
        return super().extra_repr() + f", score_weights={self.score_weights}, diag_free={self.diag_free}"

    def token_scores(self, hidden: Tensor, keys: Tensor) -> Tensor:
        """Eq. 7, R = sigmoid(w^T [H ; K]) for B,H,T,D hidden states and keys:
        B,H,T (per-head) or B,1,T (shared: the heads' terms summed, i.e. w over
        the concatenation of all heads)."""
        if self.score_weights == "per-head":
            w = self.score_weight.view(self.num_heads, 2, self.head_dim)
        else:
            w = self.score_weight.view(2, self.num_heads, self.head_dim).transpose(0, 1)
        # float32 at least: the scores multiply the logits of the second softmax
        dtype = at_least_float32(hidden.dtype)
        hidden, keys, w = hidden.to(dtype), keys.to(dtype), w.to(dtype)
        logits = torch.einsum("bhtd,hd->bht", hidden, w[:, 0]) + torch.einsum("bhtd,hd->bht", keys, w[:, 1])
        if self.score_weights == "shared":
            logits = logits.sum(dim=1, keepdim=True)
        return torch.sigmoid(logits)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state=None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if before_softmax:
            raise ValueError("bet has two softmaxes (eqs. 6 and 9): before_softmax=True is not supported")
        if need_head_weights:
            need_weights = True
        self._check_inputs(query, key, key_padding_mask)
        self._check_no_arbitrary_mask(attn_mask)
        check_self_attention_key("bet", query, key)
        tgt_len, bsz, _ = query.shape
        key_padding_mask = self._step_padding(key_padding_mask, tgt_len, incremental_state)

        q = self._split_heads(self.q_proj(query) * self.scaling)
        k = self._split_heads(self.k_proj(query))
        v = self._split_heads(self.v_proj(query))
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        prev_key = buffer.get("prev_key")
        if prev_key is not None:
            k_all = torch.cat([prev_key, k], dim=2)
            v_all = torch.cat([buffer["prev_value"], v], dim=2)
        else:
            k_all, v_all = k, v
        src_len = k_all.size(2)
        pad_all = padding_so_far(buffer.get("prev_key_padding_mask"), key_padding_mask, bsz, src_len - tgt_len, tgt_len)

        prev_scores = buffer.get("prev_score")
        if not need_weights and incremental_state is None:
            with without_cudnn_attention(q.device):
                if pad_all is None or bool((pad_all[:, 1:].int() >= pad_all[:, :-1].int()).all()):
                    out, token_scores = self._fused_right_padded(q, k_all, v_all)
                else:  # B x 1 x T x S bool masks: T^2 bytes each
                    causal = causal_visibility(tgt_len, src_len, pad_all, False, query.device).unsqueeze(1)
                    visible = causal_visibility(tgt_len, src_len, pad_all, True, query.device).unsqueeze(1) \
                        if self.diag_free else causal
                    out, token_scores = self._fused(q, k_all, v_all, causal, visible)
            attn_prime = None
        else:
            scores = q @ k_all.transpose(-1, -2)  # B,H,T,S: Q K^T / sqrt(d_h)
            attn = causal_softmax(scores, pad_all, diag_free=False)  # eq. 6, A (float32 for half inputs)
            hidden = attn.to(v_all.dtype) @ v_all  # eq. 6, H = A V of the T new tokens
            scores_new = self.token_scores(hidden, k)  # eq. 7, R of the new tokens
            token_scores = scores_new if prev_scores is None else torch.cat([prev_scores, scores_new], dim=2)
            rescaled = scores.to(token_scores.dtype) * token_scores.unsqueeze(2)  # eq. 8: column j times R_j
            attn_prime = causal_softmax(rescaled, pad_all, self.diag_free)  # eq. 9, A' (diagonal-free mask')
            out = self.dropout_module(attn_prime.to(v_all.dtype)) @ v_all  # eq. 10, H' = A' V
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.attention_dim))

        if incremental_state is not None:
            buffer["prev_key"], buffer["prev_value"], buffer["prev_score"] = k_all, v_all, token_scores
            if pad_all is not None:
                buffer["prev_key_padding_mask"] = pad_all
            self._set_input_buffer(incremental_state, buffer)
        weights = None
        if need_weights:
            # fairseq's conventions: H x B x T x S per head, else the head average.
            weights = attn_prime.transpose(0, 1) if need_head_weights else attn_prime.mean(dim=1)
        return out, weights

    def _fused_right_padded(self, q: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """:meth:`_fused` without any mask tensor, for sequences without padding or
        with right padding only (fairseq's targets): a real query never reaches a
        pad key through a causal mask, so ``is_causal`` suffices (pad queries,
        whose outputs no real position ever reads, may then see pad keys). The
        diagonal-free mask is the causal mask shifted by one key: query i >= 1
        attends to keys 0..i-1, and query 0 to itself only, so its output is v_0."""
        hidden = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)  # eq. 6
        token_scores = self.token_scores(hidden, k)  # eq. 7
        rescaled_keys = (k.to(token_scores.dtype) * token_scores.unsqueeze(-1)).to(k.dtype)  # eq. 8
        dropout = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        if not self.diag_free:
            return F.scaled_dot_product_attention(q, rescaled_keys, v, is_causal=True, dropout_p=dropout, scale=1.0), token_scores
        first = v[:, :, :1]  # query 0: weight 1 on itself (dropped out like any attention weight)
        if dropout > 0:
            first = first * F.dropout(torch.ones_like(first[..., :1]), dropout, training=True)
        if q.size(2) == 1:
            return first, token_scores
        rest = F.scaled_dot_product_attention(
            q[:, :, 1:], rescaled_keys[:, :, :-1], v[:, :, :-1], is_causal=True, dropout_p=dropout, scale=1.0
        )  # eqs. 9-10 for queries 1..T-1
        return torch.cat([first, rest], dim=2), token_scores

    def _fused(self, q: Tensor, k: Tensor, v: Tensor, causal: Tensor, visible: Tensor) -> Tuple[Tensor, Tensor]:
        """Eqs. 6-10 of a full pass without materialising the attention matrices:
        both softmaxes go through ``scaled_dot_product_attention`` (fused kernels,
        no T x S float tensors kept for the backward). Eq. 8 rescales column j of
        Q K^T by R_j, which equals attending with the keys R_j k_j; q is already
        scaled by 1/sqrt(d_h). Rows without any visible key (pads before the first
        real token) get zero output, as in the explicit path."""
        any_causal = causal.any(dim=-1, keepdim=True)
        any_visible = visible.any(dim=-1, keepdim=True)
        # a row with no visible key would give NaN in the fused kernel: let it see every key, zero it after
        hidden = F.scaled_dot_product_attention(q, k, v, attn_mask=causal | ~any_causal, scale=1.0)  # eq. 6
        hidden = hidden.masked_fill(~any_causal, 0.0)
        token_scores = self.token_scores(hidden, k)  # eq. 7, B x (H or 1) x S
        rescaled_keys = (k.to(token_scores.dtype) * token_scores.unsqueeze(-1)).to(k.dtype)  # eq. 8
        dropout = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        out = F.scaled_dot_product_attention(
            q, rescaled_keys, v, attn_mask=visible | ~any_visible, dropout_p=dropout, scale=1.0
        )  # eqs. 9-10
        return out.masked_fill(~any_visible, 0.0), token_scores
