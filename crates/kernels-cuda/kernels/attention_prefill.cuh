#line 1 "attention_prefill.cuh"
// attention_prefill.cuh: what the two prefill kernels share (attention_prefill.cu, mma.sync;
// attention_prefill_sm90.cu, wgmma): the slot-to-sequence lookup of a CTA's query tile, the
// masks' key ranges, the page-table lookup of a key row and the final O / l store. sources.rs
// puts it after attention_args.cuh (and sm90_pipe.cuh) in front of both. The rules they follow
// (slots, rows, masks, out-of-range indices) are described at the top of attention_prefill.cu.

#define PF_LOG2E 1.4426950408889634f
#define PF_NEG_INF (-__int_as_float(0x7f800000))

// Two f32 as one register of the 16-bit type, lo in the low half (the lower column or k index).
template <bool BF16> __device__ __forceinline__ u32 pf_pack(float lo, float hi) {
    u32 r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float pf_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The visible keys [lo, hi) of a query at pos in a sequence of total keys (Mask::range).
__device__ __forceinline__ void pf_range(const AttnArgs& a, i64 pos, i64 total, i64& lo, i64& hi) {
    lo = 0;
    hi = pos + 1 < total ? pos + 1 : total;
    if (a.mask == 1) lo = pos + 1 - a.window > 0 ? pos + 1 - a.window : 0;
    if (a.mask == 2) hi = total;
}

// A CTA's tile of query rows: the query head and the sequence, the tile's rows in it, the
// sequence's keys and the position of the tile's first row.
struct PfTile {
    i64 h, b;
    i64 r0;     // first query row of the tile
    i64 rows;   // rows of the tile in the sequence, 1..ROWS
    i64 total;  // keys of the sequence (cached + its query rows)
    i64 pos0;   // position of the tile's first row
};

// The tile of this CTA (blockIdx.x: slot-major, head-minor, slots handed out last first) for
// tiles of ROWS rows and `slots` slots per head; false where the slot is past its sequence's
// rows (uniform per CTA: the CTA exits).
template <int ROWS> __device__ __forceinline__ bool pf_tile(const AttnArgs& a, i64 slots, PfTile& t) {
    t.h = blockIdx.x % a.q_heads;
    const i64 slot = slots - 1 - (i64)(blockIdx.x / a.q_heads);
    if (slot < 0) return false;

    // The sequence of this slot: the last b with offsets[b] / ROWS + b <= slot.
    const u32* offsets = (const u32*)a.offsets;
    i64 lo_b = 0, hi_b = a.batch - 1;
    while (lo_b < hi_b) {
        const i64 mid = (lo_b + hi_b + 1) / 2;
        if ((i64)(offsets[mid] / ROWS) + mid <= slot) lo_b = mid; else hi_b = mid - 1;
    }
    const i64 b = lo_b;
    const i64 first = offsets[b], local = slot - (first / ROWS + b);
    i64 end = offsets[b + 1];
    if (end > a.tokens) end = a.tokens;
    const i64 r0 = first + local * ROWS;
    if (local < 0 || r0 >= end) return false;
    const i64 q_len = end - first;
    const i64 cached = ((const u32*)a.lengths)[b];
    t.b = b;
    t.r0 = r0;
    t.rows = end - r0 < ROWS ? end - r0 : ROWS;
    t.total = cached + q_len;
    t.pos0 = cached + (r0 - first);
    return true;
}

// The keys of a tile: [lo, end) those any row sees, clamped to the keys the table's columns
// reach (keys past them have no page; key positions are u32, as the engine's are), and
// [lo_max, hi_min) those every row sees (tiles inside need no mask).
struct PfKeys {
    u32 lo, end;
    i64 lo_max, hi_min;
};
__device__ __forceinline__ PfKeys pf_keys(const AttnArgs& a, const PfTile& t) {
    i64 lo_min, hi_min, lo_max, hi_max;
    pf_range(a, t.pos0, t.total, lo_min, hi_min);
    pf_range(a, t.pos0 + t.rows - 1, t.total, lo_max, hi_max);
    i64 k_last = a.width * a.page_size;
    if (k_last > 0xffffffffll) k_last = 0xffffffffll;
    PfKeys k;
    k.lo = (u32)(lo_min < k_last ? lo_min : k_last);
    k.end = (u32)(hi_max < k_last ? hi_max : k_last);
    k.lo_max = lo_max;
    k.hi_min = hi_min;
    return k;
}

// The keys [lo, hi) of a query at pos, clamped to the keys loaded (k_end; the rest are masked
// anyway).
__device__ __forceinline__ void pf_row_keys(const AttnArgs& a, i64 pos, i64 total, u32 k_end, u32& lo, u32& hi) {
    i64 l, h;
    pf_range(a, pos, total, l, h);
    lo = (u32)(l < (i64)k_end ? l : (i64)k_end);
    hi = (u32)(h < (i64)k_end ? h : (i64)k_end);
}

// Whether a row with keys [lo, hi) must not see key `key` (`valid`: the key has a page).
__device__ __forceinline__ bool pf_hidden(bool valid, u32 key, u32 lo, u32 hi) {
    return !valid || key < lo || key >= hi;
}

// One KV head's keys of a sequence in the paged cache [pages, 2, layers, page_size, kv_heads,
// D]: a key row is contiguous, consecutive keys are not.
struct PfKv {
    const u32* table;  // the sequence's row of the page table
    u64 row_elems, page_stride, layer_off, value_off;
    u64 pages;
    u32 ps;
};
template <int D> __device__ __forceinline__ PfKv pf_kv(const AttnArgs& a, const PfTile& t) {
    PfKv kv;
    kv.ps = (u32)a.page_size;
    const i64 kvh = t.h / (a.q_heads / a.kv_heads);
    kv.row_elems = (u64)a.kv_heads * D;
    const u64 page_elems = (u64)a.page_size * kv.row_elems;  // one layer's keys of a page
    kv.page_stride = 2 * (u64)a.layers * page_elems;
    kv.layer_off = (u64)a.layer * page_elems + (u64)kvh * D;
    kv.value_off = (u64)a.layers * page_elems;  // keys -> values of a page
    kv.table = (const u32*)a.table + t.b * a.width;
    kv.pages = (u64)a.pages;
    return kv;
}

// The element offset (plus `extra`) of key j's row in the cache, 0 and false where it has no
// page: j at or past k_end, j below the tile's first key k0 (no wrap past 2^32), or a page id
// past the cache.
__device__ __forceinline__ bool pf_key_at(const PfKv& kv, u32 j, u32 k0, u32 k_end, u64 extra, u64& at) {
    bool ok = j < k_end && j >= k0;
    at = 0;
    if (ok) {
        const u32 page = kv.table[j / kv.ps];
        ok = page < kv.pages;
        at = page * kv.page_stride + kv.layer_off + (u64)(j % kv.ps) * kv.row_elems + extra;
    }
    return ok;
}

// O / l of this thread's rows row and row + 8 of the tile (those below `rows`), each row's sum
// gathered from its quad: o[4j + 2hr + e] is row + 8hr, column 8j + 2tig + e (the m16n8 and
// m64nD accumulator layouts), l the rows' partial sums.
// F32: f32 values (the `_f32` kernels of attention_prefill.cu).
template <int D, bool BF16, bool F32 = false>
__device__ __forceinline__ void pf_store(const AttnArgs& a, const PfTile& t, const float* o, const float* l, i64 row,
                                         int tig) {
    u16* out = (u16*)a.out;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float sum = l[hr];
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        sum += __shfl_xor_sync(FULL_MASK, sum, 2);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const i64 r = row + 8 * hr;
        if (r >= t.rows) continue;
        const u64 at = ((u64)(t.r0 + r) * a.q_heads + t.h) * D + 2 * tig;
        if constexpr (F32) {
            float* dst = (float*)a.out + at;
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                dst[j * 8] = o[4 * j + 2 * hr] * inv;
                dst[j * 8 + 1] = o[4 * j + 2 * hr + 1] * inv;
            }
            continue;
        }
        u32* dst = (u32*)(out + at);
#pragma unroll
        for (int j = 0; j < D / 8; ++j) dst[j * 4] = pf_pack<BF16>(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
    }
}
