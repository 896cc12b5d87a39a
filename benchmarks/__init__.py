"""Benchmark scripts of sdfg_scan (run them as ``python benchmarks/<name>.py``)."""
