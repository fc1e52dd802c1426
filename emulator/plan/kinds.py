"""What a node is and how a host attaches: the vocabulary every part of the plan shares."""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    SUPERSPINE = "superspine"
    SPINE = "spine"
    LEAF = "leaf"
    HOST = "host"


class Homing(str, Enum):
    SINGLE = "single"  # one NIC on one leaf
    RAIL = "rail"  # NIC k on the k-th leaf of the host's rail group, an address per NIC
    DUAL = "dual"  # two NICs on a leaf pair, one address (a /32 on lo), ECMP default route
