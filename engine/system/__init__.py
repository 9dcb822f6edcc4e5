"""System layer: collective algorithms over a message transport (packet or analytical), or timed in
closed form (alpha_beta)."""

from .alpha_beta import AlphaBetaSystemLayer
from .collectives import CollectiveRecord, Dimension, SystemLayer
from .transport import AnalyticalTransport, MessageRecord, PacketTransport

__all__ = ["AlphaBetaSystemLayer", "AnalyticalTransport", "CollectiveRecord", "Dimension", "MessageRecord", "PacketTransport",
           "SystemLayer"]
