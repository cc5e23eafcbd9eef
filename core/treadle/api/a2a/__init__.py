"""A2A 1.0 server (the official `a2a-sdk`): treadle agents that other agents call.

Which agents are served is operator config (`a2a_server_cards:`, specs/a2a.py), default none —
with no card every A2A route answers 404. Routes (loomcycle's paths):

    GET  /.well-known/agent-card.json   the Agent Card (public, as A2A discovery expects)
    POST /a2a/push                      push notifications from peers this treadle calls (push.py)
    POST /a2a/jsonrpc                   the JSON-RPC binding
         /a2a/v1/...                    the HTTP+JSON binding (message:send, tasks/{id}, …)

Every binding request is authenticated like the rest of the API (bearer, `X-Treadle-Tenant`)
and needs the scope of `POST /v1/runs`; its tasks are the caller's tenant's runs (handler.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import Receive, Scope, Send

from treadle import __version__
from treadle.api.a2a.push import PUSH_PATH, push_route
from treadle.api.auth import TENANT_HEADER, Authenticator, authorize
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import bind_request
from treadle.errors import NotFound, StoreError
from treadle.runtime import Runtime
from treadle.specs.a2a import A2AServerCard

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext
    from a2a.types.a2a_pb2 import AgentCard

CARD_PATH = "/.well-known/agent-card.json"
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/v1"
#: the route whose scope an A2A call needs (a message may start a run)
SCOPE_OF = ("POST", "/v1/runs")


def served_card(rt: Runtime) -> A2AServerCard:
    cards = rt.config.a2a_server_cards
    if not cards:
        raise NotFound("this treadle serves no A2A agent (a2a_server_cards: in treadle.yaml)")
    return next(iter(cards.values()))


def agent_card(card: A2AServerCard, base_url: str) -> AgentCard:
    from a2a.types import a2a_pb2 as pb

    out = pb.AgentCard(
        name=card.name, description=card.description or card.name, version=__version__,
        supported_interfaces=[
            pb.AgentInterface(url=base_url + JSONRPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0"),
            pb.AgentInterface(url=base_url + REST_PATH, protocol_binding="HTTP+JSON", protocol_version="1.0"),
            # A2A 0.3 clients: the same endpoint (the SDK's compat layer); the card then carries 0.3's
            # `url` / `preferredTransport` / `protocolVersion` beside 1.0's fields
            pb.AgentInterface(url=base_url + JSONRPC_PATH, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=pb.AgentCapabilities(streaming=card.capabilities.streaming,
                                          push_notifications=card.capabilities.push_notifications,
                                          extended_agent_card=False),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id=a.skill, name=a.skill_name or a.agent_name, description=a.description or a.agent_name,
                              tags=a.tags or [a.agent_name], input_modes=a.input_modes, output_modes=a.output_modes)
                for a in card.exposed_agents],
    )
    if card.provider is not None:
        out.provider.organization = card.provider.organization
        out.provider.url = card.provider.url
    out.security_schemes["bearer"].http_auth_security_scheme.scheme = "Bearer"
    out.security_requirements.add().schemes["bearer"].SetInParent()
    return out


def _runtime(request: Request) -> Runtime:
    rt = getattr(request.app.state, "runtime", None)
    if rt is None:
        raise StoreError("treadle is starting; the runtime is not ready yet")
    return rt  # type: ignore[no-any-return]


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


async def card_route(request: Request) -> Response:
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    return JSONResponse(agent_card_to_dict(agent_card(served_card(_runtime(request)), _base_url(request))))


class BindingEndpoint:
    """The ASGI endpoint of every binding route: treadle's bearer, scope and tenant binding first
    (401/403/404 through the API's error handlers), then the SDK's routes, built on first use (the
    SDK is not imported at a cold start)."""

    _sdk: Router | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        rt = _runtime(request)
        card = served_card(rt)
        auth: Authenticator = request.app.state.authenticator
        who = await auth.authenticate(request.headers.get("authorization"), rt)
        who = authorize(who, *SCOPE_OF, request.headers.get(TENANT_HEADER))
        bind_request(who, request.url.path)
        scope["treadle.a2a"] = (rt, who, card)
        if BindingEndpoint._sdk is None:
            BindingEndpoint._sdk = Router(routes=binding_routes())
        await BindingEndpoint._sdk(scope, receive, send)


def _context_builder() -> Any:
    from a2a.server.routes import DefaultServerCallContextBuilder

    class TreadleContext(DefaultServerCallContextBuilder):
        def build(self, request: Request) -> ServerCallContext:
            context = super().build(request)
            rt, who, card = request.scope["treadle.a2a"]
            context.state.update({"treadle.rt": rt, "treadle.who": who, "treadle.card": card})
            context.tenant = who.tenant_id
            return context

    return TreadleContext()


def binding_routes() -> list[BaseRoute]:
    """The SDK's JSON-RPC and HTTP+JSON routes over the run handler, each behind `_guarded`."""
    from a2a.server.routes import create_jsonrpc_routes, create_rest_routes

    from treadle.api.a2a.handler import RunTaskHandler

    handler = RunTaskHandler()
    builder = _context_builder()
    routes = [*create_jsonrpc_routes(handler, JSONRPC_PATH, context_builder=builder, enable_v0_3_compat=True),
              *create_rest_routes(handler, context_builder=builder, path_prefix=REST_PATH)]
    return list(routes)


router = APIRouter(tags=["a2a"], route_class=LazyAPIRoute)
router.routes.append(Route(CARD_PATH, card_route, methods=["GET"], include_in_schema=False))
router.routes.append(Route(PUSH_PATH, push_route, methods=["POST"], include_in_schema=False))
router.routes.append(Route(JSONRPC_PATH, BindingEndpoint(), methods=["POST"], include_in_schema=False))
router.routes.append(Route(REST_PATH + "/{rest:path}", BindingEndpoint(), methods=["GET", "POST", "DELETE"],
                           include_in_schema=False))

__all__ = ["CARD_PATH", "JSONRPC_PATH", "REST_PATH", "agent_card", "router", "served_card"]
