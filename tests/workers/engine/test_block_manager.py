"""BlockManager: allocation, prefix reuse by chained hashes and to the token, salts,
eviction and freeing."""

from __future__ import annotations

import pytest

from workers.engine.block_manager import BlockManager
from workers.engine.sampling_params import SamplingParams
from workers.engine.sequence import Sequence

BLOCK_SIZE = 4


def make_sequence(token_ids, request_id="r", cache_salt=None, arrival_order=0):
    params = SamplingParams.of(cache_salt=cache_salt)
    return Sequence(request_id, arrival_order, list(token_ids), params, max_num_tokens=1000)


def test_allocate_takes_one_block_per_block_size_tokens_and_free_returns_them():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    seq = make_sequence(range(10))
    manager.allocate(seq)
    assert len(seq.block_table) == 3
    assert manager.num_free_blocks == 5
    manager.free(seq)
    assert seq.block_table == []
    assert manager.num_free_blocks == 8


def test_shared_prefix_reuses_full_blocks_and_counts_cached_tokens():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    first = make_sequence([1, 2, 3, 4, 5, 6, 7, 8, 9], "first")
    second = make_sequence([1, 2, 3, 4, 5, 6, 7, 8, 42, 43], "second")
    manager.allocate(first)
    manager.allocate(second)
    assert second.block_table[:2] == first.block_table[:2]
    assert second.block_table[2] != first.block_table[2]
    assert second.num_cached_tokens == 8
    assert manager.blocks[first.block_table[0]].ref_count == 2
    # Shared blocks stay held until the last holder lets go.
    manager.free(first)
    assert manager.blocks[second.block_table[0]].ref_count == 1
    manager.free(second)
    assert manager.num_free_blocks == 8


def test_the_block_with_the_last_token_is_always_computed():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    first = make_sequence(range(8), "first")
    manager.allocate(first)
    manager.start_step()
    again = make_sequence(range(8), "again")
    manager.allocate(again)
    # Eight tokens are two full blocks, but the second holds the last token, whose logits
    # are needed: the first is shared, the second's first three tokens are lent and the
    # last one is computed.
    assert again.block_table[0] == first.block_table[0]
    assert again.block_table[1] != first.block_table[1]
    assert again.kv_copy == (first.block_table[1], again.block_table[1])
    assert again.num_cached_tokens == 7


def test_a_block_that_opens_alike_lends_its_tokens():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    first = make_sequence(range(9), "first")
    manager.allocate(first)
    manager.start_step()
    second = make_sequence([0, 1, 2, 3, 4, 5, 99, 98, 97], "second")
    manager.allocate(second)
    # Block 0 is shared whole; block 1 ([4, 5, 6, 7] cached) opens with two of second's
    # tokens, which are copied into second's own block 1.
    assert second.block_table[0] == first.block_table[0]
    assert second.kv_copy == (first.block_table[1], second.block_table[1])
    assert second.num_cached_tokens == 6
    # The lender stays cached and unchanged for its own continuation.
    third = make_sequence([*range(8), 50], "third")
    manager.allocate(third)
    assert third.block_table[:2] == first.block_table[:2]
    assert third.num_cached_tokens == 8


def test_the_first_block_lends_too_and_the_longest_match_wins():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    short = make_sequence([7, 8, 1, 1, 0], "short")
    long = make_sequence([7, 8, 9, 1, 0], "long")
    manager.allocate(short)
    manager.allocate(long)
    manager.start_step()
    seq = make_sequence([7, 8, 9, 2, 2, 2], "seq")
    manager.allocate(seq)
    assert seq.kv_copy == (long.block_table[0], seq.block_table[0])
    assert seq.num_cached_tokens == 3
    manager.free(seq)
    assert seq.kv_copy is None and seq.num_cached_tokens == 0


def test_blocks_the_coming_step_computes_are_never_lent():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    first = make_sequence(range(5), "first")
    manager.allocate(first)
    # No step has run: block 0's keys and values are computed by the coming one, which a
    # copy made before it would miss.
    second = make_sequence([0, 1, 9, 9, 9], "second")
    manager.allocate(second)
    assert second.kv_copy is None and second.num_cached_tokens == 0


