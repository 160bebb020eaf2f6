"""The Redis client a store URL names: one server (`redis://`, `rediss://`, `unix://`) or a
Redis Cluster (`redis+cluster://host:port`, `rediss+cluster://...`, any one node).

On a Cluster every key of one response or conversation shares a hash slot
(store/redis_keys.py), so every script and transaction runs on one node; commands are
routed by key. Notifications are classic pub/sub, which a Cluster forwards to every
node, so the one subscriber connection a process holds is to the node the URL names.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# A client of either kind: both speak every command and script the store sends.
RedisClient = Redis | RedisCluster


@dataclass(frozen=True, slots=True)
class Connection:
    client: RedisClient
    # Where pub/sub goes: the client itself on one server, a node's own client on a Cluster.
    subscriber: Redis


def connect(url: str, *, timeout_s: float, pool_size: int, pool_wait_s: float) -> Connection:
    # Two quick retries ride over a dropped connection (a Redis restart); past them the
    # caller gets StoreUnavailable at once rather than after the client's default backoff
    # of several seconds. Every script is safe to retry.
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=2)
    parts = urlsplit(url)
    if parts.scheme in CLUSTER_SCHEMES:
        node_url = urlunsplit(parts._replace(scheme=CLUSTER_SCHEMES[parts.scheme], path=""))
        cluster = RedisCluster.from_url(
            node_url, max_connections=pool_size, socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s, retry=retry,
        )
        subscriber = Redis.from_url(node_url, socket_connect_timeout=timeout_s, retry=retry)
        return Connection(cluster, subscriber)
    # One pool of `pool_size` connections for every caller of this process. A call that
    # finds them all busy waits up to `pool_wait_s` for one (then StoreUnavailable), never
    # "Too many connections": a burst queues instead of failing.
    pool = BlockingConnectionPool.from_url(
        url, max_connections=pool_size, timeout=pool_wait_s, socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s, retry=retry,
    )
    client = Redis(connection_pool=pool)
    return Connection(client, client)
