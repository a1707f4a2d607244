//! The persistent streaming GEMV (kernels/qgemv_stream.cu, a child of quant.rs): its shared
//! memory layout, grid and launch under PDL, with a folded RMSNorm where K is one chunk.

use super::*;

/// The streaming kernel's stages and weight rows per block for `mr` (Qs in qgemv_stream.cu).
fn layout(mr: usize) -> (usize, usize) {
    match mr {
        1 | 2 => (3, 32),
        4 => (3, 16),
        _ => (2, 16),
    }
}

/// Bytes of a weight row's slot in a stage: a chunk of the row (the whole row where K is one
/// chunk) plus room for its offset from 16 bytes and the word reads past its end.
fn slot_bytes(enc: Encoding, row_bytes: usize) -> usize {
    let (elems, bytes) = enc.block();
    ((QV_CHUNK / elems * bytes).min(row_bytes) + 32).next_multiple_of(16)
}

/// `lhs` [m, k] (m <= 8, `dtype`) times the weights `w` (n rows of `row_bytes`, whole 4-byte
/// words; w and lhs 16-byte aligned) into `out` [m, n], plus `res` unless 0, on qgemv_stream.cu;
/// `norm` (gamma 0: none) normalises the lhs first, only where K is at most one chunk (1024);
/// `consts`: no kernel of the program writes `w` (QFold::consts).
pub(super) fn qgemv_stream(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out, res): (u64, u64, u64, u64),
    (m, n, k, row_bytes): (usize, usize, usize, usize),
    (norm, consts): (QNorm, bool),
    tuning: &max_tuning::Tuning,
) -> Result<bool> {
    if norm.gamma != 0 && (k > QV_CHUNK || !norm.gamma.is_multiple_of(16)) {
        return Err(Error::Unsupported(format!(
            "qgemv_stream: a folded norm over K = {k} (at most {QV_CHUNK}, its weight on 16 bytes)"
        )));
    }
    let bad = !(lhs | w).is_multiple_of(16) || !row_bytes.is_multiple_of(4) || !k.is_multiple_of(32);
    // (rows in i32 with a group of 32 to spare: the kernel counts groups of rows in int)
    if bad || n > i32::MAX as usize - 64 || k > i32::MAX as usize || m > GEMV_MAX_ROWS {
        return Err(Error::Unsupported(format!("qgemv_stream: {m} x {n} x {k} of {row_bytes}-byte rows")));
    }
    let mr = rows_variant(m);
    let family = sources::qgemv(&suffix(enc), act_suffix(dtype)?)?;
    let name = format!("qgemv_s_{}_m{mr}{}", suffix(enc), act_suffix(dtype)?);
    let f = function(stream.context(), family, &name)?;
    let (stages, rows_per_block) = layout(mr);
    let slot = slot_bytes(enc, row_bytes);
    let lhs_bytes = mr * 32 * lhs_ld(dtype) * dtype.size_in_bytes();
    // stages of [lhs chunk, weight slots] and their mbarriers; K of one chunk: one lhs in front
    let smem = if k <= QV_CHUNK {
        lhs_bytes + stages * (rows_per_block * slot + 8)
    } else {
        stages * (lhs_bytes + rows_per_block * slot + 8)
    } as u32;
    crate::allow_smem(stream.context(), &f, smem)?;
    // qgemv.grid=n caps the grid (tests: several row groups per block).
    let cap = tuning.int(max_tuning::Knob::QgemvGrid).unwrap_or(usize::MAX);
    let blocks = n.div_ceil(rows_per_block).min(resident_blocks(stream, &f, &name, smem)?).min(cap).max(1);
    let (mut lhs, mut w, mut out, mut res, mut norm) = (lhs, w, out, res, norm);
    let (mut ms, mut ns, mut ks, mut rb, mut magic, mut sl) =
        (m as i32, n as i32, k as i32, row_bytes as i64, MAGIC, slot as i32);
    // The kernel waits (griddepcontrol.wait) before it reads the lhs or stores; only its first
    // stages of constant weights where K is one chunk (`qgemv.early_weights`), or L2 prefetches
    // of them, come before.
    let pdl = super::super::pdl::Pdl::with(tuning, family, &name, Some(max_tuning::Knob::QgemvPdl));
    let early = pdl.on() && consts && k <= QV_CHUNK && tuning.flag_or(max_tuning::Knob::QgemvEarlyWeights, true);
    let mut early_arg = early as i32;
    let mut params: [*mut std::ffi::c_void; 12] = [
        &mut lhs as *mut u64 as *mut _,
        &mut w as *mut u64 as *mut _,
        &mut out as *mut u64 as *mut _,
        &mut ms as *mut i32 as *mut _,
        &mut ns as *mut i32 as *mut _,
        &mut ks as *mut i32 as *mut _,
        &mut rb as *mut i64 as *mut _,
        &mut magic as *mut u32 as *mut _,
        &mut res as *mut u64 as *mut _,
        &mut norm as *mut QNorm as *mut _,
        &mut sl as *mut i32 as *mut _,
        &mut early_arg as *mut i32 as *mut _,
    ];
    let dims = (blocks as u32, 256, smem);
    // SAFETY: the parameters match qgemv_s's (lhs, w, out, m, n, k, row_bytes, magic, res,
    // QNorm, slot, early) by value and live across the call; lhs holds m x k of dtype, w n rows of
    // row_bytes (k elements), out (and res) m x n of dtype; the shared memory is the layout's.
    unsafe { super::super::launch_ex(stream, &f, dims, &mut params, pdl, "cuLaunchKernelEx(qgemv_s)") }?;
    super::super::record::record("qgemv", || {
        let fields = vec![
            ("mma", 0),
            ("streaming", 1),
            ("blocks", blocks as i64),
            ("segments", 1),
            ("norm", (norm.gamma != 0) as i64),
            ("pdl", pdl.on() as i64),
            ("early", early as i64),
        ];
        (name.clone(), fields)
    });
    Ok(pdl.on())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hold_a_chunk_or_a_short_row_with_its_offset() {
        // SmolLM2's Q8_0 vocabulary projection (K = 576): 612-byte rows in 656-byte slots
        assert_eq!(slot_bytes(Encoding::Q8_0, 612), 656);
        // K = 4096: a 1024-element chunk (1088 bytes of Q8_0) a stage
        assert_eq!(slot_bytes(Encoding::Q8_0, 4352), 1120);
        assert_eq!(slot_bytes(Encoding::Q4_1, 360), 400);
        assert_eq!(layout(1), (3, 32));
        assert_eq!(layout(8), (2, 16));
    }
}
