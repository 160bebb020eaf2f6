"""From a validated request body to the RequestAccepted event it becomes: the checks that
need the server (priority floor, server tools, store, model, request id), the earlier
turns and files it builds on, and the lowering. Every route that takes a Responses
request builds its event here."""

from __future__ import annotations

from dataclasses import dataclass

from api.errors import ERROR_STATUS, APIError, request_id_taken
from api.guards.limits import check_limits
from api.lowering.accept import accept
from api.lowering.compaction import Compacted, compact, compaction_threshold, expanded_compactions
from api.lowering.encrypted_content import ContentKeys, opened_reasoning
from api.lowering.history import Context, context_of, recorded_of, resolved_references, with_context
from api.lowering.input_files import refuse_images, with_file_text
from api.lowering.item_ids import check_unique_item_ids
from api.lowering.tool_policy import check_server_tools
from api.schema.fields import store_field_message
from api.schema.input_items import CompactionItem, MessageItem
from api.schema.request import ResponsesRequest
from api.settings import ApiSettings
from events import ModelCard, RequestAccepted
from events.ids import new_response_id
from journal import CountRefused, Journal
from store import Store


@dataclass(frozen=True, slots=True)
class BuiltRequest:
    """A request's event, with the body it was lowered from (sealed reasoning opened,
    item references resolved, files read) and the earlier turns it builds on."""

    event: RequestAccepted
    body: ResponsesRequest
    context: Context


async def request_event(
    store: Store | None, journal: Journal, settings: ApiSettings, body: ResponsesRequest,
    owner: str, content_keys: ContentKeys,
) -> RequestAccepted:
    """The event a create publishes: with the store on, as the store projects it."""
    built = await built_request(store, journal, settings, body, owner, content_keys)
    return built.event


async def built_request(
    store: Store | None, journal: Journal, settings: ApiSettings, body: ResponsesRequest,
    owner: str, content_keys: ContentKeys, chain: Context | None = None,
) -> BuiltRequest:
    """`request_event`, and what it was built from. `chain`: the turns before
    `previous_response_id` when the caller holds them (a WebSocket connection does), so
    they are not read from the store, which may be off; the Response echoes the id."""
    check_priority(body, settings.priority_floor)
    check_server_tools(body, settings.server_tools)
    store, body, context, card = await _prepared(
        store, journal, settings, body, owner, content_keys, chain)
    response_id = await response_id_for(store, body)
    model_input = expanded_compactions(with_context(body, context), content_keys, owner)
    compaction = None
    if body.context_management:
        # Counted on the input as it stands; the event is built from what it becomes.
        counted = accept(model_input, response_id, card.default_sampling, owner=owner)
        compacted = await compacted_if_long(journal, counted, model_input, card, owner,
                                            content_keys)
        if compacted is not None:
            compacted_input = model_input.model_copy(update={"input": [
                *compacted.instructions, CompactionItem.model_validate(compacted.item)]})
            model_input = expanded_compactions(compacted_input, content_keys, owner)
            compaction = compacted.item
    recorded = recorded_of(body, context, stored=store is not None,
                           chained=chain is not None, compaction=compaction)
    event = accept(model_input, response_id, card.default_sampling, owner=owner,
                   recorded=recorded)
    check_limits(event)
    return BuiltRequest(event, body, context)


async def compacted_if_long(
    journal: Journal, event: RequestAccepted, model_input: ResponsesRequest, card: ModelCard,
    owner: str, content_keys: ContentKeys,
) -> Compacted | None:
    """The request's input compacted when a worker counts more tokens in it than its
    `context_management` threshold (80% of the model's context without one)."""
    threshold = compaction_threshold(model_input) or card.context_length * 4 // 5
    try:
        count = await journal.count_input_tokens(event)
    except CountRefused as refused:
        if refused.code != "context_length_exceeded":  # past the context is past any threshold
            raise APIError(ERROR_STATUS.get(refused.code, 500), refused.message,
                           param=refused.param, code=refused.code) from refused
        count = threshold + 1
    if count <= threshold:
        return None
    items = model_input.input if isinstance(model_input.input, list) else [
        MessageItem(role="user", content=model_input.input)]
    return await compact(journal, model_input, list(items), card, owner, content_keys)


async def would_be_event(
    store: Store | None, journal: Journal, settings: ApiSettings, body: ResponsesRequest,
    owner: str, content_keys: ContentKeys,
) -> RequestAccepted:
    """The event a create would publish, never published: a worker renders it as it
    would (to count its input tokens)."""
    _, body, context, card = await _prepared(
        store, journal, settings, body, owner, content_keys)
    event = accept(expanded_compactions(with_context(body, context), content_keys, owner),
                   new_response_id(), card.default_sampling, owner=owner)
    check_limits(event)
    return event


