"""The `code-js` provider: an operator's JavaScript `run(input)` as an agent (loomcycle's code-js).

Stateless replay (loomcycle's `internal/providers/codejs/`): every call builds a FRESH QuickJS
context (the `quickjs` module of PyPI's `quickjs-ng`), runs `run(input)` from the start and answers
the k-th tool call with the k-th recorded `tool_result` of the transcript (tool_use paired with
tool_result by id; the record stops at the first unpaired one). The first call past the record is
the frontier: the call ends with that `tool_use` (stop_reason `tool_use`), the engine runs the tool
as any other and calls again. A returned value becomes the final text (`final_text`, a string, or
JSON). The transcript in Postgres is the memo, so a code agent survives kill -9 and moves between
workers like any run.

Determinism: `eval` and `Function` are deleted, `Math.random` is loomcycle's seeded LCG and
`Date.now()`/`new Date()` an anchored clock (+1 ms a call). Seed = FNV-1a-32 of
`"<run id>|<agent>"`, anchor = the run's creation in ms; `deterministic` pins seed 0x9e3779b9 and
anchor 1700000000000 as loomcycle's LOOMCYCLE_CODE_AGENTS_DETERMINISTIC does.

Error codes (ProviderError.code, the run's error): code_agent_load, code_agent_threw,
code_agent_timeout, code_agent_replay_divergence, code_agent_memory (treadle's: the memory cap).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace

from treadle.domain.content import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock
from treadle.errors import ProviderError
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Usage

PROVIDER_ID = "code-js"
SYNTHETIC_MODEL = "loomcycle/code-js"
ABI_VERSION = "1.0.0"
FIXED_EPOCH_MS = 1_700_000_000_000
FIXED_SEED = 0x9E3779B9
DEFAULT_RUN_TIMEOUT_S = 120.0
DEFAULT_STEP_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 64
#: the run's error code when a cancel lands while its JavaScript replays (engine/step.py)
CODE_AGENT_CANCELLED = "code_agent_cancelled"

# The sandbox prelude: determinism hooks (loomcycle's sandbox.go, same LCG and clock), the tool
# binding helper and the final-text mapping. The record ([name, input, text, is_error] per call) is
# answered inside the sandbox (no call into Python: QuickJS's binding refuses those under a time
# limit, and none is cheaper); the first frontier or divergence is kept in `state.stop`, every later
# call throws again, and the host reads the state once the code returns or throws.
PRELUDE = r"""
(function () {
  var g = globalThis;
  var __seed = %(seed)d >>> 0;
  Math.random = function () {
    // exact mod 2^32 (goja computes this product in int64; a float64 product would lose bits)
    __seed = (Math.imul(__seed, 1103515245) + 12345) >>> 0;
    return (__seed & 0x7fffffff) / 0x7fffffff;
  };
  var __t = %(anchor)d;
  var RealDate = Date;
  function now() { return __t++; }
  function FakeDate(a, b, c, d, e, f, h) {
    if (!(this instanceof FakeDate)) { return new RealDate(now()).toString(); }
    switch (arguments.length) {
      case 0: return new RealDate(now());
      case 1: return new RealDate(a);
      case 2: return new RealDate(a, b);
      case 3: return new RealDate(a, b, c);
      case 4: return new RealDate(a, b, c, d);
      case 5: return new RealDate(a, b, c, d, e);
      case 6: return new RealDate(a, b, c, d, e, f);
      default: return new RealDate(a, b, c, d, e, f, h);
    }
  }
  FakeDate.prototype = RealDate.prototype;
  FakeDate.now = now;
  FakeDate.parse = RealDate.parse;
  FakeDate.UTC = RealDate.UTC;
  g.Date = FakeDate;

  var parse = JSON.parse, stringify = JSON.stringify;
  var record = parse(%(record)s), k = 0;
  var state = {stop: null};
  function canon(v) {
    if (Array.isArray(v)) { return "[" + v.map(canon).join(",") + "]"; }
    if (v !== null && typeof v === "object") {
      return "{" + Object.keys(v).sort().map(function (key) {
        return stringify(key) + ":" + canon(v[key]);
      }).join(",") + "}";
    }
    var s = stringify(v);
    return s === undefined ? "null" : s;
  }
  function halt() { throw new Error("code agent stopped: " + (state.stop && state.stop.kind)); }
  function invoke(name, input, parseResult) {
    if (state.stop) { halt(); }
    var sent = parse(stringify(input)), idx = k++;
    if (idx < record.length) {
      var rec = record[idx];
      if (rec[0] !== name || canon(rec[1]) !== canon(sent)) {
        state.stop = {kind: "divergence", idx: idx, want: rec[0] + " " + canon(rec[1]), got: name + " " + canon(sent)};
        halt();
      }
      if (rec[3]) { throw new Error(rec[2]); }
      if (rec[2] === "") { return undefined; }
      if (parseResult) { try { return parse(rec[2]); } catch (err) { return rec[2]; } }
      return rec[2];
    }
    state.stop = {kind: "frontier", idx: idx, name: name, input: sent};
    halt();
  }
  g.__treadle_state = function () { return stringify({stop: state.stop, calls: k}); };
  function arg(name, a) {
    if (a === undefined || a === null) { return {}; }
    if (typeof a !== "object" || Array.isArray(a)) { throw new TypeError(name + ": argument must be an object"); }
    return a;
  }
  var reserved = {constructor: 1, hasOwnProperty: 1, isPrototypeOf: 1, propertyIsEnumerable: 1,
                  toLocaleString: 1, toString: 1, valueOf: 1, then: 1, "catch": 1, "finally": 1};
  g.__treadle_bind = function (names) {
    names.forEach(function (name) {
      if (name === "Memory" || name === "Channel") {
        g[name] = new Proxy({}, {
          get: function (t, op) {
            if (typeof op !== "string" || op === "" || reserved[op]) { return undefined; }
            return function (a) {
              var obj = {}, src = arg(name + "." + op, a);
              Object.keys(src).forEach(function (k) { obj[k] = src[k]; });
              obj.op = op;
              return invoke(name, obj, true);
            };
          },
          set: function () { return false; }
        });
      } else if (name === "Agent") {
        g.Agent = {spawn: function (a) {
          // loomcycle's shape: a child's answer as `[sub-agent agent_id=…]\n<its final text>` (a string)
          var r = invoke("Agent", arg("Agent.spawn", a), true);
          if (r && typeof r === "object" && r.ok === true && typeof r.output === "string") {
            return "[sub-agent agent_id=" + (r.agent_id || r.run_id) + "]\n" + r.output;
          }
          return r;
        }};
      } else {
        var mcp = name.indexOf("mcp__") === 0;
        g[name] = function (a) { return invoke(name, arg(name, a), mcp); };
      }
    });
    delete g.__treadle_bind;
  };
  g.__treadle_final = function (v) {
    if (v === undefined || v === null) { return ""; }
    if (typeof v === "object") {
      if (v.final_text !== undefined && v.final_text !== null) { return String(v.final_text); }
      return stringify(v);
    }
    return String(v);
  };
  delete g.eval;
  delete g.Function;
})();
"""


def fnv1a32(s: str) -> int:
    h = 0x811C9DC5
    for byte in s.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def code_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CodeAgentSettings:
    """The operator's switch and limits (yaml `code_agents:`)."""

    enabled: bool = False
    root: str = "agent_code"
    run_timeout_seconds: float = DEFAULT_RUN_TIMEOUT_S
    step_timeout_seconds: float = DEFAULT_STEP_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    deterministic: bool = False


