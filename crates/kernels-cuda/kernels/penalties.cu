#line 1 "penalties.cu"
// penalties.cu: apply_penalties (crates/graph/src/ops/sampling.rs defines it;
// crates/runtime/src/cpu/sampling is the reference; sampling_math.cuh's exact arithmetic).
//
// out = logits, then for every distinct token id of row b's history (tokens
// [offsets[b], offsets[b + 1])) the penalized logit. A [B, V] u32 scratch `counts` holds per
// (row, id) the times the id was generated (low 31 bits) and a flag for "in the prompt"
// (bit 31). Four steps, one block per row walking its history: the counts of the history's
// ids are cleared (only those: the scratch is never swept), counted with atomics, and taken
// back with atomicExch, so exactly one thread per (row, id) sees the count and writes the
// penalized logit. Ids outside [0, V) are skipped, offsets past the tokens are clamped and a
// prompt longer than its history is the whole history (the host kernel rejects all three).

struct PenaltyArgs {
    u64 logits, tokens, offsets, prompt_lengths, frequency, presence, repetition, out, counts;
    i64 batch, vocab, ntokens;
};

#define IN_PROMPT 0x80000000u

// Row b's history [s, e) of the tokens, clamped to them, and its prompt's length.
__device__ __forceinline__ void history(const PenaltyArgs& a, i64 b, i64& s, i64& e, i64& prompt) {
    const u32* off = (const u32*)a.offsets;
    s = min((i64)off[b], a.ntokens);
    e = max(min((i64)off[b + 1], a.ntokens), s);
    prompt = min((i64)((const u32*)a.prompt_lengths)[b], e - s);
}

// The count slot of the id at history position j, or null for an id outside the vocabulary.
__device__ __forceinline__ u32* slot(const PenaltyArgs& a, i64 b, i64 j) {
    const i64 t = ((const i64*)a.tokens)[j];
    return t >= 0 && t < a.vocab ? (u32*)a.counts + b * a.vocab + t : nullptr;
}

extern "C" __global__ void __launch_bounds__(256) penalties_clear(PenaltyArgs a) {
    for (i64 b = blockIdx.x; b < a.batch; b += gridDim.x) {
        i64 s, e, prompt;
        history(a, b, s, e, prompt);
        for (i64 j = s + threadIdx.x; j < e; j += blockDim.x)
            if (u32* c = slot(a, b, j)) *c = 0;
    }
}

extern "C" __global__ void __launch_bounds__(256) penalties_count(PenaltyArgs a) {
    for (i64 b = blockIdx.x; b < a.batch; b += gridDim.x) {
        i64 s, e, prompt;
        history(a, b, s, e, prompt);
        for (i64 j = s + threadIdx.x; j < e; j += blockDim.x) {
            if (u32* c = slot(a, b, j)) {
                if (j - s < prompt) atomicOr(c, IN_PROMPT);
                else atomicAdd(c, 1u);
            }
        }
    }
}

// out already holds the logits.
extern "C" __global__ void __launch_bounds__(256) penalties_apply(PenaltyArgs a) {
    for (i64 b = blockIdx.x; b < a.batch; b += gridDim.x) {
        i64 s, e, prompt;
        history(a, b, s, e, prompt);
        const float f = ((const float*)a.frequency)[b], p = ((const float*)a.presence)[b];
        const float r = ((const float*)a.repetition)[b];
        for (i64 j = s + threadIdx.x; j < e; j += blockDim.x) {
            u32* c = slot(a, b, j);
            if (!c) continue;
            const u32 n = atomicExch(c, 0u);
            if (n == 0) continue;  // another position of the same id took it
            const i64 at = c - (u32*)a.counts;
            const float x = ((const float*)a.logits)[at];
            float v = x > 0.f ? __fdiv_rn(x, r) : fmul(x, r);
            const u32 generated = n & ~IN_PROMPT;
            if (generated > 0) v = fsub(v, fadd(fmul(f, __uint2float_rn(generated)), p));
            ((float*)a.out)[at] = v;
        }
    }
}
