"""System layer: collective algorithms over a backend that carries messages (engine/backends/), or
timed in closed form (alpha_beta)."""

from .alpha_beta import AlphaBetaSystemLayer
from .collectives import CollectiveRecord, Dimension, SystemLayer
from .messages import MessageLog, MessageRecord

__all__ = ["AlphaBetaSystemLayer", "CollectiveRecord", "Dimension", "MessageLog", "MessageRecord", "SystemLayer"]
