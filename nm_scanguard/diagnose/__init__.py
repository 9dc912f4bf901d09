"""`scanguardctl diagnose`: recording latency, throughput and scans (`record`), what they show
(`findings`, with `attribution` at the top deciding who asked for each scan), and the plot.

It runs as an ordinary user and imports nothing of the daemon (tests/unit/shared/test_layers.py)."""
