"""The per-host RoCEv2 engine: a process in each host namespace serving all its QPs.

`job.py` describes a transfer (pure), `daemon.py` is the engine process (`rc.py` and
`mrc.py` the two sides of a transfer on each transport),
`client.py` is what the CLI uses to start engines and run transfers.
"""
