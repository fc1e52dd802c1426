"""The per-host RoCEv2 engine: a process in each host namespace serving all its QPs.

`job.py` describes a transfer (pure), `daemon.py` is the engine process,
`client.py` is what the CLI uses to start engines and run transfers.
"""
