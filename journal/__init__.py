"""The journal: the one layer that talks to NATS.

It owns the connection (connect with retry, reconnect, re-declaring what a restarted
server lost), the streams, consumers and buckets, publishing a response's events with
message ids, following a response's log with gap repair, reading a stored log, the model
registry and liveness, the workers' request queue, cancels, input token counts, the
workers' cache reports and the API keys' rate-limit budgets.
`api/`, `workers/` and `store/` call it; none of them imports the NATS client. It imports
no torch.
"""

from journal.backlog import Backlog
from journal.durable_consumer import Delivery, DurableConsumer
from journal.errors import (
    CountRefused,
    Fenced,
    JournalUnavailable,
    PayloadTooLarge,
    PublishFailed,
    ResponseIdTaken,
)
from journal.follower import LogFollower
from journal.journal import Journal
from journal.rate_limits import ContentionExceeded, RateLimitStates
from journal.settings import JournalSettings
from journal.tail import TailedMessage
from journal.writer import ResponseWriter

__all__ = [
    "Backlog",
    "ContentionExceeded",
    "CountRefused",
    "Delivery",
    "DurableConsumer",
    "Fenced",
    "Journal",
    "JournalSettings",
    "JournalUnavailable",
    "LogFollower",
    "PayloadTooLarge",
    "PublishFailed",
    "RateLimitStates",
    "ResponseIdTaken",
    "ResponseWriter",
    "TailedMessage",
]
