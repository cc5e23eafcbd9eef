"""store/held.py: the bounds a process keeps yielded transcripts within."""

from __future__ import annotations

from treadle.store.held import HeldTranscript, HeldTranscripts


def held(last_seq: int) -> HeldTranscript:
    return HeldTranscript(last_seq, [(i, "text", {}) for i in range(1, last_seq + 1)], None)


def test_room_is_counted_in_runs_and_events_and_a_take_frees_it() -> None:
    h = HeldTranscripts(max_runs=2, max_events=10)
    assert h.has_room(4)
    h.put("a", held(4))
    assert h.has_room(6) and not h.has_room(7)
    h.put("b", held(6))
    assert not h.has_room(0)  # two runs held
    assert h.take("a", 4) is not None and h.has_room(4)
    h.put("b", held(3))  # the run's newer transcript replaces its older one
    assert len(h) == 1 and h.has_room(7) and not h.has_room(8)


def test_a_take_at_another_seq_misses_and_forgets() -> None:
    h = HeldTranscripts()
    h.put("a", held(5))
    assert h.take("a", 6) is None and h.take("a", 5) is None  # gone after the miss
    assert (h.hits, h.misses) == (0, 2)


def test_transcripts_nobody_claims_leave_after_their_age() -> None:
    h = HeldTranscripts(max_runs=1, max_age_s=60)
    old = held(2)
    old.kept_at -= 61
    h.put("a", old)
    h.put("b", held(2))
    assert len(h) == 2
    assert not h.has_room(1)  # "b" is young: still full after "a" expired
    assert len(h) == 1 and h.take("b", 2) is not None and h.has_room(1)
