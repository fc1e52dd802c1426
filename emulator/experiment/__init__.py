"""Experiments: a topology, a workload, actions at times, a duration -> results JSON."""
