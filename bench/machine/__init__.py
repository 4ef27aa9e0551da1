"""The environment that produces a measurement: versions, CPU, host (env), GPUs by UUID and PCI bus id
(gpuinfo) and their links in torch's numbering (topology); each known GPU's dense peak per precision (peaks) and its
clocks, power, temperature and throttle reasons over a measured window (gpustate)."""
