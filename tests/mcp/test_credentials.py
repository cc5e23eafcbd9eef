"""Per-run credentials: sealing (AES-GCM, the tenant as authenticated data, the key id checked),
header substitution, masking, the request field's limits, and a sub-agent reading its root's."""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from treadle.errors import ConfigError
from treadle.mcp.credentials import (
    MASK,
    CredentialMissing,
    CredentialSealer,
    CredentialUnavailable,
    UserCredentials,
    load_credentials,
    mask,
    seal_credentials,
    substitute,
)
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime

KEY = base64.b64encode(os.urandom(32)).decode()


def test_sealed_credentials_open_only_for_their_tenant_and_key() -> None:
    sealer = CredentialSealer.from_env({"TREADLE_CREDENTIALS_KEY": KEY})
    assert not sealer.ephemeral
    sealed = sealer.seal("t1", {"github": "ghp-secret-value"})
    assert b"ghp-secret-value" not in sealed
    assert sealer.open("t1", sealed) == {"github": "ghp-secret-value"}
    with pytest.raises(CredentialUnavailable, match="another tenant"):
        sealer.open("t2", sealed)
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(CredentialUnavailable):
        sealer.open("t1", tampered)
    other = CredentialSealer.from_env({})
    assert other.ephemeral
    with pytest.raises(CredentialUnavailable, match="TREADLE_CREDENTIALS_KEY"):
        other.open("t1", sealed)
    for bad in ("not base64!", base64.b64encode(b"short").decode()):
        with pytest.raises(ConfigError):
            CredentialSealer.from_env({"TREADLE_CREDENTIALS_KEY": bad})


def test_substitution_and_masking() -> None:
    headers = {"Authorization": "Bearer ${run.credentials.gh}", "X-Team": "core", "X-Other": "${run.credentials.o}"}
    with pytest.raises(CredentialMissing, match="needs the run credential") as missing:
        substitute(headers, {"gh": "v4lue"}, server="github")
    assert "v4lue" not in missing.value.message and "o" in missing.value.message
    assert substitute(headers, {"gh": "v4lue"}, server="github", drop_missing=True) == {
        "Authorization": "Bearer v4lue", "X-Team": "core"}
    assert substitute(headers, {"gh": "a", "o": "b"}, server="s")["X-Other"] == "b"
    assert mask("token v4lue and v4lue2", {"gh": "v4lue", "x": "v4lue2", "tiny": "ab"}) == f"token {MASK} and {MASK}"


def test_the_request_field_is_bounded() -> None:
    field: TypeAdapter[Any] = TypeAdapter(UserCredentials)
    assert field.validate_python({"gh": "x"}) == {"gh": "x"}
    for bad in ({"bad name": "x"}, {"gh": ""}, {"gh": "x" * 8193}, {f"k{i}": "v" for i in range(33)}):
        with pytest.raises(ValidationError):
            field.validate_python(bad)


async def test_a_sub_agent_run_reads_its_root_runs_credentials(migrated_db_url: str) -> None:
    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "x"}]}]
    async with open_test_runtime({"echo": {"model": "echo"}}, database_url=migrated_db_url) as (rt, disp):
        root, _ = await rt.start_run(NewRun(tenant_id="default", agent="echo", segments=segs,
                                            sealed_credentials=seal_credentials("default", {"k": "root-secret"})))
        child, _ = await rt.start_run(NewRun(tenant_id="default", agent="echo", segments=segs,
                                             parent_run_id=root.id, root_run_id=root.id, depth=1))
        plain, _ = await rt.start_run(NewRun(tenant_id="default", agent="echo", segments=segs))
        assert await load_credentials(rt.pool, "default", child.id) == {"k": "root-secret"}
        assert await load_credentials(rt.pool, "default", plain.id) == {}
        assert await load_credentials(rt.pool, "other-tenant", root.id) == {}
        async with rt.pool.connection() as conn:
            cur = await conn.execute("SELECT sealed FROM run_credentials WHERE run_id = %s", (root.id,))
            row = await cur.fetchone()
            assert row is not None and b"root-secret" not in bytes(row["sealed"])  # sealed at rest
        await rt.cancel_run("default", root.id, "done")
        await disp.drain()
        assert (await rt.runs.get("default", root.id)).status == "cancelled"  # type: ignore[union-attr]
        assert await load_credentials(rt.pool, "default", root.id) == {}  # gone with the run's end
