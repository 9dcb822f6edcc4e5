"""Unit conversions. Simulated time is an integer number of picoseconds everywhere in the engine.

Every conversion between seconds, microseconds, bits and bytes goes through this module, so each
conversion factor is written once.
"""

from typing import Final

PS_PER_S: Final = 1_000_000_000_000  # picoseconds in one second
PS_PER_MS: Final = 1_000_000_000
PS_PER_US: Final = 1_000_000
PS_PER_NS: Final = 1_000
BITS_PER_BYTE: Final = 8
BYTES_PER_KB: Final = 1024  # configuration sizes in _kb are KiB


def us_to_ps(us: float) -> int:
    """Microseconds to integer picoseconds (rounded to the nearest picosecond)."""
    return round(us * PS_PER_US)


def ms_to_ps(ms: float) -> int:
    """Milliseconds to integer picoseconds."""
    return round(ms * PS_PER_MS)


def ns_to_ps(ns: float) -> int:
    """Nanoseconds to integer picoseconds."""
    return round(ns * PS_PER_NS)


def s_to_ps(s: float) -> int:
    """Seconds to integer picoseconds."""
    return round(s * PS_PER_S)


def ps_to_s(ps: int) -> float:
    """Picoseconds to float seconds (for results only, never for simulation time)."""
    return ps / PS_PER_S


def gbps_to_bps(gbps: float) -> int:
    """Gigabits per second to integer bits per second."""
    return round(gbps * 1_000_000_000)


def bps_to_gbps(bps: int) -> float:
    """Integer bits per second to gigabits per second (for results)."""
    return bps / 1_000_000_000


def utilisation(size_bytes: int, rate_bps: int, duration_ps: int) -> float:
    """The fraction of `duration_ps` a link of `rate_bps` needs to carry `size_bytes`:
    bytes * 8 bits/byte / (bits/s * duration in s)."""
    return size_bytes * BITS_PER_BYTE * PS_PER_S / (rate_bps * duration_ps)


def serialisation_ps(size_bytes: int, rate_bps: int) -> int:
    """Time to put `size_bytes` on a wire of `rate_bps`, in whole picoseconds (rounded down).

    bytes * 8 bits/byte * 1e12 ps/s / (bits/s); exact for rates that divide 8e12 (10, 25, 100, 400 Gb/s).
    """
    return size_bytes * BITS_PER_BYTE * PS_PER_S // rate_bps


def bytes_in_duration(duration_ps: int, rate_bps: int) -> int:
    """Bytes a link of `rate_bps` serialises in `duration_ps` (rounded down)."""
    return duration_ps * rate_bps // (BITS_PER_BYTE * PS_PER_S)


def goodput_gbps(payload_bytes: int, duration_ps: int) -> float:
    """Payload bits per second over a duration, in Gb/s."""
    if duration_ps <= 0:
        return 0.0
    return payload_bytes * BITS_PER_BYTE / (duration_ps / PS_PER_S) / 1e9