def test_nothing_is_lent_across_salts_or_after_eviction():
    manager = BlockManager(num_blocks=2, block_size=BLOCK_SIZE)
    first = make_sequence(range(5), "first")
    manager.allocate(first)
    manager.free(first)
    manager.start_step()
    salted = make_sequence([0, 1, 9, 9, 9], "salted", cache_salt="tenant")
    manager.allocate(salted)
    assert salted.kv_copy is None and salted.num_cached_tokens == 0
    manager.free(salted)
    # salted took both free blocks, evicting block 0's cached prefix.
    again = make_sequence([0, 1, 9, 9, 9], "again")
    manager.allocate(again)
    assert again.kv_copy is None and again.num_cached_tokens == 0


def test_blocks_of_a_failed_step_are_forgotten():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    kept = make_sequence(range(5), "kept")
    manager.allocate(kept)
    kept_block_id = kept.block_table[0]
    manager.free(kept)
    manager.start_step()
    failed = make_sequence(range(9), "failed")
    manager.allocate(failed)
    manager.forget_uncomputed([failed])
    manager.free(failed)
    manager.start_step()
    # Block 0, computed by an earlier step, is still found; block 1, which the failed
    # step was to compute, is neither shared nor lent.
    again = make_sequence(range(9), "again")
    manager.allocate(again)
    assert again.block_table[0] == kept_block_id
    assert again.num_cached_tokens == 4 and again.kv_copy is None


def test_freed_blocks_keep_their_prefix_until_evicted():
    manager = BlockManager(num_blocks=4, block_size=BLOCK_SIZE)
    first = make_sequence(range(9), "first")
    manager.allocate(first)
    manager.free(first)
    later = make_sequence([*range(8), 99], "later")
    assert manager.can_allocate(later)
    manager.allocate(later)
    assert later.num_cached_tokens == 8


def test_uncached_free_blocks_are_used_before_cached_ones_are_evicted():
    manager = BlockManager(num_blocks=4, block_size=BLOCK_SIZE)
    cached = make_sequence(range(5), "cached")  # one full block, one partial
    manager.allocate(cached)
    manager.free(cached)
    other = make_sequence([50, 51, 52, 53, 54, 55, 56], "other")  # needs 2 blocks
    manager.allocate(other)
    manager.free(other)
    again = make_sequence([*range(4), 77], "again")
    manager.allocate(again)
    assert again.num_cached_tokens == 4


def test_evicted_block_is_no_longer_found():
    manager = BlockManager(num_blocks=2, block_size=BLOCK_SIZE)
    first = make_sequence(range(5), "first")
    manager.allocate(first)
    manager.free(first)
    filler = make_sequence(range(100, 108), "filler")
    manager.allocate(filler)
    manager.free(filler)
    again = make_sequence(range(5), "again")
    manager.allocate(again)
    assert again.num_cached_tokens == 0


def test_different_salts_never_share_blocks():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    tokens = list(range(13))
    alice = make_sequence(tokens, "alice", cache_salt="alice")
    bob = make_sequence(tokens, "bob", cache_salt="bob")
    unsalted = make_sequence(tokens, "unsalted")
    alice_again = make_sequence(tokens, "alice-again", cache_salt="alice")
    for seq in (alice, bob, unsalted, alice_again):
        manager.allocate(seq)
    assert not set(alice.block_table) & set(bob.block_table)
    assert not set(alice.block_table) & set(unsalted.block_table)
    assert not set(bob.block_table) & set(unsalted.block_table)
    assert bob.num_cached_tokens == 0 and unsalted.num_cached_tokens == 0
    assert alice_again.num_cached_tokens == 12


def test_decode_appends_a_block_when_the_last_one_is_full_and_registers_full_blocks():
    manager = BlockManager(num_blocks=8, block_size=BLOCK_SIZE)
    seq = make_sequence(range(4))
    manager.allocate(seq)
    assert len(seq.block_table) == 1
    for token_id in range(100, 104):
        seq.append_token(token_id)
        assert manager.can_append(seq)
        manager.may_append(seq)
    assert len(seq.block_table) == 2
    # The decoded block is full now, so a sequence with the same eight tokens plus one
    # more finds both blocks.
    follower = make_sequence([*range(4), 100, 101, 102, 103, 7], "follower")
    manager.allocate(follower)
    assert follower.block_table[:2] == seq.block_table
    assert follower.num_cached_tokens == 8


