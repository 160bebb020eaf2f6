"""spate's event contract: event types, NATS names, the codec and the fold. No I/O."""

from events.codec import AnyEvent, EventDecodeError, decode, encode
from events.envelope import Event
from events.fold import TERMINAL_SSE_TYPES, TERMINAL_STATUSES, ResponseFold, error_fields, fold
from events.generation import (
    CancelRequested,
    GenerationFailed,
    GenerationFinished,
    GenerationStarted,
    ReasoningEnded,
    TokenLogprob,
    TokensGenerated,
    ToolCallEnded,
    ToolCallStarted,
    Usage,
)
from events.model_card import KernelBackend, ModelCard, ModelLoadFailure
from events.request import (
    AnswerConstraint,
    ChatMessage,
    RequestAccepted,
    ToolCall,
    ToolDefinition,
)
from events.sampling_settings import SamplingSettings

__all__ = [
    "AnswerConstraint",
    "AnyEvent",
    "CancelRequested",
    "ChatMessage",
    "Event",
    "KernelBackend",
    "ModelCard",
    "ModelLoadFailure",
    "EventDecodeError",
    "GenerationFailed",
    "GenerationFinished",
    "GenerationStarted",
    "ReasoningEnded",
    "RequestAccepted",
    "ResponseFold",
    "SamplingSettings",
    "TERMINAL_SSE_TYPES",
    "TERMINAL_STATUSES",
    "error_fields",
    "TokenLogprob",
    "TokensGenerated",
    "ToolCall",
    "ToolCallEnded",
    "ToolCallStarted",
    "ToolDefinition",
    "Usage",
    "decode",
    "encode",
    "fold",
]
