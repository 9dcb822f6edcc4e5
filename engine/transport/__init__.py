"""Transport layer: TCP connections and congestion-control strategies."""

from .cc import CongestionControl, Cubic, Dctcp, NewReno, make_congestion_control
from .tcp import DEFAULT_TCP_SETTINGS, RttEstimator, TcpConnection, TcpReceiver, TcpSender, TcpSettings

__all__ = [
    "CongestionControl", "Cubic", "Dctcp", "NewReno", "make_congestion_control",
    "DEFAULT_TCP_SETTINGS", "RttEstimator", "TcpConnection", "TcpReceiver", "TcpSender", "TcpSettings",
]
