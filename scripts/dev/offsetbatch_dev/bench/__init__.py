"""Benchmarks: ``make bench``; see README "Benchmarks"."""
