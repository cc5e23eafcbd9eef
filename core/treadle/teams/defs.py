"""TeamDef: multi-agent workflows as versioned definitions on the one def lifecycle.

A body is the workflow graph (teams/graph.py), normalized as loomcycle stores it; it is validated
before anything is written — an invalid graph is refused with its class's code and nothing is
stored. `content_sha256` is loomcycle's (teams/hashing.py: name + graph, colours excluded).

Ops: the lifecycle's (create, fork, get, list, retire, promote, verify) and loomcycle's
- `delete {name}`: retires every version of the name (runs that pinned one keep reading it; a
  later create starts the name again) → `{name, deleted: true}`;
- `render_diagram {name | def_id, highlight_state?, format?: mermaid | svg}` → `{name, def_id,
  format, diagram}` (svg: treadle's picture of the graph, teams/svg.py; loomcycle has mermaid
  only); with an `overlay` it renders that unsaved graph after the same validation (a dry run,
  `preview: true`, nothing stored); with a team run's `run_id` it renders the version the run
  walks with the run's current state highlighted (`state`, `run_status`, `steps`);
- `run {name | def_id, input?, interrupt_on_cap?, wait?, timeout_ms?}`: starts a team run
  (teams/runs.py) and, unless `wait` is false, answers its result once it ends: `{name, def_id,
  run_id, status: completed | iteration_cap | failed, final_state?, final_output?, steps}`.
  Through the TeamDef tool the calling run parks instead (builtins/teamdef.py).
loomcycle's `board_chunk_id`/`board_scope` (Document task boards) are refused by name: treadle
has no Document boards. treadle.yaml's `teams:` are the static base (validated when treadle starts;
a run of one records it as a version first; `create` refuses their names, `fork` overrides one).
The TeamDef tool is not sub-gated by scopes (as in loomcycle, holding the tool is the grant), and
every op stays in the caller's tenant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from treadle.defs.args import opt_bool, opt_str
from treadle.defs.gates import Gate, require_scopes
from treadle.defs.lifecycle import DefLifecycle
from treadle.domain import skillmatch
from treadle.domain.defs import DefRecord
from treadle.errors import ConfigError, DefRefused, NotFound
from treadle.store.defs import DefStore
from treadle.teams.graph import Definition, parse, validate
from treadle.teams.hashing import team_sha256
from treadle.teams.render import render_mermaid
from treadle.teams.svg import render_svg
from treadle.teams.walk import Walked

KIND = "team"
#: op-input fields loomcycle has that treadle refuses by name
UNSUPPORTED = {"board_chunk_id": "Document task boards", "board_scope": "Document task boards",
               "parent_def_id": "fork names its parent by def_id (or takes the name's active version)"}
DEFAULT_RUN_TIMEOUT_MS = 15 * 60 * 1000


class TeamRunner(Protocol):
    """Starting and awaiting team runs (teams/runs.py), as the family's `run` op needs them."""

    async def start(self, tenant: str, record: DefRecord, task: str, *, interrupt_on_cap: bool) -> str: ...

    async def result(self, tenant: str, run_id: str, timeout_s: float) -> dict[str, Any]: ...

    async def progress(self, tenant: str, run_id: str) -> tuple[DefRecord, Walked, str] | None: ...


def definition_of(body: Mapping[str, Any]) -> Definition:
    return parse(dict(body))


