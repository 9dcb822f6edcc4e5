"""Congestion-control strategies driven directly, with no event loop (`engine.transport.cc`).

Expected values come from RFC 5681 (NewReno window rules), RFC 9438 (CUBIC) and RFC 8257 (DCTCP),
worked out by hand in the comments. A strategy's hooks take bytes and picoseconds.
"""

from __future__ import annotations

import math

import pytest

from engine.transport import Cubic, Dctcp, NewReno, make_congestion_control
from engine.units import PS_PER_MS, PS_PER_S

MSS = 1460


# --------------------------------------------------------------------------------------------
# NewReno (RFC 5681)
# --------------------------------------------------------------------------------------------

def test_initial_window_and_ssthresh():
    # RFC 6928 / DESIGN: IW = init_cwnd_pkts segments; RFC 5681 3.1: initial ssthresh arbitrarily high
    cc = NewReno(MSS, 10)
    assert cc.cwnd_bytes == 10 * MSS
    assert cc.ssthresh_bytes > 1e15


def test_slow_start_adds_min_acked_mss_per_ack():
    # RFC 5681 eq. (2): cwnd += min(N, SMSS) for each ACK of N new bytes while cwnd < ssthresh
    cc = NewReno(MSS, 10)
    cc.on_ack(500, 0, 0)  # a partial segment: +500
    assert cc.cwnd_bytes == 10 * MSS + 500
    cc.on_ack(3 * MSS, 0, 0)  # a stretch ACK of 3 segments: + 1 SMSS only (no byte counting)
    assert cc.cwnd_bytes == 11 * MSS + 500


