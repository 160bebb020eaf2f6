"""What a worker advertises about a model it serves, in the registry buckets."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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

    @property
    def supports_reasoning(self) -> bool:
        return bool(self.reasoning_start and self.reasoning_end)