@dataclass(slots=True)
class Recorded:
    name: str
    input: dict[str, Any]
    text: str
    is_error: bool


def recorded_calls(messages: list[Message]) -> list[Recorded]:
    """The tool calls already made, in order, each with its result; stops at the first unpaired."""
    uses: list[ToolUseBlock] = []
    results: dict[str, ToolResultBlock] = {}
    for m in messages:
        for b in m.content:
            if isinstance(b, ToolUseBlock) and m.role == "assistant":
                uses.append(b)
            elif isinstance(b, ToolResultBlock):
                results[b.tool_use_id] = b
    out: list[Recorded] = []
    for u in uses:
        r = results.get(u.id)
        if r is None:
            break
        out.append(Recorded(u.name, u.input, r.content, r.is_error))
    return out


def latest_user_text(messages: list[Message]) -> str:
    for m in reversed(messages):
        if m.role != "user":
            continue
        text = "".join(b.text for b in m.content if isinstance(b, TextBlock))
        if text:
            return text
    return ""


@dataclass(slots=True)
class Outcome:
    """One replay's result: a frontier tool call, or the final text."""

    frontier: tuple[int, str, dict[str, Any]] | None
    final_text: str
    calls_replayed: int


#: programs kept (by content hash) and the bytes they may hold in all
PROGRAM_CACHE_ENTRIES = 256
PROGRAM_CACHE_BYTES = 32 * 1024 * 1024


