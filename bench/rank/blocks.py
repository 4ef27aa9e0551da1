"""The blocks of a model: the units FSDP shards one at a time (bench.rank.fsdp) and activation checkpointing recomputes
(bench.rank.activations), found once here so both strategies cut a model alike.

    units = blocks(model)      # in module order, none inside another, never the root

Known blocks: the suite's transformer blocks, torchvision's ResNet BasicBlock/Bottleneck (also DeepLabV3's backbone), ViT
EncoderBlock, nn.TransformerEncoderLayer/DecoderLayer, and the synthetic MLP's layers. Any other model: the repeated
same-class children of its largest nn.ModuleList/nn.Sequential.
"""
from __future__ import annotations

from torch import nn


def _known_block_types() -> tuple:
    from bench.workloads.transformer import Block
    types = [nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, Block]
    try:
        from torchvision.models.resnet import BasicBlock, Bottleneck
        from torchvision.models.vision_transformer import EncoderBlock
        types += [BasicBlock, Bottleneck, EncoderBlock]
    except Exception:  # absent (ImportError) or broken: a torchvision built for another torch raises RuntimeError
        pass           # on import; the synthetic MLP and user models need none of its blocks
    return tuple(types)


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _repeated_children(model: nn.Module) -> list:
    """Children of the container (ModuleList/Sequential) whose repeated same-class children hold the
    most parameters: the generic guess at "the layers" of a model the suite does not know."""
    best, best_params = [], 0
    for m in model.modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)):
            continue
        by_type: dict = {}
        for c in m.children():
            if _has_params(c):
                by_type.setdefault(type(c), []).append(c)
        for group in by_type.values():
            n = sum(p.numel() for c in group for p in c.parameters())
            if len(group) >= 2 and n > best_params:
                best, best_params = group, n
    return best


def blocks(model: nn.Module) -> list:
    """The submodules that become units, in module order, none inside another and none the root."""
    from bench.workloads.synthetic import MLP
    known = _known_block_types()
    # through activation checkpointing's wrappers (bench.rank.activations): the unit is the block inside
    mlp_layers = {id(getattr(layer, "_checkpoint_wrapped_module", layer)) for m in model.modules() if isinstance(m, MLP)
                  for layer in m.layers}
    candidates = [m for m in model.modules()
                  if m is not model and _has_params(m) and (isinstance(m, known) or id(m) in mlp_layers)]
    if not candidates:
        candidates = [m for m in _repeated_children(model) if m is not model]
    # Keep the outermost: a block inside a chosen block (a ViT layer's MLP, say) stays in its unit.
    inside = {id(sub) for m in candidates for sub in m.modules() if sub is not m}
    return [m for m in candidates if id(m) not in inside]
