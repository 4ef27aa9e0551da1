"""Commands beside the sweep that drive its machinery: tune (DDP's settings within a budget), abtest (interleaved A/B
runs), selfcheck (the first thing to run on new GPUs), history (each configuration over a store's sweeps) and export
(a store's tables as CSV or JSON files). Each takes a sweep's flags through bench.options, or its own."""
