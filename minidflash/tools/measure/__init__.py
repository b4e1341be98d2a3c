"""Measuring: benchmarks, budgets, ablations and the figures drawn from their results."""
