"""What the journal raises: callers map these to their own answers (the API to a 503)."""

from __future__ import annotations


class JournalUnavailable(Exception):
    """NATS cannot be reached, or did not answer in time."""


class PayloadTooLarge(Exception):
    """An event is larger than the NATS server takes in one message (its max_payload):
    the request is the client's to shrink, not a bus failure."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the event is {size} bytes; the message bus takes at most {limit}")
        self.size = size
        self.limit = limit


class ResponseIdTaken(Exception):
    """A client-chosen response id whose log already exists (or is being written by a
    request that claimed it first): the id is someone else's."""

    def __init__(self, response_id: str) -> None:
        super().__init__(f"the response id {response_id!r} is taken")
        self.response_id = response_id


class PublishFailed(Exception):
    """An event could not be persisted; the request must go back to the queue."""


class Fenced(Exception):
    """The response's log was taken over by another writer (its lease superseded): this
    one must stop writing it and drop the response without acking or handing it back."""


class CountRefused(Exception):
    """A worker could not count a request's input tokens; `code` and `param` say why, as
    a failed response would."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
