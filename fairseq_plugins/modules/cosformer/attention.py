"""``cosformer``: linear attention with cosine re-weighting (Qin et al. 2022,
"cosFormer: Rethinking Softmax in Attention", ICLR).

With phi = ReLU (eq. 6) and the re-weighting cos(pi/2 * (i - j) / M) (eq. 8),

    O_i = sum_j phi(q_i) phi(k_j)^T cos(pi/2 (i-j)/M) v_j
          / sum_j phi(q_i) phi(k_j)^T cos(pi/2 (i-j)/M)                     (eq. 9)

and by cos(a - b) = cos a cos b + sin a sin b (eq. 10) the sums factor into
"cos" and "sin" feature maps, so that sum_j k_j^cos v_j^T etc. are shared by all
queries: O(N d^2) instead of O(N^2 d).

Where this implementation departs from the authors' public ``cosformer.py``
(the causes of the "repeater" decoders in the mixed-attention paper):

* key padding is removed from both sums (padded keys are zeroed);
* positions i, j count real tokens of each sequence from its first real token,
  so left-padding does not shift the re-weighting;
* M depends on the placement, never on the padded tensor length:
  encoder self-attention uses each sequence's own length (the paper's M = N);
  causal self-attention and encoder-decoder attention use a fixed horizon
  (``--cosformer-max-positions``), so teacher-forced training and step-by-step
  decoding compute the same function; a sequence longer than the horizon is an
  error (past it, cos(...) turns negative and the normaliser can vanish);
* causal training is chunked: inside chunks of C tokens the exact quadratic
  form, across chunks a recurrent d x d state. Memory is O(T d) per head, not
  the reference's O(T d^2) cumulative sum. In torch, or on CUDA in fused Triton
  kernels (``algorithms.py``: one signature for every algorithm;
  ``--cosformer-algorithm``);
* decoding keeps only the running sums (constant size per head) and a position
  counter, so the cost per generated token does not grow with the prefix;
* the denominator is clamped at ``eps``.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..options import AttentionContext
from ..precision import autocast_off
from ..registry import (
    DECODER_SELF,
    ENCODER_DECODER,
    ENCODER_SELF,
    PLACEMENTS,
    BaseAttention,
    register_attention,
)
from ..shared import as_dtype, at_least_float32, module_output, module_projections
from .bidirectional import cosformer_bidirectional
from .algorithms import ALGORITHM_CHOICES, ALGORITHMS, AUTO, CHUNKED, FUSED, FUSED_CHUNK_SIZE
from .algorithms import select as select_algorithm
from .chunked import DEFAULT_CHUNK_SIZE
from .costs import COSFORMER_COSTS
from .naive import naive_attention
from .options import CosformerOptions, horizon_for

DEFAULT_EPS = 1e-6


def sequence_positions(key_padding_mask: Optional[Tensor], bsz: int, length: int, device, offset: Optional[Tensor] = None) -> Tensor:
    """Position of every token counted from its sequence's first real token (B x T, long).

    Pads get the position of the next real token (or the last one); they are
    masked out of every sum, so their value never matters.
    """
    if key_padding_mask is None:
        pos = torch.arange(length, device=device).unsqueeze(0).expand(bsz, length)
    else:
        real = ~key_padding_mask.bool()
        pos = (real.long().cumsum(dim=1) - real.long()).clamp_min(0)
    if offset is not None:
        pos = pos + offset.unsqueeze(1)
    return pos


def copy_positions(key_padding_mask: Optional[Tensor], bsz: int, length: int, copies: int, device) -> Tensor:
    """``sequence_positions`` of keys that are ``copies`` concatenated copies of one source (B x length,
    length = copies * S): counted within each copy, so every copy has the positions 0..S-1 of the source."""
    if copies == 1:
        return sequence_positions(key_padding_mask, bsz, length, device)
    if length % copies:
        raise ValueError(f"cosformer encoder-decoder attention got {length} keys, not {copies} copies of one source")
    src_len = length // copies
    mask = None if key_padding_mask is None else key_padding_mask.reshape(bsz * copies, src_len)
    return sequence_positions(mask, bsz * copies, src_len, device).reshape(bsz, length)


def _check_contiguous(key_padding_mask: Tensor):
    """The causal chunked form needs each sequence's real tokens in one block
    (fairseq's left or right padding)."""
    real = ~key_padding_mask.bool()
    starts = real & ~F.pad(real[:, :-1], (1, 0), value=False)
    if bool((starts.sum(dim=1) > 1).any()):
        raise ValueError(
            "cosformer causal attention needs padding only at the start or the end of each sequence "
            "(fairseq's left/right padding); got padding between real tokens"
        )


def _length_error(length: int, horizon: int, placement: str) -> ValueError:
    return ValueError(
        f"cosformer {placement} attention got a sequence position {length - 1} >= its horizon M = {horizon}: "
        f"raise --cosformer-max-positions (or --max-target-positions / --max-source-positions) to at least {length}"
    )


def explicit_weights(q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, horizon: Tensor, key_pad: Optional[Tensor], causal: bool, eps: float) -> Tensor:
    """The attention matrix that cosFormer applies implicitly (B,H,T,S), for analysis only: O(T*S)."""
    scores = q @ k.transpose(-1, -2)
    rel = (q_pos.unsqueeze(2) - k_pos.unsqueeze(1)).to(q.dtype)  # B,T,S
    reweight = torch.cos(rel * (math.pi / 2) / horizon.view(-1, 1, 1).to(q.dtype))
    scores = scores * reweight.unsqueeze(1)
    if causal:
        scores = scores * torch.ones_like(rel).tril(k.size(2) - q.size(2)).unsqueeze(1)
    if key_pad is not None:
        scores = scores.masked_fill(key_pad.bool()[:, None, None, :], 0.0)
    return scores / scores.sum(dim=-1, keepdim=True).clamp_min(eps)


def naive_cosformer(module, query, key, value, key_padding_mask=None):
    """The registered naive reference (module signature): the module's q/k/v
    projections, ``naive.naive_attention`` with its placement's positions and
    horizon M, the output projection."""
    q, k, v = module_projections(module, query, key, value)
    heads = naive_attention(
        q,
        k,
        v,
        module.num_heads,
        key_padding_mask,
        causal=module.causal,
        horizon=None if module.placement == ENCODER_SELF else module.horizon,
        positions_from_keys=module.placement != ENCODER_DECODER,
        key_copies=getattr(module, "key_copies", 1) if module.placement == ENCODER_DECODER else 1,
        eps=module.eps,
    )
    return module_output(module, heads)


@register_attention(
    "cosformer",
    placements=PLACEMENTS,
    naive_reference=naive_cosformer,
    description="linear attention with cosine re-weighting (Qin et al. 2022): O(T) time, constant decoding state",
    costs=COSFORMER_COSTS,
    options=CosformerOptions,
)
class CosformerAttention(BaseAttention):
    uses_future_mask = False
    # Encoder-decoder attention over k concatenated copies of the source: key positions (and so the cos
    # re-weighting and the horizon check) are counted within each copy; the constant-size state sums over
    # every copy's keys, which is the sum of the per-copy states.
    supports_key_copies = True
    supports_quant_noise = True
    supports_head_dim = True

    def __init__(
        self,
        placement: str,
        embed_dim: int,
        num_heads: int,
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
        horizon: Optional[int] = None,
        eps: float = DEFAULT_EPS,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        context: Optional[AttentionContext] = None,
        head_dim: Optional[int] = None,
        algorithm: str = AUTO,
    ):
        """``context``: the model's quantisation noise for the projections (none without); ``head_dim``:
        see ``BaseAttention`` (default: embed_dim / num_heads); ``algorithm``: of causal attention, one of
        ``algorithms.ALGORITHM_CHOICES`` (``--cosformer-algorithm``)."""
        kdim = kdim if kdim is not None else embed_dim
        vdim = vdim if vdim is not None else embed_dim
        super().__init__(placement, embed_dim, num_heads, kdim, vdim, head_dim)
        if placement != ENCODER_SELF and (horizon is None or horizon < 1):
            raise ValueError(f"cosformer {placement} attention needs a horizon M >= 1, got {horizon}")
        if chunk_size < 1:
            raise ValueError(f"cosformer chunk_size must be >= 1, got {chunk_size}")
        if algorithm not in ALGORITHM_CHOICES:
            raise ValueError(f"cosformer algorithm must be one of {', '.join(ALGORITHM_CHOICES)}, got {algorithm!r}")
        self.algorithm = algorithm
        self.horizon = horizon
        self.eps = eps
        self.chunk_size = chunk_size
        width = self.attention_dim
        self.q_proj = self._linear(embed_dim, width, context)
        self.k_proj = self._linear(kdim, width, context)
        self.v_proj = self._linear(vdim, width, context)
        self.out_proj = self._linear(width, embed_dim, context)
        self.reset_parameters()

    @classmethod
    def from_config(cls, placement, embed_dim, num_heads, kdim, vdim, dropout, options: CosformerOptions,
                    context: AttentionContext, head_dim: Optional[int] = None):
        return cls(placement, embed_dim, num_heads, kdim=kdim, vdim=vdim,
                   horizon=horizon_for(placement, options, context), context=context, head_dim=head_dim,
                   algorithm=options.cosformer_algorithm)

    def reset_parameters(self):
        # fairseq's MultiheadAttention initialisation, q/k/v biases zero.
        self._reset_projections(zero_qkv_bias=True)

    def extra_repr(self):
        return super().extra_repr() + f", horizon={self.horizon}, chunk_size={self.chunk_size}, algorithm={self.algorithm}"

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
            raise ValueError("cosformer has no softmax: before_softmax=True is not supported")
        if need_head_weights:
            need_weights = True
        self._check_inputs(query, key, key_padding_mask)
        if self.causal:
            self._check_no_arbitrary_mask(attn_mask)
        elif attn_mask is not None:
            raise ValueError(f"cosformer {self.placement} attention cannot apply an attn_mask (linear attention has no score matrix)")
        tgt_len, bsz, _ = query.shape
        # The projections follow autocast like any linear layer; the attention itself runs in float32
        # (or float64) with autocast off: its sums run over all keys, which overflows float16 and keeps
        # too few digits in bfloat16 (a carried decoding state sums over the whole prefix).
        compute_dtype = at_least_float32(query.dtype)
        # W_q x; phi = ReLU is applied below, or, in causal self-attention, fused into the chunked form.
        q = as_dtype(self._split_heads(self.q_proj(query)), compute_dtype)

        if self.encoder_decoder_attention:
            out, weights = self._cross_attention(F.relu(q), key, key_padding_mask, incremental_state, need_weights, compute_dtype)
        elif self.causal:
            out, weights = self._causal_self_attention(q, query, key_padding_mask, incremental_state, need_weights, compute_dtype)
        else:
            if incremental_state is not None:
                raise ValueError("cosformer encoder self-attention does not decode incrementally")
            out, weights = self._bidirectional_self_attention(F.relu(q), query, key_padding_mask, need_weights, compute_dtype)

        out = as_dtype(out, query.dtype).permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.attention_dim)
        out = self.out_proj(out)
        if weights is not None:
            weights = weights.to(query.dtype)
            weights = weights.transpose(0, 1) if need_head_weights else weights.mean(dim=1)
        return out, weights

    def _keys_values(self, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor], dtype) -> Tuple[Tensor, Tensor]:
        """phi(K) with padded keys zeroed, and [V, 1] with padded rows zeroed."""
        k = F.relu(self._split_heads(self.k_proj(key))).to(dtype)
        v = self._split_heads(self.v_proj(value)).to(dtype)
        v1 = F.pad(v, (0, 1), value=1.0)
        if key_padding_mask is not None:
            keep = (~key_padding_mask.bool()).to(dtype)[:, None, :, None]
            k = k * keep
            v1 = v1 * keep
        return k, v1

    def _angles(self, pos: Tensor, horizon, dtype) -> Tensor:
        horizon = horizon.to(dtype).view(-1, 1) if torch.is_tensor(horizon) else float(horizon)
        return (pos.to(dtype) * (math.pi / 2) / horizon).unsqueeze(1).unsqueeze(-1)  # B,1,T,1

    def _bidirectional_self_attention(self, q, x, key_padding_mask, need_weights, dtype):
        bsz, _, length, _ = q.shape
        k, v1 = self._keys_values(x, x, key_padding_mask, dtype)
        pos = sequence_positions(key_padding_mask, bsz, length, q.device)
        if key_padding_mask is None:
            horizon = torch.full((bsz,), length, device=q.device)
        else:
            horizon = (~key_padding_mask.bool()).sum(dim=1).clamp_min(1)
        angle = self._angles(pos, horizon, dtype)
        out = cosformer_bidirectional(q, k, v1, angle, angle, self.eps)
        weights = explicit_weights(q, k, pos, pos, horizon, key_padding_mask, False, self.eps) if need_weights else None
        return out, weights

    def _causal_self_attention(self, q, x, key_padding_mask, incremental_state, need_weights, dtype):
        """q: the raw query projection (B,H,T,D); phi is applied inside the causal form."""
        bsz, _, length, _ = q.shape
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        key_padding_mask = self._step_padding(key_padding_mask, length, incremental_state)
        if key_padding_mask is not None:
            _check_contiguous(key_padding_mask)
        offset = buffer.get("position")
        state = buffer.get("state")
        pos = sequence_positions(key_padding_mask, bsz, length, q.device, offset)
        n_real = (~key_padding_mask.bool()).sum(dim=1) if key_padding_mask is not None else torch.full((bsz,), length, device=q.device)
        end = (offset if offset is not None else 0) + n_real
        if int(end.max()) > self.horizon:
            raise _length_error(int(end.max()), self.horizon, self.placement)
        # Raw q and k go in: phi and the zeroing of padded keys are fused into the causal form's
        # chunking, and since nothing else holds these projections (nor v), its backward overwrites
        # them with their gradients. With padded keys zero, every weight of a pad is zero, so the
        # values need no masking and the denominator weights are all ones.
        k = as_dtype(self._split_heads(self.k_proj(x)), dtype)
        v = as_dtype(self._split_heads(self.v_proj(x)), dtype)
        angle = self._angles(pos, self.horizon, dtype)
        if need_weights:
            if incremental_state is not None:
                raise ValueError(
                    "cosformer causal decoding keeps only a constant-size state and cannot return attention weights "
                    "incrementally; ask for weights in a full (teacher-forced) forward pass"
                )
            phi_q, phi_k = F.relu(q), F.relu(k)
            if key_padding_mask is not None:
                phi_k = phi_k.masked_fill(key_padding_mask.bool()[:, None, :, None], 0.0)
            horizon = torch.full((bsz,), self.horizon, device=q.device)
            weights = explicit_weights(phi_q, phi_k, pos, pos, horizon, key_padding_mask, True, self.eps)
        else:
            weights = None
        # One signature for every algorithm (algorithms.py); the module picks one for the device and the call.
        name = select_algorithm(self.algorithm, q.device, decoding=length == 1,
                                needs_grad=torch.is_grad_enabled() and q.requires_grad)
        # (chunked: nothing else holds q, k, v, so its backward overwrites them with their gradients)
        tuning = {CHUNKED: {"chunk_size": self.chunk_size, "own": True},
                  FUSED: {"chunk_size": min(self.chunk_size, FUSED_CHUNK_SIZE)}}.get(name, {})
        out, new_state = ALGORITHMS[name](q, k, v, state, angle=angle, horizon=self.horizon, eps=self.eps,
                                          key_padding_mask=key_padding_mask, **tuning)
        if incremental_state is not None:
            buffer["state"] = new_state
            buffer["position"] = end
            self._set_input_buffer(incremental_state, buffer)
        return out, weights

    def _cross_attention(self, q, key, key_padding_mask, incremental_state, need_weights, dtype):
        bsz, _, tgt_len, _ = q.shape
        buffer = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if "kv_state" in buffer:
            kv_state, k, k_pos, key_padding_mask = buffer["kv_state"], buffer["keys"], buffer["key_positions"], buffer.get("key_padding_mask")
        else:
            if key is None:
                raise ValueError("cosformer encoder-decoder attention needs the encoder output as key on its first call")
            src_len = key.size(0)
            k, v1 = self._keys_values(key, key, key_padding_mask, dtype)
            k_pos = copy_positions(key_padding_mask, bsz, src_len, self.key_copies, q.device)
            if src_len > self.horizon and int(k_pos.max()) >= self.horizon:
                raise _length_error(int(k_pos.max()) + 1, self.horizon, self.placement)
            with autocast_off(q.device.type):
                k_angle = self._angles(k_pos, self.horizon, dtype)
                kv_state = torch.stack(
                    [(k * torch.cos(k_angle)).transpose(-1, -2) @ v1, (k * torch.sin(k_angle)).transpose(-1, -2) @ v1], dim=2
                )  # B,H,2,D,E
        offset = buffer.get("query_position")
        q_pos = sequence_positions(None, bsz, tgt_len, q.device, offset)
        end = (offset if offset is not None else 0) + tgt_len
        if int(torch.as_tensor(end).max()) > self.horizon:
            raise _length_error(int(torch.as_tensor(end).max()), self.horizon, self.placement)
        with autocast_off(q.device.type):
            q_angle = self._angles(q_pos, self.horizon, dtype)
            out = (q * torch.cos(q_angle)) @ kv_state[:, :, 0] + (q * torch.sin(q_angle)) @ kv_state[:, :, 1]
            out = out[..., :-1] / out[..., -1:].clamp_min(self.eps)
        if incremental_state is not None:
            buffer.update(kv_state=kv_state, keys=k, key_positions=k_pos, query_position=torch.as_tensor(end, device=q.device).expand(bsz).clone())
            if key_padding_mask is not None:
                buffer["key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, buffer)
        weights = None
        if need_weights:
            horizon = torch.full((bsz,), self.horizon, device=q.device)
            weights = explicit_weights(q, k, q_pos, k_pos, horizon, key_padding_mask, False, self.eps)
        return out, weights
