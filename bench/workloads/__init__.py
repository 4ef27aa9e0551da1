"""Workloads by name (registry): the synthetic MLP, DeepLabV3, any torchvision model (models, detection), the
user's own (usermodel) through the model contract (modelspec), and Pascal VOC data (voc); a step's training FLOPs,
counted on meta copies of the model (flops); a model built on meta made real where it trains (materialize)."""
