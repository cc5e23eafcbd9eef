"""Retention that archives, and erasure that reaches volumes (issue 42 item 4), in the sidecar's
shape (host-directory volumes): with `retention.archive`, each expired batch — run trees with their
events, channel messages, memory, stored responses — is written as JSON Lines into the tenant's
archive volume, per user, before it is deleted; `POST /v1/_erasure` then deletes the files the
subject's runs wrote and its part of that archive, lists them in the receipt, and afterwards no row
of any table and no file of any volume mentions the subject's id or words — while another user's
files and archive stay."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.test_client_tools import rows_containing
from tests.support.e2e import query
from tests.support.tenancy import api, bearer, mint
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime

ALICE, BOB = "alice-" + secrets.token_hex(5), "bob-" + secrets.token_hex(5)
WORDS = {ALICE: "alice-words-" + secrets.token_hex(6), BOB: "bob-words-" + secrets.token_hex(6)}


def writer(user: str) -> dict[str, Any]:
    """Writes the user's words into the shared `notes` volume, then answers."""
    return {"model": "script", "tools": ["Write"], "volumes": [{"name": "notes"}],
            "mock": {"script": [{"tool": "Write", "input": {"path": f"by-{user}/note.md", "content": WORDS[user]}},
                                {"text": f"wrote {WORDS[user]}"}]}}


CONFIG: dict[str, Any] = {
    "volumes": {"notes": {}, "vault": {}},
    "retention": {"days": 30, "memory_days": 30, "channel_messages_days": 30, "archive": {"volume": "vault"}},
    "channels": {"inbox": {"scope": "user"}},
}


@pytest.fixture
async def rig(migrated_db_url: str, tmp_path: Path) -> AsyncIterator[tuple[Any, Any, Path]]:
    root = tmp_path / "volumes"
    async with AsyncExitStack() as stack:
        rt, disp = await stack.enter_async_context(open_test_runtime(
            {"w-alice": writer(ALICE), "w-bob": writer(BOB), "echo": {"model": "echo"}},
            database_url=migrated_db_url, config=CONFIG, home=tmp_path, volumes_root=root, auth_cache_seconds=0))
        yield rt, disp, root


def files_mentioning(root: Path, needles: list[str]) -> list[str]:
    """Every file under the volumes root whose path or bytes hold one of `needles`."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                  and any(n in str(p.relative_to(root)) or n.encode() in p.read_bytes() for n in needles))


async def seed(rt: Any, disp: Any, user: str) -> list[str]:
    """The user's note (a run that writes it), and two runs and a memory row and a channel message
    that are expired; their ids."""
    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": f"go {WORDS[user]}"}]}]
    ids = [(await rt.start_run(NewRun(tenant_id="acme", user_id=user, agent=agent, segments=segs)))[0].id
           for agent in (f"w-{user.split('-')[0]}", "echo", "echo")]
    await disp.drain()
    db = rt.database_url
    await query(db, "UPDATE runs SET completed_at = now() - interval '40 days' WHERE id = ANY(%s)", (ids[1:],))
    await query(db, "INSERT INTO memory (tenant_id, scope, scope_id, key, value, updated_at) VALUES"
                " ('acme', 'user', %s, 'note', to_jsonb(%s::text), now() - interval '40 days')", (user, WORDS[user]))
    await query(db, "INSERT INTO channels (tenant_id, name, scope) VALUES ('acme', 'inbox', 'user')"
                " ON CONFLICT DO NOTHING")
    await query(db, "INSERT INTO channel_messages (tenant_id, channel, scope_id, payload, published_at) VALUES"
                " ('acme', 'inbox', %s, jsonb_build_object('text', %s::text), now() - interval '40 days')",
                (user, WORDS[user]))
    return ids


async def test_retention_archives_per_user_then_erasure_removes_the_subjects_files(rig: Any) -> None:
    rt, disp, root = rig
    runs = {user: await seed(rt, disp, user) for user in (ALICE, BOB)}
    await query(rt.database_url, "INSERT INTO memory (tenant_id, scope, scope_id, key, value, updated_at) VALUES"
                " ('acme', 'agent', 'echo', 'shared', '\"agent data\"', now() - interval '40 days')")
    notes = root / "t" / "acme" / "v" / "notes"
    assert (notes / f"by-{ALICE}" / "note.md").read_text() == WORDS[ALICE]

    # retention: every expired batch archived into the tenant's `vault`, per user, then deleted
    total = 0
    while n := await rt.enforce_retention(force=True):
        total += n
    assert total == 2 * 2 + 2 + 2 + 1  # 4 runs, 2 memory rows of users and one of the agent, 2 messages
    left = await query(rt.database_url, "SELECT count(*) AS n FROM runs WHERE id = ANY(%s)",
                       ([*runs[ALICE][1:], *runs[BOB][1:]],))
    assert left[0]["n"] == 0
    vault = root / "t" / "acme" / "v" / "vault" / "retention"
    archived: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in vault.rglob("*.jsonl"):  # retention/<class>/u/<user>/<day>/<hash>.jsonl or <class>/_/<day>/…
        parts = p.relative_to(vault).parts
        key = (parts[0], parts[2] if parts[1] == "u" else "_")
        archived.setdefault(key, []).extend(json.loads(line) for line in p.read_text().splitlines())
    assert set(archived) == {(cls, who) for cls in ("runs", "memory", "channel_messages") for who in (ALICE, BOB)} \
        | {("memory", "_")}
    alice_runs = archived[("runs", ALICE)]
    assert sorted(doc["run"]["id"] for doc in alice_runs) == sorted(runs[ALICE][1:])
    assert all(doc["events"] and doc["events"][0]["seq"] == 1 for doc in alice_runs)  # the transcript with it
    assert WORDS[ALICE] in json.dumps(alice_runs) and WORDS[BOB] not in json.dumps(alice_runs)
    assert archived[("memory", ALICE)][0]["value"] == WORDS[ALICE]
    assert archived[("memory", "_")][0]["value"] == "agent data"

    # erasure: the dry run lists the files, the real one deletes them
    async with api(rt) as c:
        operator = bearer(await mint(c, {}, "operator"))
        acme = bearer(await mint(c, operator, "acme-admin", tenant="acme", scopes=["substrate:tenant"]))
        dry = (await c.post("/v1/_erasure", json={"subject": ALICE}, headers=acme)).json()
        assert f"t/acme/v/notes/by-{ALICE}/note.md" in dry["files"]
        assert sum("/retention/" in f for f in dry["files"]) == 3 and dry["deleted"]["volume_files"] == 4
        assert (notes / f"by-{ALICE}" / "note.md").exists()  # a dry run deletes nothing
        done = await c.post("/v1/_erasure", json={"subject": ALICE, "dry_run": False, "confirm": ALICE},
                            headers=acme)
        assert done.status_code == 200, done.text
        assert done.json()["files"] == dry["files"]

    # nothing of alice in any volume or any table of acme; bob's note and archive intact
    assert files_mentioning(root, [ALICE, WORDS[ALICE]]) == []
    assert [h for h in rows_containing(rt.database_url, [ALICE, WORDS[ALICE]]) if h] == []
    assert (notes / f"by-{BOB}" / "note.md").read_text() == WORDS[BOB]
    assert len(files_mentioning(root, [WORDS[BOB]])) == 4  # the note, its runs, memory and message archived
