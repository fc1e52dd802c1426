"""rxe hosts: real Linux Soft-RoCE in small QEMU/TCG guests (docs/rxe.md)."""
