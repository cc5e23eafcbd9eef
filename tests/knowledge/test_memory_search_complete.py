"""Memory search, complete (issue 41 item 4), with the local embedder (a real 384-dimension
model) on real Postgres: loomcycle's `rank` (recency, frequency, the reserved source weight),
`dedup` (drop, merge, keep), `sources` (facts, notes, documents — a Document chunk body found by
meaning) with provenance on each result, `add` with `messages` and `infer` (the mock model
extracts facts; a fact learned twice is one entry; a contradiction is reported, never acted on),
`recall` — through the Memory tool in runs and through POST /v1/_memory/search."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import TENANT, client_for, run_agent, scripted, tool_results

LOCAL = {"embedder": {"driver": "local"}}
RUNBOOK = "The deploy runbook for Postgres lives in the team wiki."
RUNBOOK_2 = "The Postgres deploy runbook lives in the team wiki."
CAT = "The cat sat on the mat and purred all afternoon."
QUESTION = "where is the postgres deploy runbook?"


def _search(**kw: Any) -> tuple[str, dict[str, Any]]:
    return ("Memory", {"op": "search", "scope": "agent", "query": QUESTION, **kw})


async def test_sources_dedup_and_provenance_through_the_tool(open_rt: Any) -> None:
    agent = scripted(
        ("Memory", {"op": "set", "scope": "agent", "key": "note/runbook", "value": RUNBOOK, "embed": True}),
        ("Memory", {"op": "set", "scope": "agent", "key": "note/runbook2", "value": RUNBOOK_2, "embed": True}),
        ("Memory", {"op": "set", "scope": "agent", "key": "note/cat", "value": CAT, "embed": True}),
        ("Memory", {"op": "set", "scope": "agent", "key": "fact/wiki", "value": "The team wiki is Confluence.",
                    "embed": True, "provenance": {"class": "fact", "source_session_id": "chat-1"}}),
        ("Document", {"op": "create_document", "scope": "agent", "title": "Ops"}),
        _search(sources=["facts"]),
        _search(sources=["notes"], k=3),
        _search(sources=["documents", "facts"]),
        _search(k=3, dedup={"enabled": True}),
        _search(k=3, dedup={"enabled": True, "mode": "merge", "threshold": 0.9}),
        _search(k=4, dedup={"enabled": True, "mode": "keep", "threshold": 0.9}, sources=["notes"]),
        ("Memory", {"op": "get", "scope": "agent", "key": "fact/wiki", "rank": {}}),
        _search(rank={"semantic_weight": 1, "velocity": 2}),
        _search(dedup={"enabled": True, "mode": "squash"}),
        memory_scopes=["agent"], tools=["Memory", "Document"],
    )
    rt, disp = await open_rt({"agents": {"lib": agent}, "memory": LOCAL})
    run = await run_agent(rt, disp, "lib", user_id="u1")
    results = await tool_results(rt, run.id)
    facts, notes, mixed, dropped, merged, kept, on_get, unknown_rank, bad_mode = results[5:]

    assert not facts[0] and [h["key"] for h in facts[1]["results"]] == ["fact/wiki"]
    hit = facts[1]["results"][0]
    assert hit["kind"] == "fact" and hit["provenance"]["origin"] == "set"
    assert hit["provenance"]["source_session_id"] == "chat-1" and hit["provenance"]["source_run_id"] == run.id
    assert hit["score"] == hit["similarity"] and hit["embedded_with"]["model"] == "multilingual-e5-small-q4"

    assert {h["kind"] for h in notes[1]["results"]} == {"note"}
    assert "fact/wiki" not in [h["key"] for h in notes[1]["results"]]
    assert all("provenance" not in h for h in notes[1]["results"])

    assert mixed[0] and "invalid_sources" in mixed[1]

    keys = [h["key"] for h in dropped[1]["results"]]
    assert dropped[1]["dedup_dropped"] >= 1 and not {"note/runbook", "note/runbook2"} <= set(keys)
    survivor = next(h for h in merged[1]["results"] if h["key"] in ("note/runbook", "note/runbook2"))
    assert survivor["value"]["merged_from"][0]["key"] in ("note/runbook", "note/runbook2")
    assert survivor["value"]["value"] in (RUNBOOK, RUNBOOK_2)
    kept_keys = [h["key"] for h in kept[1]["results"]]
    assert {"note/runbook", "note/runbook2"} <= set(kept_keys) and kept[1]["dedup_dropped"] >= 1
    assert any(h.get("duplicate_of") for h in kept[1]["results"])

    assert on_get[0] and "rank applies to search only" in on_get[1]
    assert unknown_rank[0] and "unknown_field" in unknown_rank[1] and "velocity" in unknown_rank[1]
    assert bad_mode[0] and "invalid_input" in bad_mode[1]


async def test_documents_are_a_source_with_their_place_as_provenance(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": {"a": {"model": "echo"}}, "memory": LOCAL})
    async with client_for(rt) as c:
        doc = (await c.post("/v1/_document", json={"op": "create_document", "scope": "user", "title": "Ops"})).json()
        chunk = (await c.post("/v1/_document", json={
            "op": "create_chunk", "scope": "user", "document_id": doc["document_id"], "title": "Runbooks",
            "body": "Postgres deploys follow the runbook in the team wiki."})).json()
        async with rt.pool.connection() as conn:  # the off-run caller's document store is its subject's
            cur = await conn.execute("SELECT scope_id FROM chunks WHERE id = %s", (chunk["id"],))
            row = await cur.fetchone()
        assert row is not None
        subject = row["scope_id"]
        await c.put(f"/v1/_memory/scopes/user/{subject}/keys/cat", json={"value": CAT, "embed": True})
        body = {"scope": "user", "scope_id": subject, "query": QUESTION}
        found = (await c.post("/v1/_memory/search", json={**body, "sources": ["documents"]})).json()
        [hit] = found["results"]
        assert hit["key"] == "doc.chunk:" + chunk["id"] and hit["kind"] == "document"
        assert hit["chunk_id"] == chunk["id"] and hit["document"] == "Ops" and hit["title"] == "Runbooks"
        assert hit["provenance"] == {"document_id": doc["document_id"], "document": "Ops",
                                     "chunk_id": chunk["id"], "title": "Runbooks", "revision": 1}
        both = (await c.post("/v1/_memory/search", json=body)).json()  # no selector: every kind
        assert [h["kind"] for h in both["results"]] == ["document", "note"]
        notes = (await c.post("/v1/_memory/search", json={**body, "sources": ["notes"]})).json()
        assert [h["key"] for h in notes["results"]] == ["cat"]
        searched = (await c.post("/v1/_document", json={"op": "search", "scope": "user", "query": QUESTION})).json()
        assert [x["chunk_id"] for x in searched["chunks"]] == [chunk["id"]]
        assert searched["chunks"][0]["title"] == "Runbooks"
        # an edit re-embeds the body: the old text is no longer what it is found by
        await c.post("/v1/_document", json={"op": "update_chunk", "scope": "user", "id": chunk["id"], "revision": 1,
                                            "body": "The cat purrs on the mat."})
        cats = (await c.post("/v1/_document", json={"op": "search", "scope": "user", "query": "a purring cat",
                                                    "limit": 1})).json()
        assert cats["chunks"][0]["chunk_id"] == chunk["id"] and cats["chunks"][0]["score"] > 0.8


async def test_rank_recency_frequency_and_the_reserved_source_weight_over_http(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": {"a": {"model": "echo"}}, "memory": LOCAL})
    base = "/v1/_memory/scopes/agent/a/keys"
    async with client_for(rt) as c:
        for key, text in (("old", RUNBOOK), ("new", RUNBOOK_2), ("cat", CAT)):
            assert (await c.put(f"{base}/{key}", json={"value": text, "embed": True})).status_code == 200
        async with rt.pool.connection() as conn:  # one of the two runbooks written a month ago
            await conn.execute("UPDATE memory SET updated_at = now() - interval '30 days'"
                               " WHERE tenant_id = %s AND key = 'old'", (TENANT,))
        q = {"scope": "agent", "scope_id": "a", "query": RUNBOOK, "top_k": 2}
        plain = (await c.post("/v1/_memory/search", json=q)).json()
        assert plain["results"][0]["key"] == "old"  # the exact text wins on meaning alone
        fresh = (await c.post("/v1/_memory/search", json={
            **q, "rank": {"recency_weight": 0.2, "recency_half_life_hours": 24}})).json()
        assert [h["key"] for h in fresh["results"]] == ["new", "old"]
        top = fresh["results"][0]
        assert top["score"] == top["similarity"] and top["rank_score"] > fresh["results"][1]["rank_score"]
        assert top["rank_score"] > top["score"]  # the recency term is in the rank, never in the score

        for _ in range(6):  # "cat" returned often: the frequency signal
            await c.post("/v1/_memory/search", json={"scope": "agent", "scope_id": "a", "query": CAT, "top_k": 1})
        often = (await c.post("/v1/_memory/search", json={
            **q, "top_k": 3, "rank": {"semantic_weight": 0.1, "frequency_weight": 1.0}})).json()
        assert often["results"][0]["key"] == "cat" and often["results"][0]["access_count"] >= 6

        noted = (await c.post("/v1/_memory/search", json={**q, "rank": {"source_weight": 0.5}})).json()
        assert noted["rank_note"].startswith("source_weight is reserved")
        assert "rank_note" not in plain and "dedup_dropped" not in plain

        for bad, status, code in (({"rank": {"speed": 1}}, 422, "unknown_field"),
                                  ({"sources": ["docs"]}, 400, "invalid_sources"),  # loomcycle's 400
                                  ({"sources": ["documents", "notes"]}, 400, "invalid_sources"),
                                  ({"dedup": {"mode": "fold"}}, 422, "invalid_input"),
                                  ({"rank": {"recency_weight": 0.5}, "recency_weight": 0.5}, 422, "invalid_input")):
            r = await c.post("/v1/_memory/search", json={**q, **bad})
            assert r.status_code == status and r.json()["code"] == code, (bad, r.text)


async def test_add_infers_facts_once_and_reports_contradictions(open_rt: Any) -> None:
    said = [{"role": "user", "content": "I prefer dark mode in every editor. I live in Berlin with my cat."},
            {"role": "assistant", "content": "Noted."}]
    moved = [{"role": "user", "content": "I live in Paris with my cat."}]
    memory = {**LOCAL, "add": {"related_threshold": 0.5, "merge_threshold": 0.99}}
    agent = scripted(
        ("Memory", {"op": "add", "scope": "user", "messages": said, "metadata": {"chat": "c1"}}),
        ("Memory", {"op": "add", "scope": "user", "messages": said}),  # the same facts again: no new entries
        ("Memory", {"op": "add", "scope": "user", "messages": moved}),
        ("Memory", {"op": "add", "scope": "user", "messages": moved, "infer": False}),
        ("Memory", {"op": "recall", "scope": "user", "query": "which city does the user live in"}),
        ("Memory", {"op": "search", "scope": "user", "query": "editor colour scheme", "sources": ["facts"], "k": 1}),
        ("Memory", {"op": "add", "scope": "user", "messages": []}),
        ("Memory", {"op": "list", "scope": "user", "messages": said}),
        memory_scopes=["user"],
    )
    rt, disp = await open_rt({"agents": {"mem": agent}, "memory": memory})
    run = await run_agent(rt, disp, "mem", user_id="ada")
    results = await tool_results(rt, run.id)
    first, again, contra, verbatim, recall, search = (r[1] for r in results[:6])

    assert first["status"] == "done" and first["event_id"].startswith("add_")
    assert sorted(f["memory"] for f in first["facts"]) == ["I live in Berlin with my cat.",
                                                           "I prefer dark mode in every editor."]
    assert {f["class"] for f in first["facts"]} == {"fact", "preference"}
    assert [f["key"] for f in again["facts"]] == [f["key"] for f in first["facts"]]
    [paris] = contra["facts"]
    assert paris["memory"] == "I live in Paris with my cat."
    berlin = next(f["key"] for f in first["facts"] if "Berlin" in f["memory"])
    assert contra["conflicts"]["enforced"] is False
    assert {"fact": paris["key"], "existing": berlin} in contra["conflicts"]["contradicts"]
    assert verbatim == {"status": "done", "event_id": verbatim["event_id"]}
    assert verbatim["event_id"].startswith("mem_")

    facts = [f["memory"] for f in recall["facts"]]
    assert set(facts) >= {"I live in Berlin with my cat.", "I live in Paris with my cat."}
    assert "I live in Paris with my cat." in facts and all(f["id"].startswith("fact:") for f in recall["facts"])
    [pref] = search["results"]
    assert pref["kind"] == "fact" and pref["value"] == "I prefer dark mode in every editor."
    assert pref["provenance"]["origin"] == "add" and pref["provenance"]["class"] == "preference"
    assert pref["provenance"]["source_run_id"] == run.id
    assert results[6][0] and "messages" in results[6][1]
    assert results[7][0] and "messages applies to add only" in results[7][1]

    async with rt.pool.connection() as conn:  # three facts, the Berlin one still there (report-only)
        cur = await conn.execute("SELECT count(*) AS n FROM memory WHERE tenant_id = %s AND scope = 'user'"
                                 " AND scope_id = 'ada' AND key LIKE 'fact:%%'", (TENANT,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 3
