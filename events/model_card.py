"""What a worker advertises about a model it serves, or could not load, in the registry
buckets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class KernelBackend(BaseModel):
    """The kernel backend a worker's model runs on, so a slower fallback is visible."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # "triton", "cpu" (the fused C++ ops and torch for the rest) or "torch".
    name: str
    # The same in words: "Triton kernels", "fused CPU ops", "torch ops".
    ops: str
    # Why a faster backend the worker would have picked is not running (one line), e.g.
    # the fused CPU ops failing to build; None when nothing fell back.
    fallback: str | None = None


class ModelCard(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = 1
    name: str
    context_length: int
    reasoning_start: str | None = None
    reasoning_end: str | None = None
    tool_call_format: str | None = None
    # Sampling values used when a request leaves them out (temperature, top_p, top_k, min_p).
    default_sampling: dict[str, float] = Field(default_factory=dict)
    # What the model reads ("text", "image"): the API refuses parts of any other kind.
    input_modalities: tuple[str, ...] = ("text",)
    worker_id: str = ""
    created_at: float = 0.0
    # None from a worker older than the field.
    kernels: KernelBackend | None = None

    @property
    def supports_reasoning(self) -> bool:
        return bool(self.reasoning_start and self.reasoning_end)


class ModelLoadFailure(BaseModel):
    """A worker could not load the model it was started for (an unsupported architecture,
    tokenizer, quantization or template, a missing file, too little memory): kept in the
    registry for a while so the API can say why the model is not served."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = 1
    # The name the model would have been served under.
    name: str
    # What the worker was pointed at (a served name, a file or a folder).
    source: str
    # One line naming what is wrong (and what is supported, where that is the problem).
    reason: str
    worker_id: str = ""
    failed_at: float = 0.0