class TeamDefFamily(DefLifecycle):
    kind = KIND
    label = "TeamDef"
    create_promotes = True
    fork_promotes = False
    extra_ops = ("delete", "render_diagram", "run")

    def __init__(self, defs: DefStore, runner: TeamRunner | None = None,
                 static: Mapping[str, Mapping[str, Any]] | None = None, source: str = "treadle.yaml") -> None:
        super().__init__(defs)
        self.runner = runner
        self.static: dict[str, dict[str, Any]] = {}
        for name, body in (static or {}).items():  # treadle.yaml's `teams:`: refused at start when invalid
            problem = skillmatch.name_problem(name)
            if problem is not None:
                raise ConfigError(f"{source}: teams.{name}: {problem.replace('skill', 'team')}")
            try:
                d = parse(dict(body))
                validate(d)
            except DefRefused as exc:
                raise ConfigError(f"{source}: teams.{name}: {exc.message}") from None
            self.static[name] = d.to_json()

    def static_names(self) -> list[str]:
        return sorted(self.static)

    def static_body(self, name: str) -> dict[str, Any] | None:
        return self.static.get(name)

    async def dispatch(
        self, tenant_id: str, args: Any, *, gate: Gate | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        return await super().dispatch(tenant_id, await self.checked(args), gate=gate, run_id=run_id)

    async def checked(self, args: Any) -> Any:
        """`args`, unless it carries a loomcycle field treadle does not have (refused by name)."""
        if isinstance(args, dict):
            for key, why in UNSUPPORTED.items():
                if args.get(key) not in (None, ""):
                    raise DefRefused(f"TeamDef: {key} is not supported ({why})", code="unsupported_field")
        return args

    # -- hooks ---------------------------------------------------------------------------------------

    async def normalize(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        d = parse(body)
        validate(d)
        return d.to_json()

    def content_hash(self, body: dict[str, Any]) -> str:
        return team_sha256("", definition_of(body))

    def named_content_hash(self, name: str, body: dict[str, Any]) -> str:
        return team_sha256(name, definition_of(body))

    def name_arg(self, args: Mapping[str, Any]) -> str:
        """Team names may carry `/` groups, as skills do (`sdlc/backend`)."""
        name = args.get("name")
        problem = skillmatch.name_problem(name)
        if problem is not None or not isinstance(name, str):
            raise DefRefused(f"TeamDef: name is required: {(problem or '').replace('skill', 'team')} "
                             "(segments of [A-Za-z0-9_-] joined by /)")
        return name

    async def view(self, tenant: str, record: DefRecord) -> dict[str, Any]:
        """The lifecycle's answer plus loomcycle's field names (`definition`, `retired`, `promoted`)."""
        out = self.record_view(record)
        out.update(definition=record.body, retired=record.status == "retired", promoted=record.active)
        return out

    # -- loomcycle's shapes of the lifecycle's ops -----------------------------------------------------

    async def op_list(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        """The lifecycle's answer; with a `name`, also loomcycle's `{name, versions}`."""
        out = await super().op_list(tenant, args, gate, run_id)
        if args.get("name"):
            out.update(name=args["name"], versions=out["defs"])
        return out

    async def op_retire(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        """loomcycle's `retired: false` (un-retire) has no treadle equivalent: refused by name."""
        if args.get("retired") is not None and args.get("retired") is not True:
            raise DefRefused("TeamDef.retire: retired must be true when given (un-retiring is not supported: "
                             "fork the retired version to bring it back)")
        return await super().op_retire(tenant, args, gate, run_id)

    # -- loomcycle's ops -----------------------------------------------------------------------------

    async def op_delete(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("delete")
        if gate is not None:
            require_scopes(gate, what)
        name = self.name_arg(args)
        versions = await self.defs.list(tenant, self.kind, name=name, limit=100_000)
        if not versions:
            raise NotFound(f"TeamDef.delete: team {name!r} not found")
        for record in versions:
            await self.retire(tenant, record)
        return {"name": name, "deleted": True, "versions": len(versions)}

    async def op_render_diagram(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("render_diagram")
        fmt = opt_str(args, "format", max_len=16, what=what)
        if fmt not in (None, "", "mermaid", "svg"):
            raise DefRefused(f"{what}: format {fmt!r} is not supported (mermaid or svg)")
        fmt = fmt or "mermaid"
        render = render_svg if fmt == "svg" else render_mermaid
        highlight = opt_str(args, "highlight_state", max_len=256, what=what) or ""
        run_id = opt_str(args, "run_id", max_len=64, what=what)
        if run_id:  # a team run: the version it walks, its current state highlighted
            if args.get("overlay") is not None or args.get("def_id") or args.get("name") or highlight:
                raise DefRefused(f"{what}: run_id names the team and the state; give it alone")
            progress = await self.runner.progress(tenant, run_id) if self.runner is not None else None
            if progress is None:
                raise NotFound(f"{what}: team run {run_id!r} not found")
            record, walked, status = progress
            state = walked.state if walked.answer is None or status not in ("completed", "failed", "cancelled") \
                else str(walked.answer.get("final_state") or walked.state)
            return {"name": record.name, "def_id": record.def_id, "version": record.version, "format": fmt,
                    "run_id": run_id, "run_status": status, "state": state, "steps": walked.steps,
                    "diagram": render(record.name, definition_of(record.body), state)}
        if args.get("overlay") is not None:  # a dry run of an unsaved graph
            d = parse(self.overlay_arg(args, required=True))
            validate(d)
            name = opt_str(args, "name", max_len=128, what=what) or "team"
            return {"name": name, "def_id": "", "format": fmt, "diagram": render(name, d, highlight),
                    "preview": True}
        record = await self.target(tenant, args, what)
        diagram = render(record.name, definition_of(record.body), highlight)
        return {"name": record.name, "def_id": record.def_id, "version": record.version, "format": fmt,
                "diagram": diagram}

    async def op_run(
        self, tenant: str, args: dict[str, Any], gate: Gate | None, run_id: str | None
    ) -> dict[str, Any]:
        what = self.what("run")
        if self.runner is None:
            raise DefRefused(f"{what}: this TeamDef service cannot start runs")
        record, task, interrupt_on_cap = await self.run_args(tenant, args)
        wait = opt_bool(args, "wait", True, what=what)
        timeout_ms = args.get("timeout_ms", DEFAULT_RUN_TIMEOUT_MS)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= 3_600_000:
            raise DefRefused(f"{what}: timeout_ms must be an integer from 1 to 3600000")
        team_run = await self.runner.start(tenant, record, task, interrupt_on_cap=interrupt_on_cap)
        if not wait:
            return {"name": record.name, "def_id": record.def_id, "run_id": team_run, "status": "running"}
        return await self.runner.result(tenant, team_run, timeout_ms / 1000)

    async def target(self, tenant: str, args: dict[str, Any], what: str) -> DefRecord:
        """The version `def_id` names, else the active version of `name` (as loomcycle resolves them)."""
        if not args.get("def_id") and not args.get("name"):
            raise DefRefused(f"{what}: provide `name` (active version) or `def_id`")
        if args.get("def_id"):
            return await self.resolve(tenant, args, static_ok=False)
        found = await self.current_record(tenant, self.name_arg(args))
        if found is None:
            raise NotFound(f"{what}: team {args.get('name')!r} has no active version")
        return found

    async def current_record(self, tenant: str, name: str) -> DefRecord | None:
        """What a new run of team `name` walks: its active version, else treadle.yaml's (recorded as
        a version first, so that the run can pin it), else None."""
        found = await self.defs.get(tenant, self.kind, name=name)
        if found is None and name in self.static:
            found = await self.record_static(tenant, self.static_record(tenant, name))
        return found

    async def run_args(self, tenant: str, args: dict[str, Any]) -> tuple[DefRecord, str, bool]:
        """The team version a `run` runs (def_id, else the name's active version; never a retired
        one), its input and `interrupt_on_cap`."""
        what = self.what("run")
        record = await self.target(tenant, args, what)
        if record.status == "retired":
            raise DefRefused(f"{what}: team {record.name!r} version {record.version} is retired")
        task = opt_str(args, "input", max_len=256_000, what=what) or ""
        return record, task, opt_bool(args, "interrupt_on_cap", False, what=what)
