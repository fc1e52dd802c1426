"""perftest (linux-rdma/perftest 4.5-0.17) on the engine: its TCP exchange, its
output, and sessions that run its tests on a host's queue pairs (docs/roce.md).
The engine's side (its jobs, the CLI's calls) is engine/perftest.py and
hosts/perftest.py (it asks the host kind); nothing here imports the engine."""