@dataclass(slots=True)
class ProgramCache:
    """The agents' JavaScript by content hash (the hash is the AgentDef's `code_hash` and the span's
    `provider.code_hash`). quickjs-ng's Python binding has no bytecode API (no JS_WriteObject /
    JS_ReadObject, and a context cannot be cloned), so what is cached is everything before the
    compile: the source read and hashed once — an inline body by its text, a file by its
    (mtime, size), so an edited index.js is picked up at the next step without a restart (loomcycle
    keys files by agent name until a restart). Each step still parses the source in its fresh
    context: docs/benchmarks.md measures that cost by code size."""

    by_hash: OrderedDict[str, str] = field(default_factory=OrderedDict)
    inline: dict[tuple[str, str], str] = field(default_factory=dict)  # (agent, body) → hash
    files: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # path → (mtime_ns, size, hash)
    size: int = 0
    hits: int = 0
    misses: int = 0

    def get(self, digest: str) -> str | None:
        src = self.by_hash.get(digest)
        if src is not None:
            self.by_hash.move_to_end(digest)
        return src

    def put(self, src: str) -> str:
        digest = code_hash(src)
        if digest not in self.by_hash:
            self.by_hash[digest] = src
            self.size += len(src)
            while len(self.by_hash) > PROGRAM_CACHE_ENTRIES or self.size > PROGRAM_CACHE_BYTES:
                _, old = self.by_hash.popitem(last=False)
                self.size -= len(old)
            if len(self.inline) > 4 * PROGRAM_CACHE_ENTRIES:
                self.inline.clear()
        return digest


