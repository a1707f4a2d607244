// The arguments of every paged_attention kernel (attention.cu, attention_decode.cu,
// attention_decode_mma.cu, attention_prefill.cu); launch/attention.rs builds its #[repr(C)] twin
// once per call.

#define FULL_MASK 0xffffffffu
#define NEG_INF (-__int_as_float(0x7f800000))

struct AttnArgs {
    u64 q, blocks, offsets, lengths, table, out;
    i64 tokens, batch, width, q_heads, kv_heads, dim, page_size, layers, pages, layer, window;
    float scale, softcap;
    i32 mask;  // 0 causal, 1 sliding window, 2 none
    i32 pad;
};
