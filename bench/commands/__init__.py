"""Commands beside the sweep that drive its machinery: tune (DDP's settings within a budget), abtest (interleaved A/B
runs) and selfcheck (the first thing to run on new GPUs). Each takes a sweep's flags through bench.options."""
