"""Congestion-control strategies: NewReno (RFC 5681/6582), CUBIC (RFC 9438), DCTCP (RFC 8257).

A strategy owns `cwnd_bytes` and `ssthresh_bytes` and changes them through named hooks that the TCP
sender calls; each hook can be called from a unit test with no event loop. The sender decides *when*
(outside or inside recovery, once per window for ECN); the strategy decides *by how much*.
"""

from __future__ import annotations

from typing import Final

from ..units import BITS_PER_BYTE, PS_PER_MS, PS_PER_S

UNSET_SSTHRESH: Final = float("inf")  # ssthresh before the first loss: the initial slow start

# HyStart++ constants (RFC 9406 section 4.3, its recommended values)
HYSTART_MIN_RTT_THRESH_PS: Final = 4 * PS_PER_MS
HYSTART_MAX_RTT_THRESH_PS: Final = 16 * PS_PER_MS
HYSTART_MIN_RTT_DIVISOR: Final = 8
HYSTART_N_RTT_SAMPLE: Final = 8
HYSTART_CSS_GROWTH_DIVISOR: Final = 4
HYSTART_CSS_ROUNDS: Final = 5
HYSTART_L: Final = 8  # segments a single ACK may add in slow start without pacing
_NO_RTT: Final = 1 << 61  # "infinity" for a round's minimum RTT, kept unboxed in compiled code


class CongestionControl:
    """NewReno window rules; the base every strategy refines.

    Slow start (cwnd < ssthresh): cwnd += min(acked, MSS) per ACK (RFC 5681 eq. 2).
    Congestion avoidance: cwnd += MSS * MSS / cwnd per ACK (RFC 5681 eq. 3).
    Loss by duplicate ACKs: ssthresh = max(FlightSize / 2, 2 MSS), cwnd = ssthresh (RFC 5681 eq. 4;
    the sender adds the 3 MSS of RFC 6582 inflation when SACK is off).
    Timeout: same ssthresh, cwnd = 1 MSS (the loss window).
    """

    name = "newreno"
    wants_ecn_feedback = False  # True if the sender must call `on_ecn_feedback` on every ACK

    __slots__ = ("mss_bytes", "init_cwnd_bytes", "cwnd_bytes", "ssthresh_bytes")

    def __init__(self, mss_bytes: int, init_cwnd_pkts: int) -> None:
        self.mss_bytes = mss_bytes
        self.init_cwnd_bytes = float(init_cwnd_pkts * mss_bytes)
        self.cwnd_bytes = self.init_cwnd_bytes
        self.ssthresh_bytes = UNSET_SSTHRESH

    def on_ack(self, acked_bytes: int, now_ps: int, srtt_ps: int) -> None:
        """New data acknowledged outside loss recovery: grow the window."""
        mss = self.mss_bytes
        if self.cwnd_bytes < self.ssthresh_bytes:
            self.cwnd_bytes += acked_bytes if acked_bytes < mss else mss
        else:
            self.cwnd_bytes += mss * mss / self.cwnd_bytes

    def _halved(self, flight_bytes: int) -> float:
        return max(flight_bytes / 2, 2.0 * self.mss_bytes)

    def on_loss(self, flight_bytes: int, now_ps: int) -> None:
        """Loss detected by duplicate ACKs / SACK: multiplicative decrease."""
        self.ssthresh_bytes = self._halved(flight_bytes)
        self.cwnd_bytes = self.ssthresh_bytes

    def on_recovery_exit(self) -> None:
        """A full ACK ends fast recovery: deflate the window to ssthresh (RFC 6582)."""
        self.cwnd_bytes = self.ssthresh_bytes

    def on_ecn_echo(self, flight_bytes: int, now_ps: int) -> None:
        """ECE received (at most once per window): react as to a loss (RFC 3168 section 6.1.2)."""
        self.on_loss(flight_bytes, now_ps)

    def on_ecn_feedback(self, acked_bytes: int, ece: bool, snd_una: int, snd_nxt: int) -> None:
        """Per-ACK ECN accounting; only strategies with `wants_ecn_feedback` use it."""

    def on_timeout(self, flight_bytes: int, now_ps: int) -> None:
        """Retransmission timeout: collapse to the loss window of one segment."""
        self.ssthresh_bytes = self._halved(flight_bytes)
        self.cwnd_bytes = float(self.mss_bytes)

    def on_resume_after_idle(self, idle_ps: int) -> None:
        """Sending resumes after `idle_ps` with nothing outstanding (application-limited time)."""

    def on_idle_restart(self) -> None:
        """Sending resumes after an idle period longer than the RTO (RFC 5681 section 4.1)."""
        if self.cwnd_bytes > self.init_cwnd_bytes:
            self.cwnd_bytes = self.init_cwnd_bytes


