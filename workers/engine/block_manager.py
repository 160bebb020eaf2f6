"""Paged KV-cache block allocator with prefix reuse: full blocks are found again by a hash
chained over every token before them (and the request's cache salt)."""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence as TokenIds

from workers.engine.sequence import Sequence


class Block:
    __slots__ = ("block_id", "ref_count", "hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        # Chained hash of the block's full contents; None while the block is not full.
        self.hash: bytes | None = None


def chained_block_hash(
    previous_hash: bytes | None, token_ids: TokenIds[int], salt: str | None
) -> bytes:
    """A block's identity is everything up to its end, so the previous block's hash is part
    of it; the salt enters only the first block and so reaches every later one through the
    chain, which keeps requests with different salts from ever sharing a block. sha256
    rather than Python's hash() because a collision would silently serve wrong KV."""
    digest = hashlib.sha256()
    if previous_hash is None:
        # A fixed-length digest of the salt, so no salt can pose as another salt plus tokens.
        digest.update(hashlib.sha256(b"salt:" + salt.encode()).digest() if salt else bytes(32))
    else:
        digest.update(previous_hash)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need positive num_blocks and block_size, got {num_blocks}, {block_size}"
            )
        self.block_size = block_size
        self.blocks = [Block(block_id) for block_id in range(num_blocks)]
        self.hash_to_block_id: dict[bytes, int] = {}
        # Free blocks holding no reusable prefix are handed out first; free blocks that
        # still hold a cached prefix are evicted least recently freed first.
        self.free_uncached_block_ids: deque[int] = deque(range(num_blocks))
        self.free_cached_block_ids: OrderedDict[int, None] = OrderedDict()

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_uncached_block_ids) + len(self.free_cached_block_ids)

    def _is_cached(self, block: Block) -> bool:
        return block.hash is not None and self.hash_to_block_id.get(block.hash) == block.block_id

    def _prefix_hits(self, seq: Sequence) -> tuple[list[int], list[bytes]]:
        """Ids of the cached blocks that open this sequence, and the hashes of all its full
        blocks. The block holding the last token never counts as a hit: that token must
        be computed to get logits for the next one."""
        num_full_blocks = seq.num_tokens // self.block_size
        num_hit_candidates = (seq.num_tokens - 1) // self.block_size
        hashes: list[bytes] = []
        hit_block_ids: list[int] = []
        previous_hash: bytes | None = None
        for block_index in range(num_full_blocks):
            previous_hash = chained_block_hash(
                previous_hash,
                seq.block_token_ids(block_index, self.block_size),
                seq.params.cache_salt,
            )
            hashes.append(previous_hash)
            if block_index == len(hit_block_ids) and block_index < num_hit_candidates:
                block_id = self.hash_to_block_id.get(previous_hash)
                if block_id is not None:
                    hit_block_ids.append(block_id)
        return hit_block_ids, hashes

    def can_allocate(self, seq: Sequence) -> bool:
        hit_block_ids, _ = self._prefix_hits(seq)
        # A hit on a block another sequence holds costs nothing; a hit on a free cached
        # block still takes it out of the free pool.
        num_shared = sum(1 for block_id in hit_block_ids if self.blocks[block_id].ref_count > 0)
        return seq.num_blocks(self.block_size) - num_shared <= self.num_free_blocks

    def allocate(self, seq: Sequence) -> None:
        if seq.block_table:
            raise ValueError(f"sequence {seq.request_id} already holds KV blocks")
        hit_block_ids, hashes = self._prefix_hits(seq)
        for block_id in hit_block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                self.free_cached_block_ids.pop(block_id)
            block.ref_count += 1
            seq.block_table.append(block_id)
        for block_index in range(len(hit_block_ids), seq.num_blocks(self.block_size)):
            block = self._take_free_block()
            if block_index < len(hashes):
                # Full blocks are computed in the step that follows, before any other
                # sequence can read them, so they may be offered for reuse right away.
                self._register(block, hashes[block_index])
            seq.block_table.append(block.block_id)
        seq.num_cached_tokens = len(hit_block_ids) * self.block_size

    def free(self, seq: Sequence) -> None:
        # Released last block first so that, among equally old cached blocks, the deepest
        # ones are evicted before the shared prefixes they extend.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if self._is_cached(block):
                    self.free_cached_block_ids[block_id] = None
                else:
                    block.hash = None
                    self.free_uncached_block_ids.append(block_id)
        seq.block_table.clear()
        seq.num_cached_tokens = 0

    def can_append(self, seq: Sequence) -> bool:
        """Whether the KV of the sequence's last token, computed in the coming decode step,
        has a slot."""
        needs_block = seq.num_tokens > len(seq.block_table) * self.block_size
        return not needs_block or self.num_free_blocks >= 1

    def may_append(self, seq: Sequence) -> None:
        if seq.num_tokens > len(seq.block_table) * self.block_size:
            seq.block_table.append(self._take_free_block().block_id)
        if seq.num_tokens % self.block_size == 0:
            # The coming step fills the last block: make it findable by later requests.
            block_index = len(seq.block_table) - 1
            previous_hash = (
                self.blocks[seq.block_table[block_index - 1]].hash if block_index else None
            )
            if block_index and previous_hash is None:
                return
            block_hash = chained_block_hash(
                previous_hash,
                seq.block_token_ids(block_index, self.block_size),
                seq.params.cache_salt,
            )
            self._register(self.blocks[seq.block_table[block_index]], block_hash)

    def _register(self, block: Block, block_hash: bytes) -> None:
        block.hash = block_hash
        # An identical block already cached stays the one that is found; this one keeps
        # its hash only so that the block after it can chain from it.
        self.hash_to_block_id.setdefault(block_hash, block.block_id)

    def _take_free_block(self) -> Block:
        if self.free_uncached_block_ids:
            block_id = self.free_uncached_block_ids.popleft()
        elif self.free_cached_block_ids:
            block_id, _ = self.free_cached_block_ids.popitem(last=False)
        else:
            raise RuntimeError("no free KV block; the scheduler must check before allocating")
        block = self.blocks[block_id]
        if block.hash is not None and self._is_cached(block):
            del self.hash_to_block_id[block.hash]
        block.hash = None
        block.ref_count = 1
        return block
