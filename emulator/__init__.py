"""rocelab: a packet-level RoCEv2 fabric emulator on Linux network namespaces."""
