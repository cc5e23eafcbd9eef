"""The deterministic mock provider: `echo`, `tool-caller`, `chat-tool` and `script`.

`chat-tool` is a conversation's agent: one call of its first tool per user turn (the last message
is the user's), then an answer naming how many user turns it sees.

Every answer is a pure function of the request (the transcript so far, the run id and the
agent's `mock:` settings), so a re-delivered or re-played step asks the same question and gets
the same answer, tool_use ids included. `latency_ms`/`jitter_ms` add delay; `error_rate` makes
calls fail like an HTTP 429, deterministically per (run, iteration, attempt).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
from typing import Any

from treadle.config import MockSettings
from treadle.domain.content import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock, content_chars
from treadle.errors import ProviderError, RetryableProviderError
from treadle.providers.base import DeltaSink, ModelRequest, ModelResponse, Usage

FIXED_TOOL_INPUTS: dict[str, dict[str, Any]] = {
    "Memory": {"op": "incr", "scope": "agent", "key": "calls"},
    "Context": {"op": "time"},
}


def _digest(*parts: object) -> bytes:
    return hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=16).digest()


def tool_use_id(run_id: str, iteration: int, index: int) -> str:
    return "toolu_" + _digest("tool", run_id, iteration, index).hex()[:24]


def _approx_tokens(messages: list[Message], system: str) -> int:
    return max(1, (len(system) + content_chars(messages)) // 4)


def _has_results(m: Message) -> bool:
    return any(isinstance(b, ToolResultBlock) for b in m.content)


def last_user_text(messages: list[Message]) -> str:
    for m in reversed(messages):
        if m.role == "user":
            text = m.text()
            if text:
                return text
    return ""


#: the models the mock answers (`list_models`; any other is `unknown_model`)
MOCK_MODELS = ("chat-tool", "echo", "mock-generic", "script", "tool-caller")


def _mock_facts(prompt: str) -> str:
    """The mock's fact extraction: each sentence of at least three words the user said is a fact
    ("preference" when it says prefer/like), as the JSON a model is asked for."""
    facts = []
    for line in prompt.splitlines():
        if not line.startswith("user: "):
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", line.removeprefix("user: ").strip()):
            sentence = sentence.strip()
            if len(sentence.split()) >= 3:
                words = sentence.lower()
                facts.append({"text": sentence, "class": "preference" if "prefer" in words or " like" in words
                              else "fact"})
    return json.dumps({"facts": facts})


def _mock_verdicts(prompt: str) -> str:
    """The mock's conflict judge: a pair whose sentences start with the same three words and then
    differ contradicts; any other pair is independent."""
    verdicts = []
    for i, block in enumerate(prompt.split("\n\n"), 1):
        a = re.search(r"^A: (.*)$", block, re.M)
        b = re.search(r"^B: (.*)$", block, re.M)
        if not (a and b):
            continue
        head_a, head_b = a.group(1).lower().split()[:3], b.group(1).lower().split()[:3]
        same = head_a == head_b and a.group(1).strip().lower() != b.group(1).strip().lower()
        verdicts.append({"pair": i, "verdict": "contradicts" if same else "independent"})
    return json.dumps({"verdicts": verdicts})


def _from_results(tool_input: dict[str, Any], messages: list[Message]) -> dict[str, Any]:
    """A script turn's input with each string value `$result.KEY` replaced by KEY of the newest
    tool result (a JSON object) that has it — e.g. `{"child_run_id": "$result.child_run_id"}`
    sends to the resident sub-agent an earlier `Agent op=open` answered with."""
    if not any(isinstance(v, str) and v.startswith("$result.") for v in tool_input.values()):
        return tool_input
    results: list[dict[str, Any]] = []
    for m in messages:
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                try:
                    value = json.loads(b.content)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    results.append(value)
    out = dict(tool_input)
    for k, v in tool_input.items():
        if isinstance(v, str) and v.startswith("$result."):
            key = v[len("$result."):]
            out[k] = next((r[key] for r in reversed(results) if key in r), v)
    return out


class MockProvider:
    name = "mock"

    async def list_models(self, timeout_s: float = 10.0) -> list[str]:
        return list(MOCK_MODELS)

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse:
        settings = req.options.get("mock")
        if not isinstance(settings, MockSettings):
            settings = MockSettings()
        run_id = req.run.run_id if req.run else ""
        iteration = req.run.iteration if req.run else 0
        attempt = req.run.attempt if req.run else 0

        delay_ms = settings.latency_ms
        if settings.jitter_ms:
            rng = random.Random(_digest("jitter", settings.seed, run_id, iteration, attempt))
            delay_ms += rng.uniform(0, settings.jitter_ms)
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000.0)
        if settings.error_rate > 0:
            roll = random.Random(_digest("error", settings.seed, run_id, iteration, attempt)).random()
            if roll < settings.error_rate:
                raise RetryableProviderError("mock: 429 rate limited", retry_after_s=0.01, code="rate_limited")

        assistant_turns = sum(1 for m in req.messages if m.role == "assistant")
        content: list[Block]
        if req.options.get("purpose") == "compaction_summary":  # engine/compaction.py's summary call
            if settings.summary_error:
                raise ProviderError("mock: the summary failed (mock.summary_error)", code="mock_summary_error")
            span = last_user_text(req.messages)
            content = [TextBlock(f"summary of {len(span)} characters: " + span[-60:].replace("\n", " "))]
        elif req.options.get("purpose") == "memory_extract":  # Memory add with infer (substrate/memfacts.py)
            content = [TextBlock(_mock_facts(last_user_text(req.messages)))]
        elif req.options.get("purpose") == "memory_conflict_judge":
            content = [TextBlock(_mock_verdicts(last_user_text(req.messages)))]
        elif req.model == "echo":
            content = [TextBlock(last_user_text(req.messages))]
        elif req.model == "mock-generic":  # loomcycle's mock: a no-op text answer
            content = [TextBlock("ok")]
        elif req.model == "tool-caller":
            calls_so_far = sum(1 for m in req.messages if m.role == "assistant" and m.tool_uses())
            if req.tools and calls_so_far < settings.tool_calls:
                tool = req.tools[0]
                tool_input = settings.tool_input
                if tool_input is None:
                    tool_input = FIXED_TOOL_INPUTS.get(tool.name, {})
                content = [ToolUseBlock(tool_use_id(run_id, iteration, 0), tool.name, dict(tool_input))]
            else:
                content = [TextBlock(f"done after {calls_so_far} tool calls")]
        elif req.model == "chat-tool":
            last = req.messages[-1] if req.messages else None
            if req.tools and last is not None and last.role == "user" and not _has_results(last):
                tool = req.tools[0]
                tool_input = settings.tool_input if settings.tool_input is not None else FIXED_TOOL_INPUTS.get(
                    tool.name, {})
                content = [ToolUseBlock(tool_use_id(run_id, iteration, 0), tool.name, dict(tool_input))]
            else:
                turns = sum(1 for m in req.messages if m.role == "user" and not _has_results(m))
                content = [TextBlock(f"answered ({turns} user turns in view)")]
        elif req.model == "script":
            script = settings.script or []
            if not script:
                raise ProviderError("mock: model 'script' has no mock.script", code="mock_script_missing")
            turn = script[min(assistant_turns, len(script) - 1)]
            if turn.tool is not None:
                content = [ToolUseBlock(tool_use_id(run_id, iteration, 0), turn.tool,
                                        _from_results(dict(turn.input), req.messages))]
            else:
                content = [TextBlock(turn.text or "")]
        else:
            raise ProviderError(f"mock: unknown model {req.model!r}", code="unknown_model")

        if on_delta is not None:
            for block in content:
                if isinstance(block, TextBlock) and block.text:
                    await on_delta("text", block.text)
        out_chars = sum(len(b.text) if isinstance(b, TextBlock) else 16 for b in content)
        stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
        return ModelResponse(
            content=content,
            stop_reason=stop,
            usage=Usage(input_tokens=_approx_tokens(req.messages, req.system), output_tokens=max(1, out_chars // 4)),
            model=req.model,
            provider=self.name,
            max_context_tokens=settings.context_window or None,
        )
