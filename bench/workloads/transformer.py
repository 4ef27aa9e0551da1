"""A decoder-only transformer language model in plain PyTorch, on random token batches: the workload most scaling
questions are asked about today. Pre-norm blocks (RMSNorm), rotary positions, a SwiGLU feed-forward, causal
`scaled_dot_product_attention`, untied input embedding and output head (the Llama layout; full multi-head
attention, no grouped queries). Nothing is downloaded and there is no tokenizer: each sequence is seq_len + 1
tokens drawn uniformly from the vocabulary by the batch generator, the model predicts every next token.

    --workloads transformer --transformer-preset 1.4b --seq-len 2048        # a preset, its sequence length changed
    --workloads transformer --transformer-layers 4 --transformer-width 256   # a preset's shape, overridden

Presets (PRESETS; their parameter counts are computed, `parameters(shape)`, and held by tests/test_transformer.py
against the table in docs/transformer.md): `tiny` trains on the CPU in the tests; the others are Llama-shaped models
from about 134 M to 6.7 B parameters for GPUs (`6.7b` is Llama 2 7B's shape).

A sample is one sequence; tokens/s is samples/s x seq_len (bench.analysis.results: per device and global). Training
FLOPs per token, 6N + 12 L H Q T (PaLM, appendix B; nanoGPT's estimate_mfu): N the parameters that multiply (every
parameter but the input embedding, a lookup), L layers, H heads, Q the head dimension, T the sequence length; the
attention term counts the whole T x T score matrix as PaLM and nanoGPT do (a causal kernel computes about half).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from bench.workloads import materialize
from bench.workloads.workload import Workload, cycle, synthetic_pool

ROPE_BASE = 10000.0
INIT_STD = 0.02


@dataclass(frozen=True)
class Shape:
    layers: int
    width: int
    heads: int
    seq_len: int
    vocab: int = 32000          # the Llama tokenizer's vocabulary

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def ffn(self) -> int:
        """SwiGLU's hidden size: 2/3 of 4 x width, rounded up to a multiple of 256 (Llama's rule)."""
        return 256 * math.ceil(int(8 * self.width / 3) / 256)


PRESETS = {
    "tiny": Shape(layers=2, width=64, heads=4, seq_len=32, vocab=256),
    "134m": Shape(layers=12, width=768, heads=12, seq_len=1024),
    "374m": Shape(layers=24, width=1024, heads=16, seq_len=1024),
    "1.4b": Shape(layers=24, width=2048, heads=16, seq_len=2048),
    "2.7b": Shape(layers=32, width=2560, heads=32, seq_len=2048),
    "6.7b": Shape(layers=32, width=4096, heads=32, seq_len=2048),
}
DEFAULTS = {"cuda": {"preset": "134m", "batch": 8}, "cpu": {"preset": "tiny", "batch": 2}}


def shape_of(preset: str, layers: Optional[int] = None, width: Optional[int] = None, heads: Optional[int] = None,
             seq_len: Optional[int] = None) -> Shape:
    """A preset with the dimensions given overridden (None: the preset's)."""
    base = PRESETS[preset]
    return replace(base, **{k: v for k, v in (("layers", layers), ("width", width), ("heads", heads),
                                              ("seq_len", seq_len)) if v is not None})


def check_shape(s: Shape) -> Optional[str]:
    """Why a shape cannot be built (None: it can)."""
    if s.width % s.heads:
        return f"--transformer-width {s.width} is not a multiple of --transformer-heads {s.heads} (head dimension width / heads)"
    if s.head_dim % 2:
        return (f"head dimension {s.head_dim} (--transformer-width {s.width} / --transformer-heads {s.heads}) is odd; rotary "
                "positions rotate pairs of dimensions, so it must be even")
    return None


def parameters(s: Shape) -> int:
    """Parameters of the model, counted from its shape: per block the attention (4 width^2: q, k, v, out), SwiGLU
    (3 width x ffn) and two norms; the embedding and the head (vocab x width each) and the final norm."""
    block = 4 * s.width * s.width + 3 * s.width * s.ffn + 2 * s.width
    return s.layers * block + 2 * s.vocab * s.width + s.width


def memory_floor(s: Shape, batch: int) -> tuple:
    """(weights, activations) in bytes that training `s` at `batch` sequences per device needs AT LEAST: the fp32
    weights (4 bytes a parameter: the copy the optimizer updates under every precision; no gradient, optimizer state or
    workspace counted) and one saved 16-bit tensor per block, its input (batch x seq_len x width: all that full
    activation checkpointing keeps of a block; 2 bytes, the least of any precision: FSDP's bf16 mixed precision keeps
    the residual stream in bf16, autocast in fp32). Lower bounds only, so that a shape refused by them could run on no
    strategy or setting (bench.sweep.resolve refuses what exceeds the machine's memory, never what merely might). On
    CPU, where gradients and optimizer state sit in the same RAM, resolve counts `state_bytes` in the weights' place."""
    return 4 * parameters(s), 2 * batch * s.seq_len * s.width * s.layers


OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}   # fp32 tensors a parameter the optimizer keeps: AdamW's moments, SGD's momentum


