"""Benchmarks that print throughput side by side with a peer measured in the same run."""
