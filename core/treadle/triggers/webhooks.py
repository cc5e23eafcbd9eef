"""WebhookDef (the def lifecycle's ops, treadle.defs) and the delivery pipeline, shared by the
sidecar's route and the webhook Lambda:

1. the active def by (tenant, name) — unknown or disabled → 404 `unknown_webhook`;
2. (the route reads the raw body, ≤ `body_size_limit_bytes` → else 413);
3. the signature over the raw body, before any parse → 401 `invalid_signature`;
4. the delivery id; an accepted one seen before → 200 `{"duplicate": true, "run_id"}`, nothing new;
5. the per-webhook token bucket → 429 `rate_limited` + Retry-After;
6. the payload mapping (strict JSONPath → untrusted blocks) → 422 `mapping_failed`;
7. claim the delivery id (unique in the database), then spawn a run (idempotency key
   `webhook:<name>:<delivery id>`) or publish to the channel → 202 `{"webhook_name","delivery_id",…}`.
Every outcome is recorded for GET /v1/_webhooks/{name}/recent-deliveries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from treadle.defs.args import parse_spec, require_agent
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain.defs import DefRecord, content_sha256
from treadle.errors import BadPayload, RateLimited, TreadleError, UnknownWebhook
from treadle.ports import AgentDirectory, RunStarter
from treadle.specs.mapping import MappingFailed, project, raw_block
from treadle.specs.webhook import WebhookSpec
from treadle.store.db import Pool
from treadle.store.defs import DefStore
from treadle.store.runs import NewRun
from treadle.store.webhooks import Delivery, WebhookStore
from treadle.telemetry import tracing
from treadle.telemetry.metrics import metrics
from treadle.triggers import signatures as signature
from treadle.triggers.hooks import ScopedPublisher, require_publisher
from treadle.triggers.settings import TriggerSettings

log = logging.getLogger("treadle.webhooks")
KIND = "webhook"
#: a claimed channel delivery without a result after this long is published by a redelivery
ABANDONED_CLAIM = timedelta(seconds=60)


@dataclass(slots=True)
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ActiveWebhook:
    tenant_id: str
    record: DefRecord
    spec: WebhookSpec

    @property
    def name(self) -> str:
        return self.record.name


class WebhookFamily(DefLifecycle):
    """Hooks: normalize (WebhookSpec, the agent exists), content_hash, gate_subject (the agent a
    spawn webhook starts; a channel webhook starts none), view (+ `url_path`)."""

    kind = KIND
    label = "WebhookDef"
    create_promotes = True
    fork_promotes = True

    def __init__(self, defs: DefStore, agents: AgentDirectory) -> None:
        super().__init__(defs)
        self.agents = agents

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        spec = parse_spec(self.label, WebhookSpec, body)
        if spec.agent is not None:
            await require_agent(self.agents, tenant, spec.agent, self.label)
        return spec.body()

    def content_hash(self, body: dict[str, Any]) -> str:
        return content_sha256(body)

    def gate_subject(self, name: str, body: Mapping[str, Any] | None) -> str | None:
        if body is None or body.get("delivery", "spawn") != "spawn":
            return None
        agent = body.get("agent")
        return agent if isinstance(agent, str) else None

    async def view(self, tenant: str, record: DefRecord) -> dict[str, Any]:
        return {**self.record_view(record), "url_path": f"/v1/_webhooks/{record.name}"}


class WebhookService:
    def __init__(
        self, pool: Pool, starter: RunStarter, agents: AgentDirectory, publisher: ScopedPublisher | None,
        settings: TriggerSettings | None = None,
    ) -> None:
        self.starter = starter
        self.publisher = publisher
        self.settings = settings or TriggerSettings()
        self.family = WebhookFamily(DefStore(pool), agents)
        self.store = WebhookStore(pool)

    async def active(self, tenant_id: str, name: str) -> ActiveWebhook:
        record = await self.family.defs.get(tenant_id, KIND, name=name)
        if record is None:
            raise UnknownWebhook(f"unknown webhook {name!r}")
        spec = WebhookSpec.model_validate(record.body)
        if not spec.enabled:
            raise UnknownWebhook(f"unknown webhook {name!r}")
        return ActiveWebhook(tenant_id, record, spec)

    async def receive(self, hook: ActiveWebhook, headers: Mapping[str, str], body: bytes) -> Reply:
        """One delivery in its span (the run it starts is its child), counted by outcome: `accepted`,
        `duplicate`, or the refusal's error code."""
        outcome = "error"
        try:
            with tracing.span(f"webhook {hook.name}", {"treadle.webhook.name": hook.name,
                                                       "treadle.tenant": hook.tenant_id}) as span:
                try:
                    reply = await self._receive(hook, headers, body)
                except TreadleError as exc:
                    outcome = exc.code
                    raise
                outcome = "duplicate" if reply.body.get("duplicate") else "accepted"
                tracing.set_outcome(span, outcome)
                return reply
        finally:
            metrics().webhook_delivery(outcome)

    async def _receive(self, hook: ActiveWebhook, headers: Mapping[str, str], body: bytes) -> Reply:
        """Steps 3-7 for a body already read within the def's cap (`headers`: lower-case names)."""
        spec, rec, tenant = hook.spec, hook.record, hook.tenant_id
        try:
            signature.verify(spec.auth, headers, body, allowlist=self.settings.env_allowlist())
        except signature.InvalidSignature as exc:
            await self.reject(hook, exc.verdict, exc.message)
            raise
        except signature.SecretUnresolvable as exc:
            await self.reject(hook, "unresolvable_secret", exc.detail)
            raise
        try:
            delivery_id = signature.delivery_id(spec.auth, headers, body)
        except signature.BadDeliveryId as exc:
            await self.reject(hook, "rejected_delivery_id", exc.message)
            raise
        base = {"webhook_name": hook.name, "delivery_id": delivery_id}

        seen = await self.store.find_accepted(tenant, hook.name, delivery_id)
        if seen is not None:
            return await self._duplicate(hook, seen, base, body)
        allowed, retry_after = await self.store.take_token(
            tenant, hook.name, spec.rate_limit.requests_per_minute, spec.rate_limit.burst
        )
        if not allowed:
            await self.reject(hook, "rejected_rate", "rate limited", delivery_id)
            raise RateLimited(f"webhook {hook.name!r} is over its rate limit", retry_after)
        try:
            value, new_run = self._prepare(hook, delivery_id, body)
        except (MappingFailed, BadPayload) as exc:
            await self.reject(hook, "rejected_mapping", exc.message, delivery_id)
            raise

        claim = await self.store.claim(tenant, hook.name, delivery_id, rec.def_id, rec.version, spec.delivery)
        if claim is None:  # a concurrent identical delivery claimed it first
            seen = await self.store.find_accepted(tenant, hook.name, delivery_id)
            return await self._duplicate(hook, seen, base, body)
        try:
            if new_run is not None:
                run, _ = await self.starter.start_run(new_run)
                await self.store.complete(claim.id, run_id=run.id, hooks=bool(spec.on_complete))
                return Reply(202, {**base, "run_id": run.id})
            result = await self._publish(hook, value, spec.user_id)
            await self.store.complete(claim.id, result=result)
            return Reply(202, {**base, "channel": spec.channel, **_published(result)})
        except TreadleError as exc:
            await self.store.fail(claim.id, "rejected_delivery", f"{exc.code}: {exc.message}")
            raise

    async def dry_run(self, hook: ActiveWebhook, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """POST /v1/_webhooks/{name}/test: the pipeline without effects (no run, no claim, no token)."""
        spec = hook.spec
        out: dict[str, Any] = {"webhook_name": hook.name, "def_id": hook.record.def_id, "version": hook.record.version,
                               "delivery": spec.delivery}
        if spec.auth.kind == "hmac":
            header, given = signature.given_signature(spec.auth, headers)
        else:
            header, given = spec.auth.header or "authorization", "-"
        if not given:
            out["signature"] = {"checked": False, "header": header}
        else:
            try:
                signature.verify(spec.auth, headers, body, allowlist=self.settings.env_allowlist())
                out["signature"] = {"checked": True, "valid": True}
            except signature.InvalidSignature as exc:
                out["signature"] = {"checked": True, "valid": False, "code": exc.code, "error": exc.message}
            except signature.SecretUnresolvable as exc:  # the operator's route: the detail helps
                out["signature"] = {"checked": True, "valid": False, "code": exc.code, "error": exc.detail}
        try:
            delivery_id = signature.delivery_id(spec.auth, headers, body)
            out["delivery_id"] = delivery_id
            seen = await self.store.find_accepted(hook.tenant_id, hook.name, delivery_id)
            out["duplicate_of"] = seen.run_id if seen else None
            value, new_run = self._prepare(hook, delivery_id, body)
        except TreadleError as exc:
            return {**out, "ok": False, "code": exc.code, "error": exc.message}
        if new_run is not None:
            out.update(agent=new_run.agent, user_id=new_run.user_id, input=new_run.segments, metadata=new_run.metadata)
        else:
            out.update(channel=spec.channel, value=value)
        return {**out, "ok": True}

    async def recent(self, tenant_id: str, name: str, limit: int) -> dict[str, Any]:
        known = await self.family.defs.list(tenant_id, KIND, name=name, include_retired=True, limit=1)
        if not known:
            raise UnknownWebhook(f"unknown webhook {name!r}")
        rows = await self.store.recent(tenant_id, name, limit)
        return {"webhook_name": name, "deliveries": [r.to_api() for r in rows]}

    # -- steps -----------------------------------------------------------------------------------

    def _prepare(self, hook: ActiveWebhook, delivery_id: str, body: bytes) -> tuple[Any, NewRun | None]:
        """(channel value, None) or (None, the run to start); raises 400/422 on a bad payload."""
        spec = hook.spec
        entries = spec.mapping_entries()
        payload: Any = None
        if entries or spec.delivery == "channel":
            try:
                payload = json.loads(body)
            except ValueError:
                if entries:
                    raise BadPayload("the body is not JSON, and this webhook maps JSON fields") from None
                payload = {"raw": body.decode("utf-8", errors="replace")}
        if spec.delivery == "channel":
            return payload, None
        if entries:
            blocks, mapped_user = project(payload, entries)
        else:
            blocks, mapped_user = [raw_block(body)], None
        intro = {"type": "trusted-text",
                 "text": f"Webhook {hook.name!r} delivered an event; its content follows as untrusted data."}
        metadata = {**spec.metadata, "webhook": hook.name, "webhook_def_id": hook.record.def_id,
                    "webhook_version": hook.record.version, "delivery_id": delivery_id, "trigger": "webhook"}
        assert spec.agent is not None
        return None, NewRun(
            tenant_id=hook.tenant_id,
            agent=spec.agent,
            segments=[{"role": "user", "content": [intro, *blocks]}],
            user_id=mapped_user or spec.user_id,
            metadata=metadata,
            idempotency_key=f"webhook:{hook.name}:{delivery_id}",
        )

    async def _publish(self, hook: ActiveWebhook, value: Any, user_id: str | None) -> dict[str, Any]:
        publisher = require_publisher(self.publisher)
        assert hook.spec.channel is not None
        return await publisher.publish(hook.tenant_id, hook.spec.channel, value, agent=hook.spec.agent, user_id=user_id)

    async def _duplicate(self, hook: ActiveWebhook, seen: Delivery | None, base: dict[str, Any], body: bytes) -> Reply:
        """A redelivery answers with the original run id and starts nothing — except finishing a
        delivery whose first receiver died between its claim and its effect: a spawn is redone
        under the same run key (so it can never make a second run), a channel publish only once
        the claim is clearly abandoned."""
        run_id = seen.run_id if seen else None
        result = seen.result if seen else None
        if seen is not None and seen.state == "claimed" and seen.delivery == hook.spec.delivery:
            try:
                value, new_run = self._prepare(hook, base["delivery_id"], body)
                if new_run is not None:
                    run, _ = await self.starter.start_run(new_run)
                    run_id = run.id
                    await self.store.complete(seen.id, run_id=run.id, hooks=bool(hook.spec.on_complete))
                elif datetime.now(UTC) - seen.received_at > ABANDONED_CLAIM:
                    result = await self._publish(hook, value, hook.spec.user_id)
                    await self.store.complete(seen.id, result=result)
            except TreadleError as exc:
                log.warning("webhook %s: finishing delivery %s failed: %s", hook.name, base["delivery_id"], exc.message)
        await self.reject(hook, "accepted_replay", "duplicate delivery", base["delivery_id"])
        out = {**base, "duplicate": True, "run_id": run_id}
        if result:
            out.update(_published(result))
        return Reply(200, out)

    async def reject(self, hook: ActiveWebhook, verdict: str, error: str, delivery_id: str | None = None) -> None:
        try:
            await self.store.record(
                hook.tenant_id, hook.name, verdict, delivery_id=delivery_id, def_id=hook.record.def_id,
                version=hook.record.version, error=error,
            )
        except TreadleError as exc:  # triage is best effort
            log.warning("webhook %s: could not record %s: %s", hook.name, verdict, exc.message)


def _published(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("message_id", "woken") if k in result}