class NewReno(CongestionControl):
    """TCP NewReno: exactly the base rules."""

    __slots__ = ()


class Cubic(CongestionControl):
    """CUBIC (RFC 9438): W_cubic(t) = C (t - K)^3 + W_max in segments and seconds.

    In congestion avoidance the window moves towards W_cubic(t + RTT) by (target - cwnd) / cwnd
    segments per acknowledged segment, and never falls below the Reno-friendly estimate W_est, which
    grows by alpha_cubic = 3 (1 - beta) / (1 + beta) segments per RTT. On loss W_max = cwnd (reduced to
    cwnd (1 + beta) / 2 by fast convergence when below the previous W_max) and cwnd = beta cwnd.
    """

    name = "cubic"

    __slots__ = ("c", "beta", "alpha_cubic", "w_max_segments", "k_s", "epoch_start_ps",
                 "w_est_segments")

    def __init__(self, mss_bytes: int, init_cwnd_pkts: int, c: float = 0.4, beta: float = 0.7) -> None:
        super().__init__(mss_bytes, init_cwnd_pkts)
        self.c = c
        self.beta = beta
        self.alpha_cubic = 3.0 * (1.0 - beta) / (1.0 + beta)
        self.w_max_segments = 0.0
        self.k_s = 0.0
        self.epoch_start_ps = -1  # -1: no congestion-avoidance epoch running
        self.w_est_segments = 0.0

    def w_cubic_segments(self, t_s: float) -> float:
        """The cubic window W_cubic(t), segments, t seconds after the epoch start."""
        return self.c * (t_s - self.k_s) ** 3 + self.w_max_segments

    def on_ack(self, acked_bytes: int, now_ps: int, srtt_ps: int) -> None:
        mss = self.mss_bytes
        if self.cwnd_bytes < self.ssthresh_bytes:
            self.cwnd_bytes += acked_bytes if acked_bytes < mss else mss
            return
        cwnd_segments = self.cwnd_bytes / mss
        if self.epoch_start_ps < 0:
            self.epoch_start_ps = now_ps
            if cwnd_segments < self.w_max_segments:
                self.k_s = ((self.w_max_segments - cwnd_segments) / self.c) ** (1.0 / 3.0)
            else:
                self.k_s = 0.0
                self.w_max_segments = cwnd_segments
            self.w_est_segments = cwnd_segments
        acked_segments = acked_bytes / mss
        t_s = (now_ps - self.epoch_start_ps) / PS_PER_S  # ps -> s for the cubic polynomial
        self.w_est_segments += self.alpha_cubic * acked_segments / cwnd_segments
        if self.w_cubic_segments(t_s) < self.w_est_segments:
            self.cwnd_bytes = self.w_est_segments * mss  # Reno-friendly region
            return
        target = self.w_cubic_segments(t_s + srtt_ps / PS_PER_S)
        if target < cwnd_segments:
            target = cwnd_segments
        elif target > 1.5 * cwnd_segments:
            target = 1.5 * cwnd_segments
        self.cwnd_bytes += (target - cwnd_segments) / cwnd_segments * acked_segments * mss

    def on_resume_after_idle(self, idle_ps: int) -> None:
        # RFC 9438 section 5.8: time spent application-limited does not count in t of W_cubic(t)
        if self.epoch_start_ps >= 0:
            self.epoch_start_ps += idle_ps

    def _reduce(self) -> None:
        cwnd_segments = self.cwnd_bytes / self.mss_bytes
        if cwnd_segments < self.w_max_segments:  # fast convergence
            self.w_max_segments = cwnd_segments * (1.0 + self.beta) / 2.0
        else:
            self.w_max_segments = cwnd_segments
        self.epoch_start_ps = -1
        self.ssthresh_bytes = max(self.cwnd_bytes * self.beta, 2.0 * self.mss_bytes)

    def on_loss(self, flight_bytes: int, now_ps: int) -> None:
        self._reduce()
        self.cwnd_bytes = self.ssthresh_bytes

    def on_timeout(self, flight_bytes: int, now_ps: int) -> None:
        self._reduce()
        self.cwnd_bytes = float(self.mss_bytes)


