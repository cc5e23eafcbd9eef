"""loomcycle's memory bundle (bundles/memory/loomcycle.yaml and its embedded copy, unchanged) run
against treadle: its `memory/consolidator` — a code agent of ~2,000 lines of JavaScript — walks a
consolidation pass over treadle's Memory consolidation ops (builtins/memory_consolidation.py),
History `format: conversation`, Context `capabilities`, Agent spawn of `memory/extractor` (an LLM
agent; here a fake model on treadle's provider port answering a JSON fact array), Memory set with
embeddings (a loopback OpenAI-wire embedder) and recall, and Document for its entity graph.

What is checked is loomcycle's own bar for the bundle ("a pass that completes, writes at least one
fact, advances the watermark, and releases the lease"), read from the rows rather than the prose:
facts stored with provenance (origin `consolidator`, class, source chat), the watermark on the last
settled chat, the lease released, the queued `Memory add` drained; a second pass finds nothing.
The consolidator's `internal:` chats are not work; the schedule's fan-out starts one pass per user
with work. loomcycle's files are read from TREADLE_LOOMCYCLE_SRC (skipped without)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_embeddings import FakeOpenAIEmbeddings
from treadle.domain.content import TextBlock
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse
from treadle.providers.mock import MockProvider
from treadle.runtime import Runtime
from treadle.store.consolidation import ConsolidationStore
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime, user_text

pytest.importorskip("quickjs")

BUNDLES = ["bundles/memory/loomcycle.yaml", "cmd/loomcycle/embedded/bundles/memory.yaml"]
KEY_ENV = "TREADLE_TEST_MEMBUNDLE_EMBED_KEY"
#: what the users say in their chats → the facts the fake extractor answers for it
SAID = {
    "I live in Berlin": {"text": "The user lives in Berlin.", "class": "fact"},
    "I prefer tabs over spaces": {"text": "The user prefers tabs over spaces.", "class": "preference"},
    "we decided to ship on Fridays": {"text": "The team ships on Fridays.", "class": "decision"},
    "I am allergic to peanuts": {"text": "The user is allergic to peanuts.", "class": "constraint"},
}
#: a chat agent (loomcycle's chat bundle is not layered here) and a code agent that queues an `add`
CHAT = {"provider": "mock", "model": "echo", "tools": []}
NOTER = {"provider": "code-js", "tools": ["Memory"], "memory_scopes": ["user"], "code": (
    "function run(input) { return JSON.stringify(Memory.add({scope: 'user', messages: "
    "[{role: 'user', content: input.prompt}]})); }")}


class Extractor(MockProvider):
    """treadle's mock, except for the bundle's extractor (its system prompt): a JSON array with the
    fact of each sentence of SAID in the transcript it is handed."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        if not req.system.startswith("You extract durable facts from ONE chat transcript"):
            return await super().call(req, on_delta)
        prompt = "".join(m.text() for m in req.messages if m.role == "user")
        self.prompts.append(prompt)
        facts = [fact for said, fact in SAID.items() if said in prompt]
        return ModelResponse([TextBlock(json.dumps(facts))], "end_turn", model=req.model, provider="mock")


def _src() -> Path:
    src = os.environ.get("TREADLE_LOOMCYCLE_SRC")
    if not src or not (Path(src) / "bundles" / "memory").is_dir():
        pytest.skip("needs TREADLE_LOOMCYCLE_SRC: a checkout of loomcycle's repository")
    return Path(src)


def base_layer(embedder_url: str) -> dict[str, Any]:
    """What loomcycle's base preset gives the bundle (its tiers), pointed at the fake extractor, and
    an embedder for recall (loomcycle's bundle wants one; without it the pass degrades)."""
    return {
        "models": {"fake": {"provider": "mock", "model": "echo"}},
        "tiers": {"low": ["fake"], "middle": ["fake"], "high": ["fake"]},
        "memory": {"embedder": {"driver": "openai", "model": "fake-embed-384", "base_url": embedder_url,
                                "api_key_env": KEY_ENV}},
        "code_agents": {"enabled": True},
    }


@pytest.fixture
async def bundle(db_url: str, tmp_path: Path, request: pytest.FixtureRequest,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Runtime, Any, Extractor, str]]:
    data = yaml.safe_load((_src() / request.param).read_text())
    extractor = Extractor()
    async with AsyncExitStack() as stack:
        emb = await stack.enter_async_context(FakeOpenAIEmbeddings("sk-membundle-" + secrets.token_hex(4)))
        monkeypatch.setenv(KEY_ENV, emb.api_key)
        agents = {**data.pop("agents"), "chat": CHAT, "noter": NOTER}
        rt, disp = await stack.enter_async_context(open_test_runtime(
            agents, database_url=db_url, config={**data, **base_layer(emb.url)}, home=tmp_path, workers=1,
            providers={"mock": extractor}))
        yield rt, disp, extractor, f"t_membundle_{secrets.token_hex(4)}"


