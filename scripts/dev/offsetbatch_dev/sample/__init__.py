"""Sample data for the demo, the tests and the benchmarks."""
