"""System layer: collective algorithms over a message transport (packet or analytical)."""

from .collectives import CollectiveRecord, Dimension, SystemLayer
from .transport import AnalyticalTransport, MessageRecord, PacketTransport

__all__ = ["AnalyticalTransport", "CollectiveRecord", "Dimension", "MessageRecord", "PacketTransport",
           "SystemLayer"]
