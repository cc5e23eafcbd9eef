"""Agent teams: multi-agent workflows as versioned, verifiable definitions, run durably.

    graph.py     the workflow graph (states, handlers, transitions), its validation (a code per
                 class of invalid graph) and loomcycle's field names
    hashing.py   loomcycle's TeamDef content hash (colours excluded)
    render.py    the graph as a Mermaid stateDiagram-v2
    defs.py      TeamDefFamily: the def lifecycle's kind `team` plus delete, render_diagram, run
    walk.py      the walk as a pure function of the tool results so far
    provider.py  the walk as the "model" of a team run (a Provider)
    runs.py      team runs: pinning a version, the engine's agent for it, awaiting a result

A team run is an ordinary run of the agent `team:<name>`: the engine asks the walk for a turn,
the walk asks for the Agent tool (each state's agents are child runs), the run parks until they
settle, and so on to a terminal state. No engine code knows about teams.
"""

from treadle.teams.defs import TeamDefFamily
from treadle.teams.runs import TEAM_PREFIX, TeamRuns, is_team_agent

__all__ = ["TEAM_PREFIX", "TeamDefFamily", "TeamRuns", "is_team_agent"]
