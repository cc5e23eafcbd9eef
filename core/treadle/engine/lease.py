"""A lease chain's state, owned by the engine.

The store leases a run and hands the engine a `LeasedRun` (the run row's facts and its transcript
as read); from there the engine owns what changes while it holds the lease: the token it holds
now (each chained step gets a new one), how many steps ran under the chain and its time budget,
the replay state of the transcript it holds, and what each commit (a `Committed` value from the
store, which never mutates the run it was given) says about the run afterwards."""

from __future__ import annotations

from dataclasses import dataclass

from treadle.config import AgentConfig
from treadle.domain.content import Message
from treadle.domain.runs import NewEvent
from treadle.engine.compaction import Settings as CompactionSettings
from treadle.engine.replay import Replayer
from treadle.store.steps import Committed, LeasedRun, RunTotals, StepOutcome


@dataclass(slots=True)
class Lease:
    run: LeasedRun
    #: the lease token this step holds (a chained step's is the one its commit handed over)
    owner: str
    #: monotonic time after which a commit no longer chains (fairness between runs)
    deadline: float
    #: steps run back to back under this chain so far
    chained: int = 0
    #: the replay state of `run.events`, fed as they grow (engine/replay.py)
    replayer: Replayer | None = None
    #: a chained commit found `last_seq` moved by another writer: re-read the transcript
    stale: bool = False
    #: after the run's final commit: whether volume instances are rooted at it (to purge); True
    #: when the run ended by another statement, which did not look
    rooted_volumes: bool = True
    #: the status the run's final commit gave it (completed | failed | cancelled; None: not ended here)
    ended: str | None = None
    #: the run's iterations and tokens as its final commit left them (None: not ended here)
    totals: RunTotals | None = None
    #: a session continuation's history: the messages of the session's earlier runs (None: not
    #: read yet, or the run starts its session)
    history: list[Message] | None = None
    #: the compaction settings resolved for an agent config (engine/step.py `_lease_compaction`)
    compaction: tuple[AgentConfig, CompactionSettings] | None = None

    @classmethod
    def of(cls, run: LeasedRun, owner: str, deadline: float) -> Lease:
        kept = run.kept_replay
        return cls(run, owner, deadline, replayer=kept if isinstance(kept, Replayer) else None)

    def appended(self, events: list[NewEvent], seqs: list[int]) -> None:
        """A mid-step append committed `events` at `seqs`."""
        self.run.events.extend((seq, e.type, e.payload) for seq, e in zip(seqs, events, strict=True))
        self.run.last_seq = seqs[-1] if seqs else self.run.last_seq

    def reloaded(self, events: list[tuple[int, str, dict[str, object]]]) -> None:
        self.run.events = events
        self.run.last_seq = events[-1][0] if events else 0
        self.replayer, self.stale = None, False

    def committed(self, c: Committed, events: list[NewEvent], outcome: StepOutcome) -> bool:
        """Take in what the step's commit did; True when the transcript is to be kept for this
        process's next claim of the run (`StepStore.keep`)."""
        run = self.run
        base = run.last_seq
        run.last_seq += len(events)
        if outcome.status in ("completed", "failed", "cancelled"):
            self.ended = outcome.status
        if c.rooted_volumes is not None:
            self.rooted_volumes = c.rooted_volumes
        if c.totals is not None:
            self.totals = c.totals
        moved = c.base != base
        keep = c.marked and not moved
        if keep or c.chain_owner is not None:
            run.events.extend((base + i + 1, e.type, e.payload) for i, e in enumerate(events))
        if c.chain_owner is not None:
            self.stale = self.stale or moved  # someone else appended to the transcript: re-read it
            run.input_seq = c.input_seq
            run.step_no = c.step_no
            run.iterations += outcome.iterations_delta
            run.step_failures = 0
            run.cancel_requested, run.cancel_reason = c.cancel_requested, c.cancel_reason
            run.status = outcome.status
            self.chained += 1
            self.owner = c.chain_owner
        return keep
