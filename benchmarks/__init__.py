"""Benchmark and simulation scripts, run as files; a package so tests can import them."""
