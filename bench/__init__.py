"""Runnable benchmarks; each prints its figures and writes JSON under bench/results/ with the machine it ran on."""
