"""The SACK scoreboard (`engine.transport.sack.SackScoreboard`) against hand-worked byte ranges:
RFC 2018's blocks (sorted, disjoint, merged where they overlap or touch), RFC 6675's holes and
pipe arithmetic on them, and the receiver's announcement order (the latest block first)."""

from __future__ import annotations

from engine.transport.sack import SackScoreboard

MSS = 1000


def board(*ranges: tuple[int, int]) -> SackScoreboard:
    scoreboard = SackScoreboard()
    for start, end in ranges:
        scoreboard.add(start, end)
    return scoreboard


def test_add_merges_what_overlaps_or_touches_and_counts_only_new_bytes() -> None:
    scoreboard = SackScoreboard()
    assert scoreboard.add(3 * MSS, 4 * MSS) == MSS
    assert scoreboard.add(6 * MSS, 7 * MSS) == MSS
    assert scoreboard.add(3 * MSS, 4 * MSS) == 0  # reported again: nothing new
    assert scoreboard.add(4 * MSS, 5 * MSS) == MSS  # touches [3, 4): one block [3, 5)
    assert scoreboard.blocks == [[3 * MSS, 5 * MSS], [6 * MSS, 7 * MSS]]
    # [4.5, 6.5) overlaps both: the union [3, 7) holds 4 MSS of which 3 were held
    assert scoreboard.add(4 * MSS + 500, 6 * MSS + 500) == MSS
    assert scoreboard.blocks == [[3 * MSS, 7 * MSS]]
    assert scoreboard.add(MSS, 2 * MSS) == MSS  # below every block: placed first
    assert scoreboard.blocks == [[MSS, 2 * MSS], [3 * MSS, 7 * MSS]]
    assert scoreboard.held_bytes == 5 * MSS and scoreboard.highest == 7 * MSS


def test_trim_below_forgets_what_the_cumulative_ack_passed() -> None:
    scoreboard = board((2 * MSS, 4 * MSS), (6 * MSS, 8 * MSS))
    scoreboard.trim_below(3 * MSS)  # cuts into the first block
    assert scoreboard.blocks == [[3 * MSS, 4 * MSS], [6 * MSS, 8 * MSS]] and scoreboard.held_bytes == 3 * MSS
    scoreboard.trim_below(7 * MSS)  # drops the first, cuts the second
    assert scoreboard.blocks == [[7 * MSS, 8 * MSS]] and scoreboard.held_bytes == MSS
    scoreboard.trim_below(8 * MSS)
    assert scoreboard.blocks == [] and scoreboard.held_bytes == 0


def test_take_from_returns_how_far_the_data_is_in_order() -> None:
    # the receiver: rcv_nxt 1 MSS; a segment [1, 2) arrives and fills the hole below [2, 3)
    scoreboard = board((2 * MSS, 3 * MSS), (5 * MSS, 6 * MSS))
    assert scoreboard.take_from(2 * MSS) == 3 * MSS
    assert scoreboard.blocks == [[5 * MSS, 6 * MSS]] and scoreboard.held_bytes == MSS
    assert scoreboard.take_from(4 * MSS) == 4 * MSS  # a hole remains below [5, 6): nothing taken


def test_covers_needs_one_block_to_hold_the_whole_range() -> None:
    scoreboard = board((2 * MSS, 4 * MSS), (5 * MSS, 6 * MSS))
    assert scoreboard.covers(2 * MSS, 3 * MSS) and scoreboard.covers(3 * MSS, 4 * MSS)
    assert not scoreboard.covers(3 * MSS, 5 * MSS + 1)  # spans the hole [4, 5)
    assert not scoreboard.covers(MSS, 2 * MSS)


def test_held_in_counts_the_sacked_bytes_of_a_range() -> None:
    scoreboard = board((2 * MSS, 4 * MSS), (6 * MSS, 8 * MSS))
    assert scoreboard.held_in(0, 10 * MSS) == 4 * MSS
    assert scoreboard.held_in(3 * MSS, 7 * MSS) == 2 * MSS  # [3, 4) and [6, 7)
    assert scoreboard.held_in(4 * MSS, 6 * MSS) == 0
    assert scoreboard.held_in(5 * MSS, 5 * MSS) == 0


def test_next_hole_is_the_first_unsacked_range_below_the_limit() -> None:
    # snd_una 0; SACKed [2, 4) and [6, 8): the holes are [0, 2) and [4, 6)
    scoreboard = board((2 * MSS, 4 * MSS), (6 * MSS, 8 * MSS))
    highest = scoreboard.highest
    assert scoreboard.next_hole(0, highest) == (0, 2 * MSS)
    assert scoreboard.next_hole(MSS, highest) == (MSS, 2 * MSS)  # high_rxt at 1: its rest
    assert scoreboard.next_hole(2 * MSS, highest) == (4 * MSS, 6 * MSS)  # skips the block it starts in
    assert scoreboard.next_hole(6 * MSS, highest) == (8 * MSS, 8 * MSS)  # none below the highest SACK
    # after an RTO everything unSACKed below recover_seq (10) is lost, above the highest SACK too
    assert scoreboard.next_hole(7 * MSS, 10 * MSS) == (8 * MSS, 10 * MSS)
    assert scoreboard.next_hole(MSS, MSS + 500) == (MSS, MSS + 500)  # cut at the limit


def test_pipe_of_rfc_6675_from_the_scoreboard() -> None:
    """RFC 6675's pipe with snd_una 0, snd_max 10 MSS, SACKed [2, 4) and [6, 8), high_rxt 5 MSS
    (the holes [0, 2) and [4, 5) resent): everything above the highest SACK (2 MSS) plus the resent
    holes below high_rxt (3 MSS) = 5 MSS, as the sender computes it."""
    scoreboard = board((2 * MSS, 4 * MSS), (6 * MSS, 8 * MSS))
    snd_una, snd_max, high_rxt = 0, 10 * MSS, 5 * MSS
    highest = scoreboard.highest
    resent_unsacked = min(high_rxt, highest) - snd_una - scoreboard.held_in(snd_una, min(high_rxt, highest))
    assert snd_max - highest + resent_unsacked == 5 * MSS


def test_the_receiver_announces_the_latest_block_first_then_the_lowest() -> None:
    scoreboard = board((2 * MSS, 3 * MSS), (5 * MSS, 6 * MSS), (8 * MSS, 9 * MSS), (11 * MSS, 12 * MSS))
    scoreboard.add(6 * MSS, 7 * MSS)  # the latest segment extends [5, 6)
    assert scoreboard.announced(6 * MSS) == ((5 * MSS, 7 * MSS), (2 * MSS, 3 * MSS), (8 * MSS, 9 * MSS))
    assert scoreboard.announced(-1) == ((2 * MSS, 3 * MSS), (5 * MSS, 7 * MSS), (8 * MSS, 9 * MSS))  # none latest
