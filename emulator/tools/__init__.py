"""Tools for people who test fabrics, one module per command.

    labs     `rocelab list`: every lab on the machine, its topology, size, age and a
             cheap health word (netlink FIB widths, no vtysh, no pings)
    vtysh    `rocelab vtysh`: the lab's own FRR shell on one router (its run dir's
             vty sockets, never the host's FRR), commands or interactive
    capture  `rocelab capture`: tcpdump inside a node's namespace on one port, the
             full-snaplen pcap streamed to a file or stdout, stopped by count or time
    lookup   the node and port a command names, or NodeNotFoundError naming the valid ones
"""
