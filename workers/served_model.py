"""What the worker process needs of a model: its engine, its card, and how to turn a
RequestAccepted into prompt token ids and sampling parameters."""

from __future__ import annotations

import atexit
import gc
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from events import KernelBackend, ModelCard, RequestAccepted
from workers.output.tool_prompt import ToolPrompt

if TYPE_CHECKING:  # torch-heavy: imported when a model is loaded, not with this module
    from workers.engine.grammar import GrammarCompiler
    from workers.engine.grammar_budget import BudgetedGrammarCompiler
    from workers.engine.llm_engine import LLMEngine
    from workers.engine.sampling_params import SamplingParams
    from workers.engine_loop import Engine
    from workers.model.loader import LoadedModel
    from workers.settings import WorkerSettings

log = logging.getLogger("spate.worker.model")


class InvalidRequest(ValueError):
    """The request cannot run on this model; `param` names the field at fault."""

    def __init__(self, message: str, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(slots=True)
class Prompt:
    token_ids: list[int]
    opens_reasoning: bool
    text: str = ""


@runtime_checkable
class ServedModel(Protocol):
    """The worker drives any engine with this shape (the real one, or a benchmark's)."""

    card: ModelCard

    @property
    def engine(self) -> Engine: ...

    def build_prompt(self, request: RequestAccepted) -> Prompt: ...

    def sampling_params(self, request: RequestAccepted) -> SamplingParams: ...

    def token_text(self, token_id: int) -> str: ...

    def decode(self, token_ids: list[int]) -> str: ...


def check_served_model(served: object) -> None:
    """Refuses, at load, a served model that lacks a member the worker uses: otherwise the
    first request to reach the missing member would fail far from its cause."""
    if not isinstance(served, ServedModel):
        members = [*ServedModel.__annotations__, *(
            name for name, value in vars(ServedModel).items()
            if (callable(value) or isinstance(value, property)) and not name.startswith("_")
        )]
        missing = [name for name in members if not hasattr(served, name)]
        raise TypeError(f"{type(served).__name__} is no ServedModel: it lacks {', '.join(missing)}")


class EngineModel:
    """A real model behind the continuous-batching engine."""

    def __init__(
        self, loaded: LoadedModel, engine: LLMEngine, served_name: str, worker_id: str,
        grammars: GrammarCompiler | BudgetedGrammarCompiler, kernels: KernelBackend | None = None,
    ) -> None:
        self.loaded = loaded
        self.engine = engine
        # Compiles grammars for the model's vocabulary (structured output, tool calls); the
        # worker's is budgeted, in a child process.
        self.grammars = grammars
        profile = loaded.profile
        self.tool_prompt = ToolPrompt(loaded.chat_template, profile.tool_call_format)
        self.context_length = engine.max_model_len
        self.card = ModelCard(
            name=served_name,
            context_length=self.context_length,
            reasoning_start=profile.reasoning_start,
            reasoning_end=profile.reasoning_end,
            # The markup calls are parsed in: the family's, where its template renders
            # tools, else None (hermes, written out by spate).
            tool_call_format=self.tool_prompt.format.name if self.tool_prompt.native else None,
            default_sampling=dict(profile.default_sampling),
            # The engine runs text-only decoders: an image input is refused by the API.
            input_modalities=("text",),
            worker_id=worker_id,
            created_at=time.time(),
            kernels=kernels,
        )

    def build_prompt(self, request: RequestAccepted) -> Prompt:
        """Render and tokenize; with truncation "auto", drop the oldest turns until the
        prompt leaves room for the answer, otherwise a long input is an error on `input`."""
        messages, tools = self.tool_prompt.render_inputs(request)
        room = min(request.sampling.max_output_tokens or 1, self.context_length // 2)
        while True:
            text, token_ids = self._render(request, messages, tools)
            fits = len(token_ids) + (room if request.truncation == "auto" else 0) < self.context_length
            if fits:
                return Prompt(token_ids, self.loaded.profile.prompt_opens_reasoning(text), text)
            droppable = [i for i, m in enumerate(messages) if m["role"] not in ("system", "developer")]
            if request.truncation != "auto" or len(droppable) <= 1:
                raise InvalidRequest(
                    f"The input is {len(token_ids)} tokens; this model's context holds "
                    f"{self.context_length} tokens including the output.",
                    param="input", code="context_length_exceeded",
                )
            del messages[droppable[0]]

    def _render(
        self, request: RequestAccepted, messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> tuple[str, list[int]]:
        text = self.loaded.chat_template.render(
            messages,
            tools=tools,
            enable_thinking=request.enable_thinking,
            reasoning_effort=request.reasoning_effort,
            chat_template_kwargs=request.chat_template_kwargs,
        )
        return text, self.loaded.tokenizer.encode(text)

    def sampling_params(self, request: RequestAccepted) -> SamplingParams:
        """The engine's parameters, with the answer's grammar compiled (milliseconds, cached;
        run off the event loop)."""
        from workers.engine.sampling_params import sampling_params_of
        from workers.output.structured_output import ConstraintError, compile_answer_grammar
        from workers.output.tool_calls import callable_tools

        sampling = request.sampling
        vocab_size = self.loaded.config.vocab_size
        for param, token_ids in (("stop_token_ids", sampling.stop_token_ids),
                                 ("logit_bias", tuple(sampling.logit_bias))):
            unknown = [token_id for token_id in token_ids if token_id >= vocab_size]
            if unknown:
                raise InvalidRequest(
                    f"Token ids {unknown} are outside this model's vocabulary of {vocab_size}.",
                    param=param,
                )
        try:
            grammar = compile_answer_grammar(self.grammars, request, self.tool_prompt.format)
        except ConstraintError as error:
            raise InvalidRequest(str(error), param=error.param) from error
        if callable_tools(request) and self.tool_prompt.format.name != "hermes":
            # Llama's <|python_tag|> and Mistral's [TOOL_CALLS] are special tokens: the
            # answer keeps their text, or its calls could not be found in it (as vLLM does).
            request = request.model_copy(update={"sampling": request.sampling.model_copy(
                update={"skip_special_tokens": False})})
        return sampling_params_of(request, grammar)

    def token_text(self, token_id: int) -> str:
        """A token's text inside a text, as logprobs show it: a SentencePiece token keeps the
        space its `▁` stands for, which decoding the token alone would drop."""
        return self.loaded.tokenizer.token_text(token_id)

    def decode(self, token_ids: list[int]) -> str:
        return self.loaded.tokenizer.decode(token_ids, skip_special_tokens=False)


def load_engine_model(settings: WorkerSettings) -> EngineModel:
    """Load the configured model and build its engine (seconds; run off the event loop)."""
    import torch

    from workers.engine.config import EngineConfig
    from workers.engine.grammar import GrammarCompiler
    from workers.engine.grammar_budget import BudgetedGrammarCompiler
    from workers.engine.llm_engine import LLMEngine
    from workers.engine.speculation import SpeculationConfig
    from workers.model.loader import load_model, serving_dtype, serving_matmul_dtype

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if settings.dtype == "auto":
        dtype = serving_dtype(device)
        matmul_dtype = serving_matmul_dtype(device, dtype)
    else:
        dtype = matmul_dtype = getattr(torch, settings.dtype)
    started = time.perf_counter()
    loaded = load_model(
        settings.model,
        device=device,
        dtype=dtype,
        backend=settings.kernels,
        weights=settings.weights,
        matmul_dtype=matmul_dtype,
    )
    config = EngineConfig(
        kernels=settings.kernels,
        max_num_seqs=settings.max_num_seqs,
        num_kv_blocks=settings.num_kv_blocks,
        max_model_len=settings.max_model_len,
        num_threads=settings.num_threads,
        speculation=SpeculationConfig(enabled=settings.speculative_decoding),
    )
    engine = LLMEngine(loaded, config)
    local = GrammarCompiler(loaded.tokenizer, loaded.config.vocab_size)
    grammars = BudgetedGrammarCompiler(local.tokenizer_info, local.vocab_size,
                                       settings.grammar_timeout_s, settings.grammar_memory_bytes)
    grammars.start()
    kernels = kernel_backend(settings.kernels, engine.model_runner.ops.backend, device)
    threads = torch.get_num_threads()
    log.info("loaded %s on %s in %.1fs: compute %s, weights %s, kernels: %s%s, %d thread%s; "
             "speculative decoding %s", loaded.name, device, time.perf_counter() - started,
             _dtype_name(dtype), weight_format(loaded, matmul_dtype), kernels.ops,
             f" ({kernels.fallback})" if kernels.fallback else "",
             threads, "" if threads == 1 else "s",
             "on" if engine.speculator is not None else "off")
    served = EngineModel(
        loaded, engine, settings.served_model_name or loaded.name, settings.worker_id, grammars,
        kernels,
    )
    # The model, tokenizer and engine live as long as the process: out of the cyclic
    # collector's way, whose full collections walked them all (a tenth of a served
    # worker's CPU at one stream).
    gc.collect()
    gc.freeze()
    # Unfrozen at exit, so the interpreter's last collection frees them: kept frozen,
    # triton's nanobind objects among them are reported leaked (some 30 lines on stderr).
    atexit.register(gc.unfreeze)
    return served


def kernel_backend(requested: str, chosen: str, device: str) -> KernelBackend:
    """The backend the model runs on, in words, with why it fell back where it did."""
    import kernels

    return KernelBackend(
        name=chosen, ops=kernels.BACKEND_OPS.get(chosen, chosen),
        fallback=kernels.fallback_reason(requested, chosen, device),
    )


def weight_format(loaded: LoadedModel, matmul_dtype: Any) -> str:
    """What the linears compute from, named apart from the compute dtype: the file's own
    quantized blocks ("Q4_1 (quantized)") or dense weights in the dtype they are held in."""
    if loaded.weights == "quantized":
        return f"{'+'.join(loaded.quantizations) or 'as stored'} (quantized)"
    return f"dense {_dtype_name(matmul_dtype)}"


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")