@dataclass(slots=True)
class CodeJsProvider:
    settings: CodeAgentSettings = field(default_factory=CodeAgentSettings)
    name: str = PROVIDER_ID
    programs: ProgramCache = field(default_factory=ProgramCache)

    def source(self, agent: str, body: str | None) -> tuple[str, str]:
        """The agent's JavaScript and its content hash: the inline `code` wins, else
        `<root>/<agent>/index.js`. Raises code_agent_load."""
        cache = self.programs
        if body:
            digest = cache.inline.get((agent, body))
            src = cache.get(digest) if digest is not None else None
            if src is None or digest is None:
                cache.misses += 1
                digest = cache.put(body)
                cache.inline[(agent, body)] = digest
                return body, digest
            cache.hits += 1
            return src, digest
        if not agent or ".." in agent.split("/") or agent.startswith("/") or "\\" in agent:
            raise ProviderError(f"code_agent_load: bad agent name {agent!r}", code="code_agent_load")
        path = Path(self.settings.root) / agent / "index.js"
        try:
            st = path.stat()
            known = cache.files.get(str(path))
            if known is not None and known[:2] == (st.st_mtime_ns, st.st_size):
                src = cache.get(known[2])
                if src is not None:
                    cache.hits += 1
                    return src, known[2]
            src = path.read_text()
        except OSError as exc:
            raise ProviderError(f"code_agent_load: {path}: {exc.strerror or exc}", code="code_agent_load") from exc
        cache.misses += 1
        digest = cache.put(src)
        if len(cache.files) > 4 * PROGRAM_CACHE_ENTRIES:
            cache.files.clear()
        cache.files[str(path)] = (st.st_mtime_ns, st.st_size, digest)
        return src, digest

    def check(self, agent: str, body: str | None) -> str:
        """Load and parse the agent's code at start (a broken code agent fails the load, not its
        first run); returns the content hash (the AgentDef's code lineage)."""
        import quickjs

        src, digest = self.source(agent, body)
        ctx = quickjs.Context()
        ctx.set_memory_limit(self.settings.memory_mb * 1024 * 1024)
        ctx.set_time_limit(self.settings.step_timeout_seconds)
        try:
            ctx.eval(PRELUDE % {"seed": FIXED_SEED, "anchor": FIXED_EPOCH_MS})
            ctx.eval(src)
            if ctx.eval("typeof run") != "function":
                raise ProviderError("code_agent_load: the code defines no top-level run(input) function",
                                    code="code_agent_load")
        except quickjs.JSException as exc:
            raise ProviderError(f"code_agent_load: {exc}", code="code_agent_load") from exc
        return digest

    def replay(
        self,
        src: str,
        tool_names: list[str],
        run_input: dict[str, Any],
        recorded: list[Recorded],
        *,
        seed: int,
        anchor_ms: int,
        time_limit_s: float,
        total_s: float,
    ) -> Outcome:
        """Run `run(input)` once in a fresh context against the record (synchronous)."""
        import quickjs

        record = json.dumps([[r.name, r.input, r.text, r.is_error] for r in recorded])
        ctx = quickjs.Context()
        ctx.set_memory_limit(self.settings.memory_mb * 1024 * 1024)
        ctx.set_max_stack_size(1024 * 1024)
        ctx.set_time_limit(max(time_limit_s, 0.001))
        try:
            ctx.eval(PRELUDE % {"seed": seed, "anchor": anchor_ms, "record": json.dumps(record)})
            ctx.eval("__treadle_bind(" + json.dumps(tool_names) + ")")
        except quickjs.JSException as exc:  # pragma: no cover - the prelude is constant
            raise ProviderError(f"code_agent_load: sandbox: {exc}", code="code_agent_load") from exc
        t0 = time.monotonic()
        final: Any = ""
        failure: str | None = None
        try:
            ctx.eval(src)
            if ctx.eval("typeof run") != "function":
                raise ProviderError("code_agent_threw: the code defines no top-level run(input) function",
                                    code="code_agent_threw")
            final = ctx.eval("__treadle_final(run(JSON.parse(" + json.dumps(canonical_json(run_input)) + ")))")
        except quickjs.JSException as exc:
            failure = str(exc)
        except MemoryError as exc:
            raise ProviderError(f"code_agent_memory: the step exceeded {self.settings.memory_mb} MiB",
                                code="code_agent_memory") from exc
        elapsed = time.monotonic() - t0
        try:
            state = json.loads(ctx.eval("__treadle_state()"))
        except quickjs.JSException:  # out of memory or time: nothing more runs in this context
            state = {"stop": None, "calls": 0}
        stop = state.get("stop")
        if stop is not None and stop["kind"] == "divergence":
            raise self._divergence(f"tool call #{stop['idx']} was {stop['want'][:300]} on a prior step but "
                                   f"{stop['got'][:300]} on replay")
        if stop is not None:
            return Outcome((int(stop["idx"]), str(stop["name"]), dict(stop["input"] or {})), "", int(stop["idx"]))
        if failure is not None:
            raise self._classify(failure, elapsed, time_limit_s, total_s)
        return Outcome(None, final if isinstance(final, str) else str(final), int(state.get("calls", 0)))

    @staticmethod
    def _divergence(detail: str) -> ProviderError:
        return ProviderError(
            "code_agent_replay_divergence: " + detail + " (non-deterministic control flow or serialization: "
            "an unhooked clock/RNG source, or an object with unstable key order in a tool input)",
            code="code_agent_replay_divergence")

    def _classify(self, message: str, elapsed: float, time_limit_s: float, total_s: float) -> ProviderError:
        low = message.lower()
        if "interrupted" in low:
            if time_limit_s < self.settings.step_timeout_seconds or elapsed < self.settings.step_timeout_seconds * 0.9:
                return ProviderError(f"code_agent_timeout: run exceeded its {total_s:g} s wall-clock budget "
                                     "(raise run_timeout_seconds per agent or code_agents.run_timeout_seconds)",
                                     code="code_agent_timeout")
            return ProviderError(f"code_agent_timeout: one step exceeded {self.settings.step_timeout_seconds:g} s "
                                 "(code_agents.step_timeout_seconds): a loop that makes no tool call?",
                                 code="code_agent_timeout")
        if "out of memory" in low or ("memory" in low and "alloc" in low):
            return ProviderError(f"code_agent_memory: the step exceeded {self.settings.memory_mb} MiB "
                                 "(code_agents.memory_mb)", code="code_agent_memory")
        if "stack overflow" in low:
            return ProviderError(f"code_agent_threw: {message}", code="code_agent_threw")
        return ProviderError(f"code_agent_threw: run: {message}", code="code_agent_threw")

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        if not self.settings.enabled:
            raise ProviderError("code_agent_load: code agents are disabled (code_agents.enabled: true enables them)",
                                code="code_agent_load")
        opts: dict[str, Any] = req.options.get("code_agent") or {}
        agent = req.run.agent if req.run else ""
        run_id = req.run.run_id if req.run else ""
        src, digest = self.source(agent, opts.get("code_body"))
        # loomcycle's provider.code_hash: which code made this run (the model span's attribute; the
        # AgentDef's `code_hash` names the same digest per version)
        span = trace.get_current_span()
        span.set_attribute("provider.code_hash", digest)
        span.set_attribute("loomcycle.provider.code_hash", digest)
        span.set_attribute("loomcycle.provider.kind", "synthetic-code")
        started_ms: int | None = opts.get("started_ms")
        if self.settings.deterministic:
            seed, anchor = FIXED_SEED, FIXED_EPOCH_MS
        else:
            seed = fnv1a32(f"{run_id}|{agent}") if (run_id or agent) else FIXED_SEED
            anchor = started_ms if started_ms is not None else FIXED_EPOCH_MS
        total = float(opts.get("run_timeout_seconds") or self.settings.run_timeout_seconds)
        remaining = total
        if started_ms is not None:
            remaining = started_ms / 1000.0 + total - time.time()
        if remaining <= 0:
            raise ProviderError(f"code_agent_timeout: run exceeded its {total:g} s wall-clock budget",
                                code="code_agent_timeout")
        limit = min(remaining, self.settings.step_timeout_seconds)
        metadata = dict(opts.get("metadata") or {})
        metadata["user_id"] = opts.get("user_id") or ""
        metadata["agent"] = agent
        run_input: dict[str, Any] = {"prompt": latest_user_text(req.messages), "metadata": metadata}
        if opts.get("payload_metadata"):
            run_input["payload_metadata"] = opts["payload_metadata"]
        # on a thread: QuickJS lets the event loop run meanwhile (lease renewals, other runs' steps),
        # so even a replay that spins to its step limit holds no worker
        outcome = await asyncio.to_thread(
            functools.partial(self.replay, src, [t.name for t in req.tools], run_input, recorded_calls(req.messages),
                              seed=seed, anchor_ms=anchor, time_limit_s=limit, total_s=total))
        content: list[Block]
        if outcome.frontier is not None:
            idx, name, tool_input = outcome.frontier
            tid = "cj-" + hashlib.blake2b(f"{run_id}\x1f{idx}".encode(), digest_size=8).hexdigest() + f"-{idx}"
            content = [ToolUseBlock(tid, name, tool_input)]
            stop = "tool_use"
        else:
            content = [TextBlock(outcome.final_text)] if outcome.final_text else []
            stop = "end_turn"
            if on_delta is not None and outcome.final_text:
                await on_delta("text", outcome.final_text)
        return ModelResponse(content=content, stop_reason=stop, usage=Usage(), model=SYNTHETIC_MODEL,
                             provider=self.name)
