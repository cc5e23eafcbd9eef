"""Memory `add` with `infer` (loomcycle's memory layer, RFC K / RFC BL): the model reads a
conversation and answers the durable facts in it; each fact becomes a Memory entry with
provenance (a "fact", as opposed to a "note" an agent wrote with `set`). Then loomcycle HEAD's
contradiction detection, report-only: each new fact's neighbours in the "related but distinct"
band (similarity ≥ related_threshold, < merge_threshold) go to a judge as pairs, which answers
contradicts / independent / unclear. Verdicts are counted and reported; nothing is retired.

Here: the prompts, the parsing of the answers, and the key a fact is stored under (a digest of
its normalized text, so the same fact learned twice is one entry). The model calls are one
each, without tools, on the agent's route (Engine.ask); the mock provider answers both purposes
deterministically (providers/mock.py)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

EXTRACT_PURPOSE = "memory_extract"
JUDGE_PURPOSE = "memory_conflict_judge"
VERDICTS = ("contradicts", "independent", "unclear")
ROLES = ("user", "assistant", "system")
FACT_PREFIX = "fact:"
MAX_FACT_CHARS = 2000


def extract_system(max_facts: int) -> str:
    return (
        "You distill durable memory from a conversation. Return ONLY a JSON object "
        '{"facts": [{"text": "...", "class": "..."}]} with at most ' + str(max_facts) + " facts. "
        "Each text is ONE self-contained sentence worth remembering across conversations (a preference, "
        "a stable fact about the user or the world, a decision and its reason, a correction). class is a "
        "short label: preference, fact, decision or correction. Leave out greetings, transient task state, "
        "secrets and anything you are unsure of. No facts: {\"facts\": []}."
    )


def extract_prompt(messages: list[dict[str, str]]) -> str:
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "Conversation:\n\n" + "\n".join(lines)


def judge_system() -> str:
    return (
        "You compare pairs of remembered facts. For each pair answer whether they CONTRADICT each other "
        "(both cannot be true at once), are INDEPENDENT (both can be true), or it is UNCLEAR. Return ONLY a "
        'JSON object {"verdicts": [{"pair": <number>, "verdict": "contradicts|independent|unclear"}]}.'
    )


def judge_prompt(pairs: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"PAIR {i}\nA: {a}\nB: {b}" for i, (a, b) in enumerate(pairs, 1))


def _json_object(text: str) -> Any:
    """The first JSON object in a model's answer (it may wrap it in prose or a code fence)."""
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            return obj
        except ValueError:
            start = text.find("{", start + 1)
    return None


def parse_facts(text: str, max_facts: int) -> list[dict[str, str]] | None:
    """[{text, class}] from the extraction answer (None: not a fact list)."""
    obj = _json_object(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("facts"), list):
        return None
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for item in obj["facts"]:
        fact = item.get("text") if isinstance(item, dict) else item
        if not isinstance(fact, str) or not fact.strip():
            continue
        fact = " ".join(fact.split())[:MAX_FACT_CHARS]
        key = fact_key(fact)
        if key in seen:
            continue
        seen.add(key)
        cls = item.get("class") if isinstance(item, dict) else None
        out.append({"text": fact, "class": cls.strip()[:128] if isinstance(cls, str) and cls.strip() else "fact"})
        if len(out) >= max_facts:
            break
    return out


def parse_verdicts(text: str, n: int) -> list[str]:
    """One verdict per pair (1..n); a pair the answer leaves out, or names oddly, is "unclear"."""
    verdicts = ["unclear"] * n
    obj = _json_object(text)
    items = obj.get("verdicts") if isinstance(obj, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        pair, verdict = item.get("pair"), str(item.get("verdict", "")).strip().lower()
        if isinstance(pair, int) and not isinstance(pair, bool) and 1 <= pair <= n and verdict in VERDICTS:
            verdicts[pair - 1] = verdict
    return verdicts


_WS = re.compile(r"\s+")


def fact_key(text: str) -> str:
    """The key a fact is stored under: the same fact (case and spacing aside) is one entry."""
    norm = _WS.sub(" ", text.strip().lower())
    return FACT_PREFIX + hashlib.sha256(norm.encode()).hexdigest()[:24]


def verbatim_key(run_id: str, tool_use_id: str) -> str:
    """`add` with infer: false: one entry per call (a re-run of the call writes the same key)."""
    return "mem_" + hashlib.sha256(f"{run_id}\x1f{tool_use_id}".encode()).hexdigest()[:24]


def event_id(run_id: str, tool_use_id: str) -> str:
    return "add_" + hashlib.sha256(f"add\x1f{run_id}\x1f{tool_use_id}".encode()).hexdigest()[:24]
