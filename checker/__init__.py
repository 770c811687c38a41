"""streamproof: a formal concurrency model checker for GPU/NPU stream programs."""

__version__ = "0.1.0"
