"""loomcycle's governance and operations meta-tools whose features treadle has: `erasure` (as
POST /v1/_erasure), `credentialdef` (as POST /v1/_credentialdef) and `resolve_probe` (as POST
/v1/_resolve/probe), under loomcycle's names and argument schemas. Each calls its route's function,
so MCP and HTTP cannot drift apart; each is scoped as its route (api/auth.py TOOL_SCOPES)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from treadle.api.mcp.registry import _Args, tool
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.wire.governance import CredentialOp, ErasureRequest


class ErasureArgs(_Args):
    """loomcycle's: `op` report (default, read-only) or execute; execute is a dry run unless
    `dry_run: false` and `confirm` equals the subject."""

    subject: str = Field(min_length=1, max_length=256)
    op: Literal["report", "execute"] = "report"
    dry_run: bool | None = None
    confirm: str | None = Field(default=None, max_length=256)

    @model_validator(mode="after")
    def _report_is_read_only(self) -> ErasureArgs:
        if self.op == "report" and (self.dry_run is False or self.confirm is not None):
            raise ValueError("dry_run and confirm: only with op execute (a report changes nothing)")
        return self


@tool("erasure", "Report or erase everything this deployment holds about one subject (a user id) of your tenant "
      "(as POST /v1/_erasure). op=report (default) counts, read-only; op=execute is a dry run unless dry_run is "
      "false and confirm equals the subject. The answer is treadle's receipt: {tenant, subject, dry_run, deleted, "
      "files, notes}.", ErasureArgs)
async def erasure(rt: Runtime, who: Principal, a: ErasureArgs) -> dict[str, Any]:
    from treadle.api.erasure import erase_subject

    dry_run = True if a.op == "report" else a.dry_run is not False
    return await erase_subject(ErasureRequest(subject=a.subject, dry_run=dry_run, confirm=a.confirm), rt, who)


@tool("credentialdef", "CredentialDef ops (create/get/list/delete/rotate; as POST /v1/_credentialdef): named "
      "secrets sealed at rest, scoped tenant|user|agent (user: your subject by default); get/list answer metadata "
      "only, never the value.", CredentialOp)
async def credentialdef(rt: Runtime, who: Principal, a: CredentialOp) -> dict[str, Any]:
    from treadle.api.credentialdefs import credential_op

    return await credential_op(a, rt, who)


class NoArgs(_Args):
    pass


@tool("resolve_probe", "Re-probe every configured provider now and answer the refreshed availability matrix "
      "(as POST /v1/_resolve/probe; the operator's).", NoArgs)
async def resolve_probe(rt: Runtime, who: Principal, _a: NoArgs) -> dict[str, Any]:
    from treadle.api.introspection import resolve_probe as probe

    return await probe(rt, who)