async def _run(rt: Runtime, disp: Any, tenant: str, agent: str, prompt: str, user: str) -> Any:
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=user_text(prompt), user_id=user))
    await disp.drain()
    done = await rt.runs.get(tenant, run.id)
    assert done is not None
    return done


async def _text(rt: Runtime, tenant: str, run: Any) -> str:
    return "".join(e.payload.get("text", "") for e in await rt.runs.events(tenant, run.id) if e.type == "text")


async def _facts(rt: Runtime, tenant: str, user: str) -> dict[str, dict[str, Any]]:
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT key, value, provenance FROM memory WHERE tenant_id = %s AND scope = 'user' AND scope_id = %s"
            " AND superseded_at IS NULL", (tenant, user))
        return {r["value"]: r["provenance"] for r in await cur.fetchall()}


@pytest.mark.parametrize("bundle", BUNDLES, indirect=True)
async def test_a_pass_writes_the_facts_advances_the_watermark_and_releases_the_lease(bundle: Any) -> None:
    rt, disp, extractor, tenant = bundle
    chats = [await _run(rt, disp, tenant, "chat", said, "ada") for said in
             ("Hello! I live in Berlin, by the way.", "Note: I prefer tabs over spaces.")]
    await _run(rt, disp, tenant, "chat", "I am allergic to peanuts", "bob")  # another target: not ada's pass
    queued = await _run(rt, disp, tenant, "noter", "Remember: we decided to ship on Fridays.", "ada")
    assert json.loads(await _text(rt, tenant, queued)).get("status") == "pending", queued
    assert "The team ships on Fridays." not in await _facts(rt, tenant, "ada")  # add is asynchronous now

    done = await _run(rt, disp, tenant, "memory/consolidator", "Run one consolidation pass.", "ada")
    assert done.status == "completed", (done.status, done.error)
    facts = await _facts(rt, tenant, "ada")
    assert set(facts) == {"The user lives in Berlin.", "The user prefers tabs over spaces.",
                          "The team ships on Fridays."}, facts
    sessions = [c.session for c in chats]
    berlin, tabs = facts["The user lives in Berlin."], facts["The user prefers tabs over spaces."]
    assert berlin["origin"] == "consolidator" and berlin["class"] == "fact", berlin
    assert berlin["source_session_id"] == sessions[0] and tabs["source_session_id"] == sessions[1], facts
    assert facts["The team ships on Fridays."]["origin"] == "agent_explicit", facts  # from_pending: the item's
    assert not any("allergic" in p for p in extractor.prompts)  # bob's chat is not ada's
    # the extractor reads the conversation alone (History format: conversation): no header, no ids
    assert any("### user\n\nHello! I live in Berlin, by the way." in p for p in extractor.prompts)
    assert not any(s in p for p in extractor.prompts for s in sessions), extractor.prompts

    store = ConsolidationStore(rt.pool)
    cursor = await store.cursor(tenant, "user", "ada")
    assert cursor.watermark_session_id == queued.session and cursor.leased_by == "", cursor  # ada's last chat
    assert await store.pending(tenant, "user", "ada", 10) == []  # the queued add was acked

    again = await _run(rt, disp, tenant, "memory/consolidator", "Run one consolidation pass.", "ada")
    assert again.status == "completed" and "nothing new" in await _text(rt, tenant, again), again
    assert await _facts(rt, tenant, "ada") == facts
    # the pass's own chats (an `internal:` agent's) are bookkeeping: the scan never offers them
    assert await store.scan(tenant, "ada", ["memory/consolidator", "memory/extractor"], cursor, 10) == []


@pytest.mark.parametrize("bundle", BUNDLES[:1], indirect=True)
async def test_the_schedule_fans_out_one_pass_per_user_with_work(bundle: Any) -> None:
    """The bundle's `memory-consolidation` schedule (staged off; run now) with its
    `memory_consolidation_fanout` marker: one consolidator run per user with work, under that user."""
    rt, disp, _, tenant = bundle
    await _run(rt, disp, tenant, "chat", "I live in Berlin", "ada")
    await _run(rt, disp, tenant, "chat", "I am allergic to peanuts", "bob")
    await rt.triggers.sync_static(tenant)  # treadle.yaml's scheduled_runs into the tenant
    fired = await rt.triggers.schedules.run_now(tenant, "memory-consolidation")
    await disp.drain()
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT user_id, status FROM runs WHERE tenant_id = %s AND agent = %s ORDER BY 1",
                                 (tenant, "memory/consolidator"))
        runs = [(r["user_id"], r["status"]) for r in await cur.fetchall()]
    assert runs == [("ada", "completed"), ("bob", "completed")], (fired, runs)
    assert "The user is allergic to peanuts." in await _facts(rt, tenant, "bob")
    again = await rt.triggers.schedules.run_now(tenant, "memory-consolidation")  # no work left: no run
    assert again.get("run_id") is None, again