class Dctcp(CongestionControl):
    """DCTCP (RFC 8257): alpha = (1 - g) alpha + g F once per window of data (F = fraction of acked
    bytes that carried ECE); on ECE, once per window, cwnd = cwnd (1 - alpha / 2), never below two
    segments (Linux's `dctcp_ssthresh`; a one-segment window halves a flow's share of a link whose
    queue stays above the marking threshold). Losses as Reno."""

    name = "dctcp"
    wants_ecn_feedback = True

    __slots__ = ("g", "alpha", "window_end_seq", "bytes_acked", "bytes_marked")

    def __init__(self, mss_bytes: int, init_cwnd_pkts: int, g: float = 1.0 / 16) -> None:
        super().__init__(mss_bytes, init_cwnd_pkts)
        self.g = g
        self.alpha = 1.0  # RFC 8257 section 3.3: start conservatively
        self.window_end_seq = 0
        self.bytes_acked = 0
        self.bytes_marked = 0

    def on_ecn_feedback(self, acked_bytes: int, ece: bool, snd_una: int, snd_nxt: int) -> None:
        self.bytes_acked += acked_bytes
        if ece:
            self.bytes_marked += acked_bytes
        if snd_una > self.window_end_seq:
            if self.bytes_acked:
                marked_fraction = self.bytes_marked / self.bytes_acked
                self.alpha = (1.0 - self.g) * self.alpha + self.g * marked_fraction
            self.window_end_seq = snd_nxt
            self.bytes_acked = 0
            self.bytes_marked = 0

    def on_ecn_echo(self, flight_bytes: int, now_ps: int) -> None:
        self.cwnd_bytes = max(self.cwnd_bytes * (1.0 - self.alpha / 2.0), 2.0 * self.mss_bytes)
        self.ssthresh_bytes = self.cwnd_bytes


