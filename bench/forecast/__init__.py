"""The forecast: a training step at device counts the sweep did not run, from what it measured, and its check against
the counts it did. Pure: it reads no store and runs no torch; bench.analysis.forecastable hands it a stored sweep.

    step          the step model: DDP's buckets and FSDP's units on a two-lane pipeline (computation, the link)
    network       the collectives' cost per level (inside a node, between nodes): fitted, a preset, or typed
    interference  how collectives and computation slow each other, from the sweep's measurement
    memory        memory per device at any count, for every strategy
    inputs        a configuration's stored rows turned into the model's inputs
    settings      a stored sweep's settings (workload, strategy, precision, options) and the forecast at any count
    spread        the range: every measured input drawn from its own repeated measurements, the model run on the draws
    check         the forecast set beside measured counts, reading nothing of the count it judges but its basis
    outlook       what the forecast says: the network, a series over counts, what-ifs, where scaling stops paying, the
                  table's columns
"""
