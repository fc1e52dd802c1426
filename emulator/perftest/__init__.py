"""perftest (linux-rdma/perftest 4.5-0.17) on the engine: its TCP exchange, its
output, and sessions that run its tests from an engine host (docs/roce.md)."""
