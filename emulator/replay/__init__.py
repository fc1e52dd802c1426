"""Trace replay: a serving trace's requests as KV handoffs on a running lab (docs/workloads.md).

`reader` parses a trace, `placement` picks hosts and keeps each decode host's prefix
cache, `scaling` maps trace time and bytes onto the dilated lab, `scheduler` issues the
requests at their times, `verdict` judges the handoffs against the budget.
"""
