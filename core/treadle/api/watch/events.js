// generated from core/treadle/domain/events.py: the run events' types
// (python -m treadle.domain.events js > core/treadle/api/watch/events.js)
"use strict";

const EVENT_TYPES = Object.freeze({
  USER_INPUT: "user_input",
  STARTED: "started",
  TEXT: "text",
  THINKING: "thinking",
  TOOL_CALL: "tool_call",
  USAGE: "usage",
  RETRY: "retry",
  PROVIDER_FALLBACK: "provider_fallback",
  REASONING_INVALIDATED: "reasoning_invalidated",
  FALLBACK_SUPPRESSED: "fallback_suppressed",
  TOOL_RESULT: "tool_result",
  TOOL_PARKED: "tool_parked",
  TOOL_PENDING: "tool_pending",
  INTERRUPTION_PENDING: "interruption_pending",
  INTERRUPTION_NOTIFY: "interruption_notify",
  CHANNEL_PUBLISH: "channel_publish",
  CHANNEL_DELIVERY: "channel_delivery",
  SPAWN_CHILD_RESULT: "spawn_child_result",
  REPLAY_DIVERGED: "replay_diverged",
  AWAITING_INPUT: "awaiting_input",
  TURN_CANCELLED: "turn_cancelled",
  LIMIT: "limit",
  CONTEXT_COMPACTION: "context_compaction",
  COMPACTION_FAILED: "compaction_failed",
  RUNTIME_PAUSED: "runtime_paused",
  DONE: "done",
  ERROR: "error",
  TEXT_DELTA: "text_delta",
  THINKING_DELTA: "thinking_delta",
  STEER: "steer",
  SESSION: "session",
  AGENT: "agent",
});
if (typeof module !== "undefined") module.exports = { EVENTS: EVENT_TYPES };
