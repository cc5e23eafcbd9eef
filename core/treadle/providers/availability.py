"""loomcycle's resolver matrix (`GET /v1/_resolver`, `POST /v1/_resolve/probe`): per provider
whether it is `excluded` (its key variable is not set: never probed), `reachable` (its last probe
listed its models), each model's status — `listed` (in the vendor's list, or a configured model
before any probe) and `stalled` (this process's last call to it failed with a retryable error:
429, 5xx, a timeout; its next answer clears it) — and when and why it was last checked.

Until the first probe the matrix is loomcycle's stub probe: a provider holding its key is
reachable with its configured models listed. A probe (`probe`) asks every provider that is not
excluded for its models at once, 5 s each, the way loomcycle's probe loop does; a failed probe
keeps the models it knew and says why. treadle routes by per-call fallback (engine/routing.py),
not by this matrix: it reports what the process saw. Each process keeps its own (each Lambda
environment in the cloud shape)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from treadle.errors import ProviderError
from treadle.providers.base import ModelLister, Provider

#: (provider id, model) → the error of this process's last failed call to it (cleared by an answer)
STALLED: dict[tuple[str, str], str] = {}
PROBE_TIMEOUT_S = 5.0


def note_call(provider_id: str, model: str, error: str | None) -> None:
    """After a model call: a retryable failure (`error`) stalls the model, an answer clears it."""
    if error is not None:
        STALLED[(provider_id, model)] = error
    elif STALLED:
        STALLED.pop((provider_id, model), None)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(slots=True)
class ProviderState:
    excluded: bool = False
    reachable: bool = False
    listed: set[str] = field(default_factory=set)
    configured: set[str] = field(default_factory=set)
    last_check: dt.datetime | None = None
    last_error: str = ""


class Matrix:
    def __init__(self, excluded: Mapping[str, str | None], configured: Mapping[str, set[str]]) -> None:
        """`excluded`: provider id → why it cannot serve (its key is not set), None when it can;
        `configured`: provider id → the models the config routes to on it."""
        now = _now()
        self.providers: dict[str, ProviderState] = {}
        for pid, reason in excluded.items():
            models = set(configured.get(pid, ()))
            self.providers[pid] = ProviderState(
                excluded=reason is not None, reachable=reason is None, listed=set() if reason else set(models),
                configured=models, last_check=now, last_error=reason or "")

    async def probe(self, providers: Mapping[str, Provider], timeout_s: float = PROBE_TIMEOUT_S) -> None:
        """List every provider's models now (those not excluded, concurrently)."""
        async def one(pid: str, state: ProviderState) -> None:
            provider = providers.get(pid)
            try:
                if not isinstance(provider, ModelLister):
                    raise ProviderError(f"{pid}: its driver cannot list models", code="provider_list_failed")
                models = await provider.list_models(timeout_s)
            except ProviderError as exc:
                state.reachable, state.last_error = False, exc.message
            else:
                state.reachable, state.listed, state.last_error = True, set(models), ""
            state.last_check = _now()

        await asyncio.gather(*(one(pid, st) for pid, st in self.providers.items() if not st.excluded))

    def snapshot(self) -> dict[str, Any]:
        """loomcycle's wire shape: `{generated_at, providers: {id: {excluded, reachable, models:
        {name: {listed, stalled}}, last_check, last_error?}}}`."""
        out: dict[str, Any] = {}
        for pid, st in sorted(self.providers.items()):
            models = {m: {"listed": m in st.listed, "stalled": (pid, m) in STALLED}
                      for m in sorted(st.listed | st.configured)}
            row: dict[str, Any] = {"excluded": st.excluded, "reachable": st.reachable, "models": models,
                                   "last_check": _stamp(st.last_check)}
            if st.last_error:
                row["last_error"] = st.last_error
            out[pid] = row
        return {"generated_at": _stamp(_now()), "providers": out}

    def available(self, provider_id: str, model: str) -> bool:
        """Whether the matrix would route to (provider, model): reachable, listed, not stalled."""
        st = self.providers.get(provider_id)
        return (st is not None and not st.excluded and st.reachable and model in st.listed
                and (provider_id, model) not in STALLED)


def _stamp(when: dt.datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when is not None else None
