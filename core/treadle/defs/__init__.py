"""The one def lifecycle (create, fork, get, list, retire, promote, verify) every def kind runs on,
and the gates a *Def tool puts in front of it.

    lifecycle.py   DefLifecycle: the base class owning the lifecycle; a kind fills in hooks
    gates.py       Gate (protocol), NameGate (by def name), AgentGate (by the agent a def starts)
    args.py        strict readers of op-input fields, overlay folding, body validation helpers
    tooling.py     a *Def tool's input schema, its op run, refusals as tool errors

Kinds: AgentDef, SkillDef (treadle.substrate), ScheduleDef, WebhookDef (treadle.triggers).
"""

from treadle.defs.args import MAX_DESCRIPTION, STATIC_DESCRIPTION
from treadle.defs.gates import AgentGate, Gate, NameGate
from treadle.defs.lifecycle import CORE_OPS, DefLifecycle

__all__ = ["CORE_OPS", "MAX_DESCRIPTION", "STATIC_DESCRIPTION", "AgentGate", "DefLifecycle", "Gate", "NameGate"]
