"""System layer: collective algorithms over a message transport (packet or analytical)."""

from .collectives import CollectiveRecord, Dimension, SystemLayer
from .messages import MessageLog, MessageRecord
from .transport import AnalyticalTransport, PacketTransport

__all__ = ["AnalyticalTransport", "CollectiveRecord", "Dimension", "MessageLog", "MessageRecord",
           "PacketTransport", "SystemLayer"]
