"""The congestion plane: shaped ports under time dilation, ECN marking, PFC-like pauses, DCQCN."""
