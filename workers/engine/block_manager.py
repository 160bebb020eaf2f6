"""Paged KV-cache block allocator with prefix reuse: full blocks are found again by a hash
chained over every token before them (and the request's cache salt), and past the last
full block that matches, a cached block that opens with the same tokens lends them to the
token: its keys and values are copied into the sequence's own block. Where every attention
layer of the model slides, a decoding sequence gives back the blocks wholly before its
window (`release_window`)."""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Iterable
from collections.abc import Sequence as TokenIds

from workers.engine.sequence import Sequence


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "parent", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        # Chained hash of the block's full contents; None while the block is not full.
        self.hash: bytes | None = None
        # While the block is the one its hash finds: the chain key it extends (the
        # previous block's hash, or the salt's root) and its tokens, so that a sequence
        # sharing only the block's first tokens can still be lent them.
        self.parent: bytes | None = None
        self.token_ids: tuple[int, ...] = ()


def chain_root(salt: str | None) -> bytes:
    """What the first block of a sequence chains from: a fixed-length digest of the salt,
    so no salt can pose as another salt plus tokens."""
    return hashlib.sha256(b"salt:" + salt.encode()).digest() if salt else bytes(32)


def chained_block_hash(
    previous_hash: bytes | None, token_ids: TokenIds[int], salt: str | None
) -> bytes:
    """A block's identity is everything up to its end, so the previous block's hash is part
    of it; the salt enters only the first block and so reaches every later one through the
    chain, which keeps requests with different salts from ever sharing a block. sha256
    rather than Python's hash() because a collision would silently serve wrong KV."""
    digest = hashlib.sha256()
    digest.update(chain_root(salt) if previous_hash is None else previous_hash)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


