"""Benchmarks: the suites behind `ksearch bench` (attention, mamba, naive, search_summary), the one timing helper
they and the scripts under benchmarks/ share (timing.py), and the one schema of their JSON results (results.py)."""
