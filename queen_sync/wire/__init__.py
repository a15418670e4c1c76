"""The wire layer: one function per broker route, every reply checked."""
