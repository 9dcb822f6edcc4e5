"""System layer: collective algorithms over a message transport (packet or analytical), or timed in
closed form (alpha_beta)."""

from .alpha_beta import AlphaBetaSystemLayer
from .collectives import CollectiveRecord, Dimension, SystemLayer
from .messages import MessageLog, MessageRecord
from .transport import AnalyticalTransport, PacketTransport

__all__ = ["AlphaBetaSystemLayer", "AnalyticalTransport", "CollectiveRecord", "Dimension", "MessageLog",
           "MessageRecord", "PacketTransport", "SystemLayer"]
