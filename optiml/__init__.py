"""optiml: make CUDA kernels faster by searching source edits under verification.

The library never prints; it logs through loguru under the name ``optiml``, which is
disabled until the CLI (or a user) enables it.
"""
from loguru import logger

__version__ = "0.1.0"

logger.disable("optiml")
