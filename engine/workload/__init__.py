"""Workloads: what the network carries."""

from .flows import FlowsWorkload

__all__ = ["FlowsWorkload"]