class HyStartPlusPlus:
    """HyStart++ (RFC 9406): leaves the initial slow start when the RTT rises, before a loss.

    Rounds: a round ends when the cumulative ACK reaches `window_end_seq`, the SND.NXT of its
    start. In slow start cwnd += min(N, L SMSS) per ACK of N new bytes (L = 8: no pacing). Once a
    round has N_RTT_SAMPLE samples, RttThresh = max(4 ms, min(lastRoundMinRTT / 8, 16 ms)); if
    currentRoundMinRTT >= lastRoundMinRTT + RttThresh the sender enters Conservative Slow Start
    (CSS) with cssBaselineMinRtt = currentRoundMinRTT: cwnd += min(N, L SMSS) / 4 per ACK. A CSS
    round whose minimum (after N_RTT_SAMPLE samples) falls below the baseline means the exit was
    spurious: back to slow start. After CSS_ROUNDS rounds in CSS (the partial round of the entry
    counts), ssthresh = cwnd: congestion avoidance. Used in the initial slow start only (ssthresh
    still infinite, section 4.3); a loss or ECN reduction sets ssthresh and so ends it.
    """

    __slots__ = ("window_end_seq", "last_round_min_rtt_ps", "current_round_min_rtt_ps", "rtt_sample_count",
                 "css_baseline_min_rtt_ps", "css_rounds", "in_css")

    def __init__(self) -> None:
        self.window_end_seq = -1  # -1: no round started yet
        self.last_round_min_rtt_ps = _NO_RTT
        self.current_round_min_rtt_ps = _NO_RTT
        self.rtt_sample_count = 0
        self.css_baseline_min_rtt_ps = _NO_RTT
        self.css_rounds = 0
        self.in_css = False

    def on_ack(self, cc: CongestionControl, acked_bytes: int, rtt_sample_ps: int, snd_una: int,
               snd_nxt: int) -> None:
        """An ACK of `acked_bytes` new bytes in the initial slow start (`cc.ssthresh_bytes` infinite);
        `rtt_sample_ps` is its RTT sample, or -1 if it gave none (Karn's rule)."""
        if snd_una >= self.window_end_seq:  # a new round starts
            self.window_end_seq = snd_nxt
            self.last_round_min_rtt_ps = self.current_round_min_rtt_ps
            self.current_round_min_rtt_ps = _NO_RTT
            self.rtt_sample_count = 0
            if self.in_css:
                self.css_rounds += 1
                if self.css_rounds >= HYSTART_CSS_ROUNDS:
                    cc.ssthresh_bytes = cc.cwnd_bytes  # enter congestion avoidance
                    return
        mss = cc.mss_bytes
        increase = acked_bytes if acked_bytes < HYSTART_L * mss else HYSTART_L * mss
        if self.in_css:
            cc.cwnd_bytes += increase / HYSTART_CSS_GROWTH_DIVISOR
        else:
            cc.cwnd_bytes += increase
        if rtt_sample_ps < 0:
            return
        if rtt_sample_ps < self.current_round_min_rtt_ps:
            self.current_round_min_rtt_ps = rtt_sample_ps
        self.rtt_sample_count += 1
        if self.rtt_sample_count < HYSTART_N_RTT_SAMPLE:
            return
        if self.in_css:
            if self.current_round_min_rtt_ps < self.css_baseline_min_rtt_ps:  # the exit was spurious
                self.css_baseline_min_rtt_ps = _NO_RTT
                self.in_css = False
                self.css_rounds = 0
            return
        last_ps = self.last_round_min_rtt_ps
        if last_ps == _NO_RTT:
            return
        threshold_ps = last_ps // HYSTART_MIN_RTT_DIVISOR
        if threshold_ps > HYSTART_MAX_RTT_THRESH_PS:
            threshold_ps = HYSTART_MAX_RTT_THRESH_PS
        if threshold_ps < HYSTART_MIN_RTT_THRESH_PS:
            threshold_ps = HYSTART_MIN_RTT_THRESH_PS
        if self.current_round_min_rtt_ps >= last_ps + threshold_ps:
            self.css_baseline_min_rtt_ps = self.current_round_min_rtt_ps
            self.in_css = True
            self.css_rounds = 0


def make_congestion_control(
    name: str, mss_bytes: int, init_cwnd_pkts: int, *, dctcp_g: float = 1.0 / 16,
    cubic_c: float = 0.4, cubic_beta: float = 0.7,
) -> CongestionControl:
    """Build the strategy called `name` (`newreno`, `cubic`, `dctcp`)."""
    if name == "newreno":
        return NewReno(mss_bytes, init_cwnd_pkts)
    if name == "cubic":
        return Cubic(mss_bytes, init_cwnd_pkts, c=cubic_c, beta=cubic_beta)
    if name == "dctcp":
        return Dctcp(mss_bytes, init_cwnd_pkts, g=dctcp_g)
    raise ValueError(f"unknown congestion control {name!r}; allowed: newreno, cubic, dctcp")


def slow_start_dominates(nbytes: int, transmission_ps: float, rtt_ps: float, bottleneck_bps: float,
                         init_window_bytes: float) -> bool:
    """Whether a message of `nbytes`, sent from a cold TCP window of `init_window_bytes` that
    doubles every round trip (RFC 5681 slow start, an ACK per segment), would spend longer in
    slow start than its transmission at the path's bottleneck (`transmission_ps`): the window
    must grow until it covers the message or the path's bandwidth-delay product, one `rtt_ps`
    per doubling. An unbounded window (RoCE's, `math.inf`) never is."""
    bdp_bytes = bottleneck_bps * (rtt_ps / PS_PER_S) / BITS_PER_BYTE
    needed_bytes = min(float(nbytes), bdp_bytes)
    window_bytes = float(init_window_bytes)
    rounds = 0
    while window_bytes < needed_bytes:
        window_bytes *= 2
        rounds += 1
    return rounds * rtt_ps > transmission_ps
