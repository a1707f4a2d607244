"""Prefix caching in ``PagedKVCacheManager`` (no model): full pages are named by their token
prefix and shared by later requests with the same prefix (reference-counted, never the page
holding the last token), cached pages survive their requests until evicted oldest-first, the
page table and slots point at the shared pages, and the cache resets."""

from __future__ import annotations

import numpy as np
import pytest

from max.dtype import DType
from max.interfaces import SamplingParams
from max.kv_cache import KVCacheExhaustedError, PagedKVCacheManager
from max.kv_cache.prefix_cache import PagePool, page_names
from max.nn.kv_cache import KVCacheParams
from max.pipelines.lib.context import TextContext

PS = 4


def _manager(pages, prefix=True):
    params = KVCacheParams(DType.float32, n_kv_heads=1, head_dim=2, num_layers=1, page_size=PS,
                           enable_prefix_caching=prefix)
    return PagedKVCacheManager(params, None, pages, max_seq_len=64)


def _ctx(tokens):
    return TextContext(max_length=64, tokens=np.asarray(tokens), sampling_params=SamplingParams(top_k=1))


def _prefill(kv, ctx):
    """Allocates and commits every pending token of `ctx` as one step would."""
    kv.alloc(ctx)
    kv.step([[ctx]])
    ctx.commit()