class BlockManager:
    def __init__(
        self, num_blocks: int, block_size: int, release_window: int | None = None
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"need positive num_blocks and block_size, got {num_blocks}, {block_size}"
            )
        if release_window is not None and release_window < 1:
            raise ValueError(f"release_window must be positive, got {release_window}")
        self.block_size = block_size
        # Where every attention layer slides: the widest window, past which no layer reads
        # a key again (a query at p sees p - W < k <= p). None keeps every block a
        # sequence filled until it ends.
        self.release_window = release_window
        # How many leading entries of a running sequence's block table it has given back
        # (by request id). The entries stay, so a position still indexes its block, but
        # their blocks may hold another sequence's keys by now: nothing reads them, since
        # every later query's window starts past them.
        self.num_released: dict[str, int] = {}
        self.blocks = [Block(block_id) for block_id in range(num_blocks)]
        self.hash_to_block_id: dict[bytes, int] = {}
        # The cached blocks extending each chain key, searched for a partial match.
        self.children: dict[bytes, set[int]] = {}
        # Cached blocks whose keys and values the coming step computes: a sequence of the
        # same step may share them whole (the step writes a layer's cache before any
        # sequence reads it) but not have them copied before the step.
        self.uncomputed_block_ids: set[int] = set()
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

    def start_step(self) -> None:
        """Called as a step is scheduled: every block registered before has been computed
        by a step that ran."""
        self.uncomputed_block_ids.clear()

    def forget_uncomputed(self, seqs: Iterable[Sequence]) -> None:
        """The step that was to compute these sequences' new blocks failed: those blocks
        must never be found again."""
        for seq in seqs:
            for block_id in self._held(seq):
                if block_id in self.uncomputed_block_ids:
                    self._uncache(self.blocks[block_id])

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

    def _partial_hit(
        self, seq: Sequence, block_index: int, hashes: list[bytes]
    ) -> tuple[int, int] | None:
        """A computed cached block that extends the same chain as the sequence's block at
        `block_index` and opens with the most of the same tokens, and how many: (block id,
        tokens), or None. The last token is never lent, as with whole blocks."""
        start = block_index * self.block_size
        limit = min(self.block_size, seq.num_tokens - 1 - start)
        if limit < 1:
            return None
        parent = _chain_key(seq, block_index, hashes)
        wanted = seq.token_ids[start : start + limit]
        best: tuple[int, int] | None = None
        for block_id in self.children.get(parent, ()):
            if block_id in self.uncomputed_block_ids:
                continue
            num_same = 0
            for cached, token_id in zip(self.blocks[block_id].token_ids, wanted, strict=False):
                if cached != token_id:
                    break
                num_same += 1
            if num_same and (best is None or num_same > best[1]):
                best = (block_id, num_same)
        return best

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
        num_hits = len(hit_block_ids)
        # Looked up before any block is taken: a free source block evicted below still
        # holds its keys and values when the copy runs, ahead of the step's forward pass.
        partial = self._partial_hit(seq, num_hits, hashes)
        for block_id in hit_block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                self.free_cached_block_ids.pop(block_id)
            block.ref_count += 1
            seq.block_table.append(block_id)
        for block_index in range(num_hits, seq.num_blocks(self.block_size)):
            block = self._take_free_block()
            if block_index < len(hashes):
                # Full blocks are computed in the step that follows, before any other
                # sequence can read them, so they may be offered for reuse right away.
                self._register(
                    block,
                    hashes[block_index],
                    _chain_key(seq, block_index, hashes),
                    seq.block_token_ids(block_index, self.block_size),
                )
            seq.block_table.append(block.block_id)
        seq.num_cached_tokens = num_hits * self.block_size
        seq.kv_copy = None
        if partial is not None:
            source_block_id, num_lent = partial
            seq.kv_copy = (source_block_id, seq.block_table[num_hits])
            seq.num_cached_tokens += num_lent

    def free(self, seq: Sequence) -> None:
        # Released last block first so that, among equally old cached blocks, the deepest
        # ones are evicted before the shared prefixes they extend.
        for block_id in reversed(self._held(seq)):
            self._let_go(self.blocks[block_id])
        self.num_released.pop(seq.request_id, None)
        seq.block_table.clear()
        seq.num_cached_tokens = 0
        seq.kv_copy = None

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
            self._register_filled(seq, seq.num_tokens // self.block_size - 1)
        if self.release_window is not None:
            self._release_before_window(seq, self.release_window)

    def _release_before_window(self, seq: Sequence, window: int) -> None:
        """Gives back the blocks wholly before the window of the coming step's first query
        (the last token, at num_tokens - 1; drafts sit after it), so before every later
        query's. They go back as a finished sequence's do: a cached one stays findable
        until evicted. The block before the last token's is kept whatever the window: the
        block it fills next chains its hash from that one's."""
        first_visible = seq.num_tokens - window
        last_token_block = (seq.num_tokens - 1) // self.block_size
        end = min(first_visible // self.block_size, last_token_block - 1)
        released = self.num_released.get(seq.request_id, 0)
        if first_visible <= 0 or end <= released:
            return
        for block_index in range(released, end):
            self._let_go(self.blocks[seq.block_table[block_index]])
        self.num_released[seq.request_id] = end

    def _held(self, seq: Sequence) -> list[int]:
        """The ids of the blocks the sequence holds: its table past what it gave back."""
        return seq.block_table[self.num_released.get(seq.request_id, 0) :]

    def _let_go(self, block: Block) -> None:
        """One holder fewer; a block nobody holds goes back to the pool."""
        block.ref_count -= 1
        if block.ref_count == 0:
            if self._is_cached(block):
                self.free_cached_block_ids[block.block_id] = None
            else:
                block.hash = None
                self.free_uncached_block_ids.append(block.block_id)

    def reserve_slots(self, seq: Sequence, num_slots: int) -> int:
        """KV slots for up to `num_slots` draft tokens past the sequence's last token, which
        the coming step computes and then keeps or drops (`release_unused_slots`); taken
        only from blocks that hold no cached prefix, so drafting never evicts one. Returns
        how many slots the sequence has."""
        spare = len(seq.block_table) * self.block_size - seq.num_tokens
        missing = num_slots - spare
        if missing > 0:
            num_new = min(-(-missing // self.block_size), len(self.free_uncached_block_ids))
            for _ in range(num_new):
                seq.block_table.append(self._take_free_block().block_id)
            spare += num_new * self.block_size
        return max(0, min(num_slots, spare))

    def release_unused_slots(self, seq: Sequence) -> None:
        """Frees the blocks past the sequence's last token (its refused drafts' slots), so
        that it holds what a decode step would have left it."""
        keep = -(-(seq.num_tokens - 1) // self.block_size)
        while len(seq.block_table) > keep:
            block = self.blocks[seq.block_table.pop()]
            # Taken by reserve_slots for this sequence alone, and never registered.
            block.ref_count = 0
            block.hash = None
            self.free_uncached_block_ids.append(block.block_id)

    def cache_computed(self, seq: Sequence, position: int) -> None:
        """The step computed the sequence's token at `position` as a draft the sampler then
        kept: if it fills its block, the block is made findable as `may_append` makes a
        decode step's one token's block."""
        if (position + 1) % self.block_size == 0:
            block_index = position // self.block_size
            self._register_filled(seq, block_index)
            self.uncomputed_block_ids.discard(seq.block_table[block_index])

    def _register_filled(self, seq: Sequence, block_index: int) -> None:
        previous_hash = self.blocks[seq.block_table[block_index - 1]].hash if block_index else None
        if block_index and previous_hash is None:
            return
        token_ids = seq.block_token_ids(block_index, self.block_size)
        self._register(
            self.blocks[seq.block_table[block_index]],
            chained_block_hash(previous_hash, token_ids, seq.params.cache_salt),
            previous_hash or chain_root(seq.params.cache_salt),
            token_ids,
        )

    def _register(
        self, block: Block, block_hash: bytes, parent: bytes, token_ids: TokenIds[int]
    ) -> None:
        block.hash = block_hash
        # An identical block already cached stays the one that is found; this one keeps
        # its hash only so that the block after it can chain from it.
        if self.hash_to_block_id.setdefault(block_hash, block.block_id) == block.block_id:
            block.parent = parent
            block.token_ids = tuple(token_ids)
            self.children.setdefault(parent, set()).add(block.block_id)
            self.uncomputed_block_ids.add(block.block_id)

    def _uncache(self, block: Block) -> None:
        """Makes a cached block unfindable; its hash is cleared too, so that no later block
        chains from it."""
        if block.hash is not None and self._is_cached(block):
            del self.hash_to_block_id[block.hash]
            if block.parent is not None:
                siblings = self.children[block.parent]
                siblings.discard(block.block_id)
                if not siblings:
                    del self.children[block.parent]
        block.hash = block.parent = None
        block.token_ids = ()
        self.uncomputed_block_ids.discard(block.block_id)
        if block.ref_count == 0 and block.block_id in self.free_cached_block_ids:
            del self.free_cached_block_ids[block.block_id]
            self.free_uncached_block_ids.append(block.block_id)

    def _take_free_block(self) -> Block:
        if self.free_uncached_block_ids:
            block_id = self.free_uncached_block_ids.popleft()
        elif self.free_cached_block_ids:
            block_id, _ = self.free_cached_block_ids.popitem(last=False)
        else:
            raise RuntimeError("no free KV block; the scheduler must check before allocating")
        block = self.blocks[block_id]
        self._uncache(block)
        block.ref_count = 1
        return block


def _chain_key(seq: Sequence, block_index: int, hashes: list[bytes]) -> bytes:
    """What the sequence's block at `block_index` chains from, given its full blocks'
    hashes: the previous block's hash, or the salt's root for the first block."""
    return hashes[block_index - 1] if block_index else chain_root(seq.params.cache_salt)