def test_can_allocate_and_can_append_report_exhaustion():
    manager = BlockManager(num_blocks=2, block_size=BLOCK_SIZE)
    seq = make_sequence(range(8))
    assert manager.can_allocate(seq)
    manager.allocate(seq)
    assert not manager.can_allocate(make_sequence([9], "other"))
    seq.append_token(8)
    assert not manager.can_append(seq)
    with pytest.raises(RuntimeError):
        manager.may_append(seq)


def test_invalid_sizes_are_rejected():
    with pytest.raises(ValueError):
        BlockManager(num_blocks=0, block_size=4)


def decode(manager, seq, token_ids):
    """Appends each token as a decode step would, with the step's block bookkeeping."""
    for token_id in token_ids:
        seq.append_token(token_id)
        manager.start_step()
        assert manager.can_append(seq)
        manager.may_append(seq)


def held_blocks(manager):
    return manager.num_blocks - manager.num_free_blocks


def test_a_sliding_model_gives_back_the_blocks_before_every_window():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE, release_window=6)
    seq = make_sequence(range(10))
    manager.allocate(seq)
    assert held_blocks(manager) == 3  # the prefill reads every block
    peak = 0
    for token_id in range(100, 140):
        decode(manager, seq, [token_id])
        peak = max(peak, held_blocks(manager))
        # The coming query (the last token) sees tokens num_tokens - 6 onwards: the blocks
        # those sit in stay held, and the one before the last token's (its hash chains
        # the next), nothing earlier.
        first_needed = min((seq.num_tokens - 6) // BLOCK_SIZE, (seq.num_tokens - 1) // BLOCK_SIZE - 1)
        for index, block_id in enumerate(seq.block_table):
            assert (manager.blocks[block_id].ref_count == 1) == (index >= first_needed), index
    assert len(seq.block_table) == 13  # positions still index the whole table
    assert peak <= 4
    manager.free(seq)
    assert manager.num_free_blocks == 16
    assert all(block.ref_count == 0 for block in manager.blocks)


def test_a_model_with_full_layers_keeps_every_block():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE)
    seq = make_sequence(range(10))
    manager.allocate(seq)
    decode(manager, seq, range(100, 130))
    assert held_blocks(manager) == len(seq.block_table) == 10


def test_given_back_blocks_keep_their_prefix_and_later_blocks_chain_right():
    """Blocks given back stay findable until evicted, and the blocks the sequence fills
    after giving some back are registered under the hashes an unbroken run gives them:
    the same tokens again hit every full block but the last token's."""
    manager = BlockManager(num_blocks=32, block_size=BLOCK_SIZE, release_window=5)
    seq = make_sequence(range(6), "first")
    manager.allocate(seq)
    decode(manager, seq, range(100, 120))
    assert held_blocks(manager) < len(seq.block_table)
    again = make_sequence(seq.token_ids, "again")
    manager.start_step()
    manager.allocate(again)
    assert again.block_table[:6] == seq.block_table[:6]
    assert again.num_cached_tokens == 24
    # Shared blocks the first sequence gave back are held by the second alone.
    assert manager.blocks[seq.block_table[0]].ref_count == 1
    manager.free(again)
    manager.free(seq)
    assert manager.num_free_blocks == 32
    assert all(block.ref_count == 0 for block in manager.blocks)


def test_a_preempted_sliding_sequence_is_allocated_afresh():
    manager = BlockManager(num_blocks=16, block_size=BLOCK_SIZE, release_window=4)
    seq = make_sequence(range(5))
    manager.allocate(seq)
    decode(manager, seq, range(100, 115))
    manager.free(seq)  # preempted: recomputed whole when readmitted
    assert manager.num_free_blocks == 16
    manager.start_step()
    manager.allocate(seq)
    assert held_blocks(manager) == len(seq.block_table) == 5
    decode(manager, seq, [200])
    assert held_blocks(manager) < len(seq.block_table)


def test_a_bad_release_window_is_refused():
    with pytest.raises(ValueError, match="release_window"):
        BlockManager(num_blocks=4, block_size=4, release_window=0)