def test_second_request_shares_the_full_pages_of_the_first(rng):
    kv = _manager(16)
    prompt = rng.integers(0, 1000, 11)  # two full pages and three tokens
    a = _ctx(prompt)
    _prefill(kv, a)
    b = _ctx(np.concatenate([prompt[:8], rng.integers(0, 1000, 5)]))
    kv.alloc(b)
    assert b.start_idx == 8 and b.active_length == 5
    assert kv.get_req_blocks(b.request_id)[:2] == kv.get_req_blocks(a.request_id)[:2]
    assert kv.get_req_blocks(b.request_id)[2] not in kv.get_req_blocks(a.request_id)
    assert kv.get_metrics()["prefix_hit_tokens"] == 8
    # The graph writes b's tokens after the shared pages, into b's own.
    (inputs,) = kv.get_runtime_inputs([[b]])
    pages = kv.get_req_blocks(b.request_id)
    assert inputs.cache_lengths.to_numpy().tolist() == [8]
    assert inputs.positions.to_numpy().tolist() == list(range(8, 13))
    want = [pages[p // PS] * PS + p % PS for p in range(8, 13)]
    assert inputs.slots.to_numpy().tolist() == want
    # Used pages count each page once.
    assert kv.get_num_used_pages() == 3 + 2


def test_the_last_token_is_always_computed(rng):
    kv = _manager(16)
    prompt = rng.integers(0, 1000, 8)  # exactly two pages
    _prefill(kv, _ctx(prompt))
    again = _ctx(prompt)
    kv.alloc(again)
    assert again.start_idx == 4 and again.active_length == 4  # the second page is recomputed


def test_pages_outlive_their_request_until_evicted(rng):
    kv = _manager(6)
    p1 = rng.integers(0, 1000, 9)
    a = _ctx(p1)
    _prefill(kv, a)
    kv.release(a.request_id)
    assert kv.get_num_used_pages() == 0 and kv.num_cached_pages == 2 and kv.free_pages == 6
    b = _ctx(p1)
    kv.alloc(b)
    assert b.start_idx == 8
    kv.release(b.request_id)
    # A request needing every page evicts the cached ones.
    c = _ctx(rng.integers(1000, 2000, 23))
    kv.alloc(c)
    assert kv.get_metrics()["evicted_pages"] == 2 and kv.free_pages == 0
    with pytest.raises(KVCacheExhaustedError):
        kv.alloc(_ctx([1, 2]))
    kv.release(c.request_id)
    d = _ctx(p1)
    kv.alloc(d)
    assert d.start_idx == 0  # its prefix was evicted


def test_generated_tokens_are_named_too_and_reset_forgets(rng):
    kv = _manager(16)
    a = _ctx(rng.integers(0, 1000, 3))
    _prefill(kv, a)
    for t in rng.integers(0, 1000, 6):  # decode steps: one token each
        a.append(int(t))
        _prefill(kv, a)
    tokens = a.tokens.copy()
    kv.release(a.request_id)
    assert kv.num_cached_pages == 2
    b = _ctx(np.concatenate([tokens, [5]]))
    kv.alloc(b)
    assert b.start_idx == 8
    kv.release(b.request_id)
    kv.reset_prefix_cache()
    assert kv.num_cached_pages == 0
    c = _ctx(np.concatenate([tokens, [5]]))
    kv.alloc(c)
    assert c.start_idx == 0


def test_without_prefix_caching_nothing_is_shared(rng):
    kv = _manager(16, prefix=False)
    prompt = rng.integers(0, 1000, 12)
    _prefill(kv, _ctx(prompt))
    b = _ctx(prompt)
    kv.alloc(b)
    assert b.start_idx == 0 and kv.num_cached_pages == 0


def test_page_pool_counts_references():
    pool = PagePool(3)
    names = page_names(np.arange(8), PS, 2)
    assert names[0] != names[1] and page_names(np.arange(8), PS, 2) == names
    a, b = pool.take(), pool.take()
    pool.name(a, names[0])
    pool.name(b, names[1])
    assert pool.match(names) == [a, b] and pool.refs(a) == 2
    pool.give_back(a)
    pool.give_back(a)
    assert pool.num_cached == 1 and pool.num_available == 2  # a is cached, the third page free
    with pytest.raises(RuntimeError):
        pool.give_back(a)
    assert pool.match(names[:1]) == [a] and pool.num_cached == 0
    # Equal names need equal prefixes: the second page after a different first page differs.
    assert page_names(np.r_[np.arange(1, 5), np.arange(4, 8)], PS, 2)[1] != names[1]


def test_a_failed_alloc_leaves_the_request_as_it_was(rng):
    kv = _manager(5)
    prompt = rng.integers(0, 1000, 9)  # two full pages, named once computed
    a = _ctx(prompt)
    _prefill(kv, a)
    kv.release(a.request_id)  # (its full pages stay cached)
    free = kv.free_pages
    b = _ctx(np.concatenate([prompt[:8], rng.integers(0, 1000, 20)]))  # would share 2 pages, needs 7
    with pytest.raises(KVCacheExhaustedError):
        kv.alloc(b)
    # not moved past the prefix it no longer shares, holding nothing, the shared pages cached again
    assert (b.start_idx, b.active_idx, b.end_idx) == (0, 28, 28)
    assert kv.get_req_blocks(b.request_id) == [] and kv.free_pages == free
    assert kv.get_metrics()["prefix_hit_tokens"] == 0
    # and the cached prefix is still there for a request that fits
    c = _ctx(np.concatenate([prompt[:8], rng.integers(0, 1000, 3)]))
    kv.alloc(c)
    assert c.start_idx == 8 and kv.get_metrics()["prefix_hit_tokens"] == 8


def test_runtime_inputs_for_more_steps_than_allocated_are_refused(rng):
    kv = _manager(16, prefix=False)
    ctx = _ctx(rng.integers(0, 1000, 6))
    kv.alloc(ctx, num_steps=1)  # 6 tokens: 2 pages of 4
    kv.get_runtime_inputs([[ctx]], num_steps=3)  # 8 positions: the 2 pages hold them
    with pytest.raises(RuntimeError, match="too few for 4 steps"):
        kv.get_runtime_inputs([[ctx]], num_steps=4)
    with pytest.raises(ValueError, match="num_steps"):
        kv.get_runtime_inputs([[ctx]], num_steps=0)


def test_documented_helpers_and_names():
    from max.kv_cache import KVCacheStrategy
    from max.kv_cache.registry import estimate_kv_cache_size, infer_optimal_batch_size

    params = KVCacheParams(DType.float32, n_kv_heads=2, head_dim=4, num_layers=3, page_size=PS)
    per_seq = estimate_kv_cache_size(params, 1, 64)
    assert infer_optimal_batch_size(params, 64, 5 * per_seq, [None]) == 5  # (devices, as documented)
    assert KVCacheStrategy.MODEL_DEFAULT.kernel_substring() == "model_default"
    assert KVCacheStrategy.PAGED.kernel_substring() == "paged"
