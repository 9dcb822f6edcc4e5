"""RFC 6298 retransmission-timer estimator (`engine.transport.RttEstimator`), integer picoseconds.

Every expected value below is computed by hand from RFC 6298 section 2:
    first sample R:   SRTT = R,  RTTVAR = R / 2
    later sample R':  RTTVAR = (1 - 1/4) RTTVAR + 1/4 |SRTT - R'|   (with the *old* SRTT)
                      SRTT   = (1 - 1/8) SRTT   + 1/8 R'
    RTO = SRTT + max(G, K * RTTVAR), K = 4, floored at the minimum RTO (2.4), optionally capped (2.5)
    before any sample RTO = 1 s (2.1); each expiry doubles the RTO (5.5).
The golden numbers (samples 1.0, 1.2, 0.9 s with G = 1 ms) are those of ns-3's rtt-test, quoted in
docs/theory.md#retransmission-timeout-rfc-6298.
"""

from __future__ import annotations

import pytest

from engine.transport import RttEstimator
from engine.units import PS_PER_MS, PS_PER_S, PS_PER_US

G_PS = 1 * PS_PER_MS  # clock granularity G = 1 ms
MAX_RTO_PS = 60 * PS_PER_S  # RFC 6298 (2.5): a cap, if any, must be at least 60 s
INITIAL_RTO_PS = 1 * PS_PER_S  # RFC 6298 (2.1)


def estimator(min_rto_ps: int = 1 * PS_PER_MS, max_rto_ps: int = MAX_RTO_PS,
              granularity_ps: int = G_PS) -> RttEstimator:
    """An estimator whose minimum RTO (1 ms by default) is far below every RTO of the golden test."""
    return RttEstimator(INITIAL_RTO_PS, min_rto_ps, max_rto_ps, granularity_ps)


def test_initial_rto_is_one_second_before_any_sample():
    # RFC 6298 (2.1): "Until a round-trip time (RTT) measurement has been made ... set RTO <- 1 second"
    rtt = estimator()
    assert rtt.rto_ps == 1_000_000_000_000
    assert rtt.samples == 0


def test_initial_rto_respects_a_larger_minimum():
    # the floor applies to every RTO value, the initial one included: min 3 s > initial 1 s
    rtt = RttEstimator(INITIAL_RTO_PS, 3 * PS_PER_S, MAX_RTO_PS, G_PS)
    assert rtt.rto_ps == 3 * PS_PER_S


# Hand computation (seconds; all values are exact multiples of 1 ps, so the integer engine must
# reproduce them exactly):
#   R1 = 1.0: SRTT = 1.0, RTTVAR = 0.5
#             RTO = 1.0 + max(0.001, 4 * 0.5) = 3.0
#   R2 = 1.2: RTTVAR = 0.75 * 0.5 + 0.25 * |1.0 - 1.2| = 0.375 + 0.05 = 0.425
#             SRTT = 0.875 * 1.0 + 0.125 * 1.2 = 0.875 + 0.15 = 1.025
#             RTO = 1.025 + 4 * 0.425 = 1.025 + 1.7 = 2.725
#   R3 = 0.9: RTTVAR = 0.75 * 0.425 + 0.25 * |1.025 - 0.9| = 0.31875 + 0.03125 = 0.35
#             SRTT = 0.875 * 1.025 + 0.125 * 0.9 = 0.896875 + 0.1125 = 1.009375
#             RTO = 1.009375 + 4 * 0.35 = 1.009375 + 1.4 = 2.409375
GOLDEN = [
    # (sample_s, srtt_s, rttvar_s, rto_s)
    (1.0, 1.0, 0.5, 3.0),
    (1.2, 1.025, 0.425, 2.725),
    (0.9, 1.009375, 0.35, 2.409375),
]


def _ps(seconds: float) -> int:
    return round(seconds * PS_PER_S)  # s -> ps, exact for these decimal values


def test_rfc6298_golden_values_exact_in_picoseconds():
    rtt = estimator()
    for index, (sample_s, srtt_s, rttvar_s, rto_s) in enumerate(GOLDEN, start=1):
        rtt.sample(_ps(sample_s))
        assert rtt.samples == index
        assert rtt.srtt_ps == _ps(srtt_s), f"SRTT after sample {index}"
        assert rtt.rttvar_ps == _ps(rttvar_s), f"RTTVAR after sample {index}"
        assert rtt.rto_ps == _ps(rto_s), f"RTO after sample {index}"


