"""lpdt: Low Precision Decentralized Distributed Training (a reproduction pipeline)."""

__version__ = "0.1.0"
