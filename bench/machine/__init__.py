"""The environment that produces a measurement: versions, CPU, host (env), GPUs by UUID and PCI bus id
(gpuinfo) and their links in torch's numbering (topology)."""