def test_granularity_term_used_when_variance_is_tiny():
    # Two identical samples of 100 ms with G = 50 ms and no floor:
    #   R1: SRTT = 100 ms, RTTVAR = 50 ms, RTO = 100 + max(50, 200) = 300 ms
    #   R2: RTTVAR = 0.75 * 50 + 0.25 * 0 = 37.5 ms, SRTT = 100 ms, RTO = 100 + max(50, 150) = 250 ms
    # Then many identical samples drive RTTVAR towards 0 (x 3/4 each time, rounded down), so 4 RTTVAR
    # ends below G and RTO = SRTT + G = 150 ms.
    rtt = estimator(min_rto_ps=1, granularity_ps=50 * PS_PER_MS)
    rtt.sample(100 * PS_PER_MS)
    assert rtt.rto_ps == 300 * PS_PER_MS
    rtt.sample(100 * PS_PER_MS)
    assert rtt.rttvar_ps == 37_500 * PS_PER_US
    assert rtt.rto_ps == 250 * PS_PER_MS
    for _ in range(200):
        rtt.sample(100 * PS_PER_MS)
    assert rtt.srtt_ps == 100 * PS_PER_MS
    assert 4 * rtt.rttvar_ps < 50 * PS_PER_MS
    assert rtt.rto_ps == 150 * PS_PER_MS


def test_rto_floored_at_min_rto():
    # A data-centre RTT of 10 us: SRTT + 4 RTTVAR = 10 + 4 * 5 = 30 us, far below the 200 ms minimum
    # (Linux's floor; RFC 6298 (2.4) says 1 s), so RTO = 200 ms exactly.
    rtt = estimator(min_rto_ps=200 * PS_PER_MS, granularity_ps=1 * PS_PER_US)
    rtt.sample(10 * PS_PER_US)
    assert rtt.srtt_ps == 10 * PS_PER_US
    assert rtt.rto_ps == 200 * PS_PER_MS
    # ... and with a 1 ms floor the same sample gives 1 ms.
    rtt = estimator(min_rto_ps=1 * PS_PER_MS, granularity_ps=1 * PS_PER_US)
    rtt.sample(10 * PS_PER_US)
    assert rtt.rto_ps == 1 * PS_PER_MS
    # a sample above the floor is not touched: 300 ms -> SRTT 300, RTTVAR 150, RTO 900 ms
    rtt = estimator(min_rto_ps=200 * PS_PER_MS, granularity_ps=1 * PS_PER_US)
    rtt.sample(300 * PS_PER_MS)
    assert rtt.rto_ps == 900 * PS_PER_MS


def test_back_off_doubles_up_to_the_cap():
    # RFC 6298 (5.5): RTO <- RTO * 2 per expiry; (2.5): a maximum may be placed on RTO (>= 60 s).
    # Start from the initial 1 s: 2, 4, 8, 16, 32, then 64 is capped to 60, and it stays at 60.
    rtt = estimator()
    expected_s = [2, 4, 8, 16, 32, 60, 60, 60]
    for value in expected_s:
        rtt.back_off()
        assert rtt.rto_ps == value * PS_PER_S


def test_back_off_from_a_measured_rto_and_a_fresh_sample_recomputes():
    # After the golden first sample the RTO is 3 s; two expiries give 6 s then 12 s. A new valid
    # sample recomputes the RTO from SRTT/RTTVAR (RFC 6298 5.7 / Karn): R2 = 1.2 s gives 2.725 s.
    rtt = estimator()
    rtt.sample(_ps(1.0))
    assert rtt.rto_ps == 3 * PS_PER_S
    rtt.back_off()
    assert rtt.rto_ps == 6 * PS_PER_S
    rtt.back_off()
    assert rtt.rto_ps == 12 * PS_PER_S
    rtt.sample(_ps(1.2))
    assert rtt.rto_ps == _ps(2.725)


def test_back_off_with_a_small_cap():
    # a cap of 2.5 s: 1 s -> 2 s -> 2.5 s (capped) -> 2.5 s
    rtt = estimator(max_rto_ps=2_500 * PS_PER_MS)
    rtt.back_off()
    assert rtt.rto_ps == 2 * PS_PER_S
    rtt.back_off()
    assert rtt.rto_ps == 2_500 * PS_PER_MS
    rtt.back_off()
    assert rtt.rto_ps == 2_500 * PS_PER_MS


def test_measured_rto_is_capped():
    # one sample of 20 s: SRTT 20, RTTVAR 10, SRTT + 4 RTTVAR = 60 s; with a 30 s cap RTO = 30 s
    rtt = estimator(max_rto_ps=30 * PS_PER_S)
    rtt.sample(20 * PS_PER_S)
    assert rtt.rto_ps == 30 * PS_PER_S


@pytest.mark.parametrize("sample_ps", [1, 7, 999_999, 123_456_789_013])
def test_first_sample_odd_picoseconds(sample_ps):
    # RTTVAR = R / 2 in integer picoseconds: at most half a picosecond of rounding.
    rtt = estimator(min_rto_ps=1)
    rtt.sample(sample_ps)
    assert rtt.srtt_ps == sample_ps
    assert abs(2 * rtt.rttvar_ps - sample_ps) <= 1
