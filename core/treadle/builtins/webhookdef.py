"""Built-in `WebhookDef` (default-deny): author and manage inbound webhooks.

The agent's `webhook_def_scopes` decides which webhooks it may touch, by the agent a webhook
spawns (`self`, `named:<agent>`); channel-delivery webhooks need `any`. Empty (the default)
refuses every op — operators manage webhooks over POST /v1/_webhookdef.
"""

from __future__ import annotations

from typing import Any

from treadle.builtins.scheduledef import run_trigger_op
from treadle.defs.lifecycle import CORE_OPS
from treadle.defs.tooling import def_tool_schema
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult

OPS = CORE_OPS


class WebhookDefTool:
    name = "WebhookDef"
    effects: ToolEffects = "transactional"  # every write goes through the step's transaction
    description = (
        "Manage inbound webhooks. op: create (name, overlay{delivery spawn|channel, agent, channel, auth{kind hmac|"
        "bearer, header, signing_secret_env, delivery_id_header, bearer_token_env}, rate_limit, payload_mapping, "
        "metadata, on_complete[]}) | fork | get | list | retire | promote | verify. Secrets are environment "
        "variable names. Limited to the agents in this agent's webhook_def_scopes."
    )
    input_schema: dict[str, Any] = def_tool_schema(OPS, "WebhookDef fields", create_promotes=True,
                                                   fork_promotes=True)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        return await run_trigger_op(ctx, "webhook_def_scopes", "WebhookDef", args)