def state_bytes(spec) -> int:
    """The fp32 training state a run's processes hold together AT LEAST, all of it in host RAM on CPU: weights and
    gradients (4 bytes a parameter each) and the optimizer's state (4 bytes a state: AdamW 2, SGD with momentum 1),
    once per process under single, DataParallel and DDP; ZeRO shards the optimizer state over the processes, FSDP
    all three; HSDP all three within each shard group, held once per group. The CPU memory check counted the weights
    alone (bench.sweep.resolve), so a DDP x2 AdamW run needing 16 bytes a parameter twice passed a check of 4 bytes;
    the plan's RAM warning (bench.sweep.describe) counts by this function too, through `host_bytes`."""
    p = parameters(spec_shape(spec))
    n, opt = spec.processes, 4 * OPTIMIZER_STATES[spec.optimizer]
    if spec.strategy == "fsdp":
        return (8 + opt) * p
    if spec.strategy == "hsdp":
        return (8 + opt) * p * max(1, n // int(spec.option("shard_size") or n))
    return n * 8 * p + (opt * p if spec.strategy == "zero" else n * opt * p)


def floor_batch(spec, given) -> int:
    """The sequences per device the memory floors count a run at: its own (--micro-batch, else --per-device-batch)
    where the user gave a batch (`given`: --per-device-batch or --global-batch), else 1, where `fit` starts."""
    return (spec.micro_batch or spec.per_device_batch) if given else 1


def host_bytes(spec, shape: Shape, batch: int) -> tuple:
    """(bytes, activations, state): what the fullest host of a CPU run holds AT LEAST in its RAM: the processes'
    `state_bytes` plus each process's activations at `batch` sequences (memory_floor's), over its nodes (the fullest
    host holds at least the average). The plan's RAM refusal (bench.sweep.resolve.check_cpu_ram) and its RAM warning
    (bench.sweep.describe.ram_warnings) both count by it: the warning once counted the state alone over every node, so
    a configuration whose state fit but whose state and activations did not was neither refused nor warned of."""
    act = spec.processes * memory_floor(shape, batch)[1]
    state = state_bytes(spec)
    return (act + state) // spec.nodes, act, state


def flops_per_token(s: Shape) -> float:
    """Training FLOPs per token, 6N + 12 L H Q T: N every parameter but the input embedding's (a lookup, no multiply)."""
    n = parameters(s) - s.vocab * s.width
    return 6.0 * n + 12.0 * s.layers * s.heads * s.head_dim * s.seq_len


def forward_flops_per_token(s: Shape, blocks: int) -> float:
    """Forward FLOPs per token of `blocks` blocks (attention 4 width^2 and the T x T scores, SwiGLU 3 width x ffn)."""
    per_block = 2.0 * (4 * s.width * s.width + 3 * s.width * s.ffn) + 4.0 * s.heads * s.head_dim * s.seq_len
    return blocks * per_block


def recomputed_flops_per_token(s: Shape, blocks: int) -> float:
    """What recomputing `blocks` checkpointed blocks costs per token: their forward but the feed-forward's down
    projection, each block's last matmul. Non-reentrant checkpoint (checkpoint_wrapper's) stops recomputing once the
    last tensor backward needs is back, and nothing saves the down projection's output (the residual add keeps
    nothing). Counting the whole forward put the details' hardware FLOPs 6% above FlopCounterMode's count of the same
    step (4 tiny blocks: 74.6 M against 70.3 M a sample); bench.rank.activations.recompute_flops reads this figure."""
    return forward_flops_per_token(s, blocks) - blocks * 2.0 * s.ffn * s.width


# ---------------------------------------------------------------- the model

class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def init_weights(self, g: torch.Generator) -> None:
        self.weight.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Linear(nn.Linear):
    """A linear map with no bias, its weight drawn from N(0, INIT_STD^2) by the generator it is given (materialize)."""

    def __init__(self, fan_in: int, fan_out: int):
        super().__init__(fan_in, fan_out, bias=False)

    def init_weights(self, g: torch.Generator) -> None:
        nn.init.normal_(self.weight, std=INIT_STD, generator=g)


class Embedding(nn.Embedding):
    def init_weights(self, g: torch.Generator) -> None:
        nn.init.normal_(self.weight, std=INIT_STD, generator=g)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions: each pair (first half, second half) of a head's dimensions turned by its position's angle."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over (batch, heads, tokens, head_dim): PyTorch's fused kernel (flash or memory-efficient on
    GPUs); the tests swap in the matrix form to count its FLOPs."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.heads, self.head_dim = s.heads, s.head_dim
        self.qkv = Linear(s.width, 3 * s.width)
        self.out = Linear(s.width, s.width)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        y = attention(rotate(q, cos, sin), rotate(k, cos, sin), v)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, s: Shape):
        super().__init__()
        self.gate = Linear(s.width, s.ffn)
        self.up = Linear(s.width, s.ffn)
        self.down = Linear(s.ffn, s.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """One pre-norm decoder block: the FSDP unit and the activation-checkpointing unit."""

    def __init__(self, s: Shape):
        super().__init__()
        self.attention_norm = RMSNorm(s.width)
        self.attention = Attention(s)
        self.ffn_norm = RMSNorm(s.width)
        self.ffn = FeedForward(s)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    """Built under `torch.device("meta")` (as the workload builds it) its weights wait for materialize.make_real on the
    run's device; built anywhere else they are drawn at once. Either way each module draws from its own seed (`seed`
    and its name), so every strategy, materialising all at once or unit by unit, starts from the same weights."""

    def __init__(self, s: Shape, seed: int = 0):
        super().__init__()
        self.shape = s
        self.embedding = Embedding(s.vocab, s.width)
        self.layers = nn.ModuleList(Block(s) for _ in range(s.layers))
        self.norm = RMSNorm(s.width)
        self.head = Linear(s.width, s.vocab)
        materialize.tag(self, seed)
        if not self.head.weight.is_meta:
            materialize.initialise_all(self)

    def rotary(self, t: int, device: torch.device) -> tuple:
        """cos and sin of every position's angles, (t, head_dim / 2) each, computed here rather than kept as buffers
        (DDP would broadcast buffers every forward)."""
        half = self.shape.head_dim // 2
        inv = 1.0 / ROPE_BASE ** (torch.arange(half, device=device, dtype=torch.float32) / half)
        angles = torch.outer(torch.arange(t, device=device, dtype=torch.float32), inv)
        return angles.cos(), angles.sin()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        cos, sin = self.rotary(tokens.shape[1], tokens.device)
        for block in self.layers:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position of every sequence."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def make_batch(s: Shape, g: torch.Generator, batch: int) -> tuple:
    """(inputs, targets): seq_len + 1 random tokens per sequence, the targets the inputs shifted by one."""
    tokens = torch.randint(0, s.vocab, (batch, s.seq_len + 1), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def resolve_shape(cfg, device: str) -> Shape:
    """The shape a (checked) SweepConfig asks for: --transformer-preset (DEFAULTS per device) with the dimensions given.
    ConfigError for an unknown preset or a shape that cannot be built."""
    from bench.config import ConfigError
    preset = DEFAULTS[device]["preset"] if cfg.transformer_preset is None else cfg.transformer_preset  # '' is refused
    if preset not in PRESETS:
        raise ConfigError(f"--transformer-preset {preset!r}: not a preset; expected one of {', '.join(PRESETS)}")
    shape = shape_of(preset, cfg.transformer_layers, cfg.transformer_width, cfg.transformer_heads, cfg.seq_len)
    why = check_shape(shape)
    if why:
        raise ConfigError(why)
    return shape


def spec_fields(s: Shape) -> dict:
    """The RunSpec fields that carry a shape to the ranks."""
    return {"transformer_layers": s.layers, "transformer_width": s.width, "transformer_heads": s.heads,
            "transformer_vocab": s.vocab, "seq_len": s.seq_len}


def spec_shape(spec) -> Shape:
    return Shape(layers=spec.transformer_layers, width=spec.transformer_width, heads=spec.transformer_heads,
                 seq_len=spec.seq_len, vocab=spec.transformer_vocab)


def details(s: Shape, global_batch: int) -> dict:
    fpt = flops_per_token(s)
    return {"layers": s.layers, "width": s.width, "heads": s.heads, "head_dim": s.head_dim, "ffn": s.ffn,
            "vocab": s.vocab, "seq_len": s.seq_len, "tokens_per_sample": s.seq_len, "parameters": parameters(s),
            "flops_per_token": fpt, "flops_per_sample": fpt * s.seq_len, "flops_per_step": fpt * s.seq_len * global_batch,
            "unit_forward_flops_per_sample": recomputed_flops_per_token(s, 1) * s.seq_len,  # what its recompute runs
            "flops_formula": "6N + 12 L H Q T per token (PaLM appendix B; N: parameters but the input embedding)"}


def workload(spec, rank: int, device: torch.device) -> Workload:
    s = spec_shape(spec)
    pool, artefact = synthetic_pool(spec, rank, device, lambda g, b: make_batch(s, g, b))
    with torch.device("meta"):  # made real on `device` by the strategy: bench.workloads.materialize
        model = Transformer(s, seed=spec.seed)
    return Workload(model=model, loss_fn=lm_loss, batches=cycle(pool), on_device=True,
                    artefact_bytes=artefact, details=details(s, spec.global_batch))