def test_slow_start_doubles_per_rtt_with_one_ack_per_segment():
    # one round trip = one ACK per segment of the window; each ACK adds one MSS, so a window of W
    # segments becomes 2W: 10 -> 20 -> 40 -> 80 segments after 3 RTTs
    cc = NewReno(MSS, 10)
    for expected in (20, 40, 80):
        for _ in range(int(cc.cwnd_bytes // MSS)):
            cc.on_ack(MSS, 0, 0)
        assert cc.cwnd_bytes == expected * MSS


def test_congestion_avoidance_increment_per_ack():
    # RFC 5681 eq. (3): cwnd += SMSS * SMSS / cwnd. With cwnd = ssthresh = 20 MSS (not < ssthresh: CA)
    # one ACK adds 1460 * 1460 / 29200 = 73 bytes.
    cc = NewReno(MSS, 20)
    cc.ssthresh_bytes = 20 * MSS
    cc.on_ack(MSS, 0, 0)
    assert cc.cwnd_bytes == pytest.approx(20 * MSS + 73, abs=1e-9)


def test_congestion_avoidance_about_one_mss_per_rtt():
    # Per RTT the sender gets floor(cwnd / MSS) ACKs (one per segment). With cwnd from 20 MSS the
    # increments MSS/cwnd_i (in MSS) over 20 ACKs sum to about 20 / 20.5 = 0.976 MSS: "about one
    # SMSS per RTT" (RFC 5681 3.1). Over 10 RTTs from 20 MSS: each RTT adds W_floor / W_mean MSS,
    # between 0.95 and 1, so the total lies in (9.5, 10].
    cc = NewReno(MSS, 20)
    cc.ssthresh_bytes = 20 * MSS
    start = cc.cwnd_bytes
    for _ in range(20):
        cc.on_ack(MSS, 0, 0)
    one_rtt = (cc.cwnd_bytes - start) / MSS
    assert 0.95 < one_rtt <= 1.0
    assert one_rtt == pytest.approx(20 / 20.5, abs=0.005)
    for _ in range(9):
        for _ in range(int(cc.cwnd_bytes // MSS)):
            cc.on_ack(MSS, 0, 0)
    ten_rtts = (cc.cwnd_bytes - start) / MSS
    assert 9.5 < ten_rtts <= 10.0


@pytest.mark.parametrize(
    "flight_segments, expected_ssthresh_segments",
    [
        (100, 50),  # FlightSize / 2
        (15, 7.5),  # FlightSize / 2 need not be a whole segment
        (4, 2),  # = 2 SMSS exactly
        (3, 2),  # max(1.5, 2) = 2 SMSS floor
        (1, 2),
    ],
)
def test_on_loss_ssthresh_half_flight_at_least_two_mss(flight_segments, expected_ssthresh_segments):
    # RFC 5681 eq. (4): ssthresh = max(FlightSize / 2, 2 * SMSS); after the fast retransmit the
    # window (SACK recovery, no inflation) is ssthresh.
    cc = NewReno(MSS, 10)
    cc.cwnd_bytes = 200 * MSS
    cc.on_loss(flight_segments * MSS, 0)
    assert cc.ssthresh_bytes == expected_ssthresh_segments * MSS
    assert cc.cwnd_bytes == expected_ssthresh_segments * MSS


def test_on_loss_uses_flight_size_not_cwnd():
    # RFC 5681 warns against using cwnd: an application-limited sender with cwnd 100 MSS but only
    # 10 MSS in flight gets ssthresh = 5 MSS.
    cc = NewReno(MSS, 10)
    cc.cwnd_bytes = 100 * MSS
    cc.on_loss(10 * MSS, 0)
    assert cc.ssthresh_bytes == 5 * MSS


def test_on_timeout_collapses_to_one_segment_then_slow_starts():
    # RFC 5681: on RTO, ssthresh = max(FlightSize / 2, 2 SMSS) and cwnd = LW = 1 SMSS.
    cc = NewReno(MSS, 10)
    cc.cwnd_bytes = 64 * MSS
    cc.on_timeout(40 * MSS, 0)
    assert cc.ssthresh_bytes == 20 * MSS
    assert cc.cwnd_bytes == 1 * MSS
    # slow start again: 1 -> 2 -> 4 -> 8 -> 16 -> 20 (ssthresh) segments, one ACK per segment
    for _ in range(19):
        cc.on_ack(MSS, 0, 0)
    assert cc.cwnd_bytes == 20 * MSS
    # now cwnd == ssthresh: congestion avoidance, + MSS^2 / cwnd = + 73 bytes
    cc.on_ack(MSS, 0, 0)
    assert cc.cwnd_bytes == pytest.approx(20 * MSS + 73)


def test_on_idle_restart_restart_window_is_min_iw_cwnd():
    # RFC 5681 4.1: cwnd = RW = min(IW, cwnd) after an idle period longer than the RTO.
    cc = NewReno(MSS, 10)
    cc.cwnd_bytes = 50 * MSS
    cc.ssthresh_bytes = 40 * MSS
    cc.on_idle_restart()
    assert cc.cwnd_bytes == 10 * MSS
    assert cc.ssthresh_bytes == 40 * MSS  # ssthresh is untouched
    cc.cwnd_bytes = 4 * MSS  # below IW: unchanged
    cc.on_idle_restart()
    assert cc.cwnd_bytes == 4 * MSS


def test_make_congestion_control_by_name():
    assert isinstance(make_congestion_control("newreno", MSS, 10), NewReno)
    cubic = make_congestion_control("cubic", MSS, 10, cubic_c=0.4, cubic_beta=0.7)
    assert isinstance(cubic, Cubic) and cubic.c == 0.4 and cubic.beta == 0.7
    dctcp = make_congestion_control("dctcp", MSS, 10, dctcp_g=1 / 16)
    assert isinstance(dctcp, Dctcp) and dctcp.g == 1 / 16
    with pytest.raises(ValueError, match="bbr"):
        make_congestion_control("bbr", MSS, 10)


# --------------------------------------------------------------------------------------------
# CUBIC (RFC 9438)
# --------------------------------------------------------------------------------------------

C = 0.4
BETA = 0.7


def cubic_after_loss_at(w_max_segments: float, mss: int = MSS) -> Cubic:
    cc = Cubic(mss, 10, c=C, beta=BETA)
    cc.cwnd_bytes = w_max_segments * mss
    cc.on_loss(int(w_max_segments * mss), 0)
    return cc


def drive_rounds(cc: Cubic, rounds: int, rtt_ps: int, t0_ps: int, mss: int = MSS):
    """One ACK per segment per RTT: in round r, floor(cwnd) ACKs of one MSS at evenly spaced times
    in [t0 + r RTT, t0 + (r + 1) RTT). Yields (time since t0 at the end of the round in s, cwnd in
    segments, W_est in segments)."""
    for r in range(rounds):
        n = int(cc.cwnd_bytes / mss + 1e-9)  # floor, robust to 0.7 * 146000 = 102199.99999999999
        base = t0_ps + r * rtt_ps
        for i in range(n):
            cc.on_ack(mss, base + i * rtt_ps // n, rtt_ps)
        yield (r + 1) * rtt_ps / PS_PER_S, cc.cwnd_bytes / mss, cc.w_est_segments


def test_cubic_constants():
    # RFC 9438 4.3: alpha_cubic = 3 (1 - beta) / (1 + beta) = 0.9 / 1.7 = 0.5294
    cc = Cubic(MSS, 10)
    assert cc.c == 0.4 and cc.beta == 0.7
    assert cc.alpha_cubic == pytest.approx(0.9 / 1.7)
    assert cc.alpha_cubic == pytest.approx(0.529, abs=5e-4)


def test_cubic_multiplicative_decrease_and_k():
    # RFC 9438 4.6: on loss W_max = cwnd = 1000 segments, cwnd = ssthresh = beta * 1000 = 700.
    # eq. (2): K = cbrt((W_max - cwnd_epoch) / C) = cbrt(300 / 0.4) = cbrt(750) = 9.0856 s.
    cc = cubic_after_loss_at(1000)
    assert cc.w_max_segments == pytest.approx(1000)
    assert cc.cwnd_bytes == pytest.approx(700 * MSS)
    assert cc.ssthresh_bytes == pytest.approx(700 * MSS)
    cc.on_ack(MSS, 5 * PS_PER_S, 100 * PS_PER_MS)  # first ACK in CA starts the epoch
    assert cc.k_s == pytest.approx(750 ** (1 / 3), rel=1e-9)
    assert cc.k_s == pytest.approx(9.086, abs=5e-4)
    # W_cubic(0) = C (0 - K)^3 + W_max = -300 + 1000 = 700; W_cubic(K) = 1000; W_cubic(2K) = 1300
    assert cc.w_cubic_segments(0.0) == pytest.approx(700)
    assert cc.w_cubic_segments(cc.k_s) == pytest.approx(1000)
    assert cc.w_cubic_segments(2 * cc.k_s) == pytest.approx(1300)


def test_cubic_window_follows_the_cubic_curve():
    """After a loss at W_max = 1000 segments, cwnd follows W(t) = C (t - K)^3 + W_max.

    RTT = 100 ms. Why this RTT: CUBIC's window is max(W_cubic, W_est) with W_est growing by
    alpha_cubic = 0.529 segments per RTT (RFC 9438 4.3). With RTT = 100 ms, W_est(t) = 700 + 5.29 t,
    i.e. 748 at t = K and 796 at 2K, always below W_cubic (700 + ~21 t near t = 0, 1000 at K, 1300 at
    2K), so the window is the cubic one. (With RTT = 10 ms, W_est would reach 1181 at t = K and the
    flow would rightly be in the Reno-friendly region, not on the cubic curve.)

    Tolerance: in the concave/convex regions the window moves towards the target W(t + RTT) by
    (target - cwnd) / cwnd per acknowledged segment, i.e. d cwnd / dt = (W(t + RTT) - cwnd) / RTT
    with cwnd / RTT ACKs per second: a first-order lag of one RTT on a target one RTT ahead. So cwnd
    lies between W(t) and W(t + RTT) up to a second-order term RTT^2 W''/2 (< 0.2 segment here) and
    the floor() of the per-round ACK count (< 0.2 %). We allow |cwnd - W(t)| <= RTT |W'(t)| + 2
    segments; W'(t) = 3 C (t - K)^2 is 0 at t = K (so cwnd ~ 1000 +- 2) and 99 segments/s at t = 0
    and t = 2K (so +- 12 segments, about 1 %).
    """
    rtt_ps = 100 * PS_PER_MS
    cc = cubic_after_loss_at(1000)
    k = (300 / C) ** (1 / 3)  # 9.0856 s

    def w(t):
        return C * (t - k) ** 3 + 1000

    def w_prime(t):
        return 3 * C * (t - k) ** 2

    rounds = math.ceil(2 * k * PS_PER_S / rtt_ps) + 1  # a little past 2K
    trace = list(drive_rounds(cc, rounds, rtt_ps, t0_ps=PS_PER_S))
    rtt_s = rtt_ps / PS_PER_S
    for t, cwnd, _ in trace:
        assert abs(cwnd - w(t)) <= rtt_s * w_prime(t) + 2, f"t = {t:.2f} s: cwnd {cwnd:.1f}, W(t) {w(t):.1f}"
    # "about 1000 at t = K and about 1300 at t = 2K": the round ends nearest to K and 2K (within
    # half an RTT of them, where W differs from W(K), W(2K) by <= 0.05 s * W' = 0 and 5 segments)
    t_k, cwnd_k, _ = min(trace, key=lambda row: abs(row[0] - k))
    t_2k, cwnd_2k, _ = min(trace, key=lambda row: abs(row[0] - 2 * k))
    assert cwnd_k == pytest.approx(1000, abs=3)
    assert cwnd_2k == pytest.approx(1300, abs=0.015 * 1300)
    # and the Reno estimate stayed below, as computed above: 700 + 0.529 per RTT
    for t, cwnd, w_est in trace:
        assert w_est == pytest.approx(700 + (0.9 / 1.7) * t / rtt_s, rel=0.01)
        assert w_est < cwnd


def test_cubic_fast_convergence():
    # RFC 9438 4.7: a loss while cwnd < W_max (the previous one) sets W_max = cwnd (1 + beta) / 2.
    # First loss at 1000 segments: W_max = 1000. The window then reaches only 800 when the next loss
    # comes: W_max = 800 * 1.7 / 2 = 680, cwnd = 0.7 * 800 = 560, and the next epoch has
    # K = cbrt((680 - 560) / 0.4) = cbrt(300) = 6.694 s.
    cc = cubic_after_loss_at(1000)
    cc.cwnd_bytes = 800 * MSS
    cc.on_loss(800 * MSS, 0)
    assert cc.w_max_segments == pytest.approx(680)
    assert cc.cwnd_bytes == pytest.approx(560 * MSS)
    assert cc.ssthresh_bytes == pytest.approx(560 * MSS)
    cc.on_ack(MSS, 1 * PS_PER_S, 100 * PS_PER_MS)
    assert cc.k_s == pytest.approx(300 ** (1 / 3), rel=1e-9)


def test_cubic_no_fast_convergence_above_previous_w_max():
    # a loss at 1200 > previous W_max 1000: plain W_max = 1200, cwnd = 840
    cc = cubic_after_loss_at(1000)
    cc.cwnd_bytes = 1200 * MSS
    cc.on_loss(1200 * MSS, 0)
    assert cc.w_max_segments == pytest.approx(1200)
    assert cc.cwnd_bytes == pytest.approx(840 * MSS)


def test_cubic_reno_friendly_region():
    """Short RTT: W_est = cwnd_epoch + alpha_cubic * (RTTs elapsed), cwnd = W_est (RFC 9438 4.3).

    Loss at W_max = 100 segments: cwnd = 70, K = cbrt(30 / 0.4) = cbrt(75) = 4.217 s. With RTT = 1 ms,
    W_cubic grows about 3 C K^2 = 21.3 segments per second = 0.021 segment per RTT, while W_est
    grows alpha_cubic = 0.529 segment per RTT: W_cubic(t) < W_est(t) from the first RTT on, so CUBIC
    is in the Reno-friendly region and cwnd = W_est. (It is the ratio of per-RTT growths that
    matters: the region is reached for short RTTs and small windows.) After 20 RTTs W_est is about
    70 + 20 * 0.529 = 80.6, still below cwnd_prior = 100 (where RFC 9438 would switch alpha to 1).
    Per RTT the increment is alpha * sum over floor(cwnd) ACKs of 1 / cwnd_i, i.e. alpha times
    floor(c) / (c + alpha / 2) for a round starting at c: below alpha by at most (1 + alpha / 2) / c,
    1.9 % for c >= 70. Hence a 2 % tolerance.
    """
    alpha = 3 * (1 - BETA) / (1 + BETA)  # 0.5294
    rtt_ps = 1 * PS_PER_MS
    cc = cubic_after_loss_at(100)
    previous = 70.0
    trace = list(drive_rounds(cc, 20, rtt_ps, t0_ps=PS_PER_S))
    for n, (t, cwnd, w_est) in enumerate(trace, start=1):
        assert cc.w_cubic_segments(t) < w_est
        assert cwnd == pytest.approx(w_est, rel=1e-12)  # the window is the Reno estimate
        assert cwnd - previous == pytest.approx(alpha, rel=0.02)
        assert w_est == pytest.approx(70 + n * alpha, abs=0.02 * n * alpha)
        previous = cwnd
    assert trace[-1][1] == pytest.approx(80.6, abs=0.2)
    assert trace[-1][1] < 100


def test_cubic_slow_start_and_timeout():
    # below ssthresh CUBIC slow-starts like Reno (RFC 9438 4.10): +min(acked, MSS)
    cc = Cubic(MSS, 10)
    cc.on_ack(MSS, 0, 0)
    assert cc.cwnd_bytes == 11 * MSS
    # RTO (RFC 9438 4.8): ssthresh = beta * cwnd, cwnd = 1 segment, W_max remembered
    cc.cwnd_bytes = 100 * MSS
    cc.on_timeout(100 * MSS, 0)
    assert cc.cwnd_bytes == MSS
    assert cc.ssthresh_bytes == pytest.approx(70 * MSS)
    assert cc.w_max_segments == pytest.approx(100)


# --------------------------------------------------------------------------------------------
# DCTCP (RFC 8257)
# --------------------------------------------------------------------------------------------

DMSS = 1000  # round numbers for the byte fractions


def test_dctcp_alpha_starts_at_one():
    # RFC 8257 3.3: "the sender SHOULD initialize alpha to 1"
    assert Dctcp(DMSS, 10).alpha == 1.0


def test_dctcp_alpha_once_per_window():
    """alpha = (1 - g) alpha + g F at the end of each observation window (RFC 8257 3.3 steps 1-8).

    A window of 10 segments is ACK-clocked: ACK j acknowledges segment j (bytes [(j-1) MSS, j MSS)),
    so SND.UNA = j MSS, and before the new segment is sent SND.NXT = (j + 9) MSS. WindowEnd starts
    at SND.UNA = SND.NXT = 0 (nothing sent yet), so:
      ACK 1 (SND.UNA 1 > 0) ends window 0 = {ACK 1};       WindowEnd = SND.NXT = 10 MSS
      ACKs 2..10 (SND.UNA <= 10 MSS) accumulate; ACK 11 ends window 1 = {ACKs 2..11}; WindowEnd = 20
      ACK 21 ends window 2 = {12..21};  ACK 31 ends window 3 = {22..31}.
    Marks (g = 1/16, alpha_0 = 1):
      window 0: ACK 1 marked, F = 1       -> alpha = 15/16 * 1 + 1/16 * 1   = 1
      window 1: 5 of 10 marked, F = 1/2   -> alpha = 15/16 + 1/32           = 31/32     = 0.96875
      window 2: none marked, F = 0        -> alpha = 31/32 * 15/16          = 465/512   = 0.908203125
      window 3: all marked, F = 1         -> alpha = 465/512 * 15/16 + 1/16 = 7487/8192 = 0.9139404296875
    Within a window alpha does not move.
    """
    cc = Dctcp(DMSS, 10, g=1 / 16)

    def ack(j: int, ece: bool) -> None:
        cc.on_ecn_feedback(DMSS, ece, j * DMSS, (j + 9) * DMSS)

    ack(1, True)
    assert cc.alpha == 1.0
    for j in range(2, 11):
        ack(j, j % 2 == 0)  # ACKs 2, 4, 6, 8, 10 marked
        assert cc.alpha == 1.0  # mid-window: no update
    ack(11, False)  # 5 marked of {2..11}
    assert cc.alpha == pytest.approx(31 / 32, abs=1e-15)
    for j in range(12, 22):
        ack(j, False)
        if j < 21:
            assert cc.alpha == pytest.approx(31 / 32, abs=1e-15)
    assert cc.alpha == pytest.approx(465 / 512, abs=1e-15)
    for j in range(22, 32):
        ack(j, True)
    assert cc.alpha == pytest.approx(7487 / 8192, abs=1e-15)


def test_dctcp_marked_fraction_counts_bytes_not_acks():
    # RFC 8257 3.3: F = BytesMarked / BytesAcked. One window: an ACK of 3 segments with ECE and two
    # ACKs of 1 segment without: F = 3000 / 5000 = 0.6 (not 1/3 of the ACKs).
    # Window 0 = the first ACK (see above), unmarked: alpha = 15/16.
    # Window 1 ends with the ACK crossing WindowEnd = SND.NXT after ACK 1 = 5000:
    #   ACK of [1000, 4000) ECE (SND.UNA 4000), ACK of [4000, 5000) (SND.UNA 5000 <= 5000, no end),
    #   ACK of [5000, 6000) (SND.UNA 6000 > 5000: end) -> bytes 5000, marked 3000, F = 0.6
    #   alpha = 15/16 * 15/16 + 0.6 / 16 = 0.87890625 + 0.0375 = 0.91640625
    cc = Dctcp(DMSS, 10, g=1 / 16)
    cc.on_ecn_feedback(1000, False, 1000, 5000)
    assert cc.alpha == pytest.approx(15 / 16)
    cc.on_ecn_feedback(3000, True, 4000, 5000)
    cc.on_ecn_feedback(1000, False, 5000, 8000)
    assert cc.alpha == pytest.approx(15 / 16)
    cc.on_ecn_feedback(1000, False, 6000, 9000)
    assert cc.alpha == pytest.approx(0.91640625, abs=1e-12)


def test_dctcp_reaction_scales_with_alpha():
    # RFC 8257 3.3: cwnd = cwnd * (1 - alpha / 2), once per window with marks.
    # alpha = 1: cwnd halves, 100 -> 50 segments.
    cc = Dctcp(DMSS, 10)
    cc.cwnd_bytes = 100 * DMSS
    cc.on_ecn_echo(100 * DMSS, 0)
    assert cc.cwnd_bytes == pytest.approx(50 * DMSS)
    assert cc.ssthresh_bytes == pytest.approx(50 * DMSS)
    # alpha = 31/32 (after a half-marked window): 100 * (1 - 31/64) = 100 * 33/64 = 51.5625 segments
    cc = Dctcp(DMSS, 10)
    cc.alpha = 31 / 32
    cc.cwnd_bytes = 100 * DMSS
    cc.on_ecn_echo(100 * DMSS, 0)
    assert cc.cwnd_bytes == pytest.approx(51.5625 * DMSS)
    # alpha = 1/16 (light marking): 100 * (1 - 1/32) = 96.875 segments
    cc = Dctcp(DMSS, 10)
    cc.alpha = 1 / 16
    cc.cwnd_bytes = 100 * DMSS
    cc.on_ecn_echo(100 * DMSS, 0)
    assert cc.cwnd_bytes == pytest.approx(96.875 * DMSS)


def test_dctcp_reaction_never_leaves_less_than_two_segments():
    # Linux's dctcp_ssthresh: max(cwnd - cwnd alpha / 2, 2) segments. alpha = 1 on 3 segments gives
    # 1.5, floored to 2; on 5 segments 2.5 (above the floor, kept).
    cc = Dctcp(DMSS, 10)
    cc.cwnd_bytes = 3 * DMSS
    cc.on_ecn_echo(3 * DMSS, 0)
    assert cc.cwnd_bytes == 2 * DMSS
    assert cc.ssthresh_bytes == 2 * DMSS
    cc.cwnd_bytes = 5 * DMSS
    cc.on_ecn_echo(5 * DMSS, 0)
    assert cc.cwnd_bytes == pytest.approx(2.5 * DMSS)


def test_dctcp_loss_behaves_like_reno():
    # RFC 8257 3.5: on loss DCTCP behaves like standard TCP: ssthresh = max(flight / 2, 2 MSS)
    cc = Dctcp(DMSS, 10)
    cc.cwnd_bytes = 80 * DMSS
    cc.on_loss(80 * DMSS, 0)
    assert cc.ssthresh_bytes == 40 * DMSS
    assert cc.cwnd_bytes == 40 * DMSS
    assert cc.alpha == 1.0  # a loss does not touch alpha