async def conversation_items(
    store: Store | None, journal: Journal, settings: ApiSettings, body: ResponsesRequest,
    owner: str, content_keys: ContentKeys,
) -> tuple[ResponsesRequest, ModelCard]:
    """The request with the earlier turns it builds on before its own input, compaction
    items opened (the conversation `POST /v1/responses/compact` compacts), and its model's
    card."""
    _, body, context, card = await _prepared(
        store, journal, settings, body, owner, content_keys)
    return expanded_compactions(with_context(body, context), content_keys, owner), card


async def _prepared(
    store: Store | None, journal: Journal, settings: ApiSettings, body: ResponsesRequest,
    owner: str, content_keys: ContentKeys, chain: Context | None = None,
) -> tuple[Store | None, ResponsesRequest, Context, ModelCard]:
    """The store the request uses, the body with its sealed reasoning opened, its item
    references resolved and its files read into text, the earlier turns it builds on
    (`chain` when given), and its model's card."""
    body = opened_reasoning(body, content_keys, owner)
    store = stateful_store(store, body, chained=chain is not None)
    body = await resolved_references(store, body, owner)
    if chain is not None:
        context = chain
    else:
        context = await context_of(store, body, owner) if store is not None else Context()
    if isinstance(body.input, list):
        check_unique_item_ids(body.input, "input", context.items, earlier_turns(body, context))
    card = await check_model(journal, body)
    refuse_images(body, card)
    body = await with_file_text(body, settings.max_file_bytes)
    return store, body, context, card


def earlier_turns(body: ResponsesRequest, context: Context) -> str:
    """What the earlier turns of a request are, for an error that names them."""
    if context.conversation_id is not None:
        return f"the conversation '{context.conversation_id}'"
    return f"the chain of the previous response '{body.previous_response_id}'"


def check_priority(body: ResponsesRequest, floor: int) -> None:
    """A 400 for a priority more urgent than this server lets clients ask for."""
    if body.priority is not None and body.priority < floor:
        raise APIError(400, f"Invalid value for 'priority': this server allows {floor} "
                       "at the most urgent (lower runs first; SPATE_PRIORITY_FLOOR).",
                       param="priority", code="invalid_value")


def stateful_store(
    store: Store | None, body: ResponsesRequest, chained: bool = False
) -> Store | None:
    """The store this request uses (the server's, or None with it off); a 400 for a
    stateful field it cannot have (`previous_response_id` can do without the store when
    the caller holds the chain)."""
    previous = None if chained else body.previous_response_id
    wanted = [name for name, value in (
        ("background", body.background), ("previous_response_id", previous),
        ("conversation", body.conversation)) if value]
    if store is None:
        if wanted:
            raise APIError(400, store_field_message(wanted[0]), param=wanted[0],
                           code="invalid_value")
        return None
    if body.background and body.store is False:
        raise APIError(400, "'background' needs 'store' to be true: a background response "
                       "is read back from the store.", param="background", code="invalid_value")
    return store


async def response_id_for(store: Store | None, body: ResponsesRequest) -> str:
    """A new response id, or the client's `request_id` unless the store already holds a
    response by it (one whose log has aged out of NATS); the log itself is claimed
    atomically when the request is published (a 409 for the loser)."""
    if body.request_id is None:
        return new_response_id()
    if store is not None and await store.get_response(body.request_id) is not None:
        raise request_id_taken(body.request_id)
    return body.request_id


async def check_model(journal: Journal, body: ResponsesRequest) -> ModelCard:
    card = await journal.registry.card(body.model)
    if card is None:
        await refuse_unloadable(journal, body.model)
        raise APIError(404, f"The model '{body.model}' does not exist.", param="model",
                       code="model_not_found")
    if body.thinking_token_budget is not None and not card.supports_reasoning:
        raise APIError(
            400,
            f"The model '{body.model}' has no reasoning markers, so 'thinking_token_budget' cannot apply.",
            param="thinking_token_budget", code="invalid_value",
        )
    if not await journal.registry.is_live(body.model):
        await refuse_unloadable(journal, body.model)
        raise APIError(503, f"No worker is serving the model '{body.model}' right now.",
                       param="model", code="model_unavailable")
    return card


async def refuse_unloadable(journal: Journal, model: str) -> None:
    """A 503 naming the reason when no worker serves `model` because one could not load
    it (the registry keeps the latest such failure for a while); nothing otherwise."""
    failure = await journal.registry.load_failure(model)
    if failure is not None:
        raise APIError(503, f"The model '{model}' could not be loaded: {failure.reason}",
                       param="model", code="model_load_failed")
