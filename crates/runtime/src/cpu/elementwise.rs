//! Elementwise ops on the host, one op or a fused group at a time, in one pass over memory:
//! the output is produced in chunks small enough to stay in cache; for each chunk every group
//! input is gathered (broadcasting by index math), every op of the group applied lane by lane,
//! and the result stored. Floats compute in f64, integers in 64 bits with wrapping, and each
//! op's result is rounded to its dtype with the cast rules.
//!
//! Groups of float32, bfloat16, float16 and bool values run on f32 lanes with the same bits
//! (single.rs); the others on lanes of f64, i64, u64 and bool (lanes.rs, math.rs), whose buffers
//! are reused from chunk to chunk and whose common dtypes load, round and store through direct
//! loops (lanes::fast). The float functions are vectorisable f64 code (vmath.rs).

mod math;
mod single;
mod vmath;

use max_graph::ops::{Op, OpKind};
use max_graph::{DType, Type};
use rayon::prelude::*;

use super::lanes::{self, Arg, Lane, fast, kind_of};
use crate::shared::{Fused, Operand};
use crate::{Buffer, Error, Result};

/// Elements per chunk: the lanes of a group (8 bytes an element) stay in the L1/L2 caches.
const CHUNK: usize = 1024;

/// Work (in element-op units, roughly a nanosecond each) worth handing to another thread.
const TASK_WORK: usize = 1 << 16;

/// The same for single.rs, in units of a float32 add (a fraction of a nanosecond).
const SINGLE_TASK_WORK: usize = 1 << 17;

fn dtype_of(op: &Op, ty: &Type) -> Result<DType> {
    ty.tensor().map(|t| t.dtype).ok_or_else(|| Error::Value(format!("{}: result is not a tensor", op.kind.name())))
}

/// Whether a result of `d` that is already of `d`'s lane kind is kept as computed: these
/// dtypes are their lane's own width.
fn kept_raw(kind: lanes::LaneKind, d: DType) -> bool {
    kind == kind_of(d) && matches!(d, DType::Float64 | DType::Int64 | DType::UInt64 | DType::Bool)
}

/// Rounds a result lane to `d` in place (`tmp` is scratch for a change of lane kind).
fn settle(v: &mut Lane, d: DType, tmp: &mut Lane) -> Result<()> {
    if kept_raw(v.kind(), d) || fast::round(d, v) {
        return Ok(());
    }
    if fast::convert(d, v.arg(v.len()), tmp) {
        std::mem::swap(v, tmp);
    } else {
        *v = v.convert(d)?;
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// One element for every output element.
    Constant,
    /// Output element i is input element i.
    Contiguous,
    /// Anything else: walked along `Reader::dims`.
    Strided,
}

/// How one group input is read for a chunk of the output.
struct Reader {
    dtype: DType,
    ptr: *const u8,
    /// Element strides per output axis (0 where the input broadcasts).
    strides: Vec<isize>,
    /// The output axes of extent > 1 as (extent, stride) for this input, outermost first, with
    /// neighbours this input steps through evenly merged into one.
    dims: Vec<(usize, isize)>,
    access: Access,
    /// The dtype has direct loops and the memory is aligned for them.
    fast: bool,
    /// Elements of the buffer.
    count: usize,
}

// SAFETY: readers only read host memory that outlives the kernel call.
unsafe impl Sync for Reader {}

impl Reader {
    fn new(buf: &Buffer, out_shape: &[usize]) -> Result<Reader> {
        let rank = out_shape.len();
        let shape = buf.shape();
        if shape.len() > rank {
            return Err(Error::Value("elementwise input has a higher rank than the output".into()));
        }
        let pad = rank - shape.len();
        let mut strides = vec![0isize; rank];
        for (i, (&d, &s)) in shape.iter().zip(buf.strides()).enumerate() {
            if d != 1 {
                if d != out_shape[pad + i] {
                    return Err(Error::Value(format!(
                        "elementwise input shape {shape:?} does not broadcast to {out_shape:?}"
                    )));
                }
                strides[pad + i] = s;
            }
        }
        let mut dims: Vec<(usize, isize)> = Vec::new();
        for (&e, &s) in out_shape.iter().zip(&strides) {
            if e == 1 {
                continue;
            }
            match dims.last_mut() {
                Some(outer) if outer.1 == s * e as isize => *outer = (outer.0 * e, s),
                _ => dims.push((e, s)),
            }
        }
        let access = match dims.as_slice() {
            [] | [(_, 0)] => Access::Constant,
            [(_, 1)] => Access::Contiguous,
            _ => Access::Strided,
        };
        let dtype = buf.dtype();
        let ptr = buf.addr() as *const u8;
        Ok(Reader {
            dtype,
            ptr,
            strides,
            dims,
            access,
            fast: fast::is_fast(dtype) && (ptr as usize).is_multiple_of(dtype.size_in_bytes()),
            count: buf.num_elements(),
        })
    }

    /// Element offsets of output elements `start..start + len` (the path through `Canon`).
    fn offsets(&self, out_shape: &[usize], start: usize, len: usize) -> Vec<isize> {
        let rank = out_shape.len();
        let mut idx = vec![0usize; rank];
        let mut rest = start;
        for d in (0..rank).rev() {
            idx[d] = rest % out_shape[d].max(1);
            rest /= out_shape[d].max(1);
        }
        let mut off: isize = idx.iter().zip(&self.strides).map(|(i, s)| *i as isize * s).sum();
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(off);
            for d in (0..rank).rev() {
                idx[d] += 1;
                off += self.strides[d];
                if idx[d] < out_shape[d] {
                    break;
                }
                off -= self.strides[d] * out_shape[d] as isize;
                idx[d] = 0;
            }
        }
        out
    }

    /// Loads output elements `start..start + len` into `lane`. A constant input keeps what it
    /// loaded: it is filled once, to a whole chunk.
    fn read(&self, out_shape: &[usize], start: usize, len: usize, lane: &mut Lane) -> Result<()> {
        if self.access == Access::Constant {
            if lane.len() >= len && lane.kind() == kind_of(self.dtype) {
                return Ok(());
            }
            let fill = len.max(CHUNK);
            if !self.fast {
                *lane = lanes::load(self.dtype, self.ptr, &vec![0; fill])?;
                return Ok(());
            }
            lane.reset(kind_of(self.dtype));
            // SAFETY: element 0 is inside the buffer and the pointer is aligned (`fast`).
            unsafe { fast::load_run(self.dtype, self.ptr, 0, 0, fill, lane) };
            return Ok(());
        }
        if !self.fast {
            *lane = lanes::load(self.dtype, self.ptr, &self.offsets(out_shape, start, len))?;
            return Ok(());
        }
        lane.reset(kind_of(self.dtype));
        for (off, stride, run) in self.runs(start, len) {
            // SAFETY: the run addresses elements of the buffer (see `runs`).
            unsafe { fast::load_run(self.dtype, self.ptr, off, stride, run, lane) }
        }
        Ok(())
    }

    /// The runs of elements, as (offset, stride, count) in elements, this input holds for
    /// output elements `start..start + len`, in order; every element a run addresses is inside
    /// the buffer when `start + len` is at most the output's size.
    fn runs(&self, start: usize, len: usize) -> Runs<'_> {
        let dims: &[(usize, isize)] = match self.access {
            Access::Constant => &[],
            Access::Contiguous => return Runs { dims: &[], idx: Vec::new(), off: start as isize, left: len, flat: 1 },
            Access::Strided => &self.dims,
        };
        let mut idx = vec![0usize; dims.len()];
        let mut rest = start;
        for d in (0..dims.len()).rev() {
            idx[d] = rest % dims[d].0;
            rest /= dims[d].0;
        }
        let off = idx.iter().zip(dims).map(|(&i, &(_, s))| i as isize * s).sum();
        Runs { dims, idx, off, left: len, flat: 0 }
    }
}

/// See `Reader::runs`.
struct Runs<'a> {
    dims: &'a [(usize, isize)],
    idx: Vec<usize>,
    off: isize,
    left: usize,
    /// The stride of the one run when there are no dims (1 contiguous, 0 constant).
    flat: isize,
}

impl Iterator for Runs<'_> {
    type Item = (isize, isize, usize);

    #[inline(always)]
    fn next(&mut self) -> Option<(isize, isize, usize)> {
        if self.left == 0 {
            return None;
        }
        let dims = self.dims;
        let Some(inner) = dims.len().checked_sub(1) else {
            return Some((self.off, self.flat, std::mem::take(&mut self.left)));
        };
        let idx = &mut self.idx;
        let run = (dims[inner].0 - idx[inner]).min(self.left);
        let item = (self.off, dims[inner].1, run);
        self.left -= run;
        idx[inner] += run;
        self.off += run as isize * dims[inner].1;
        let mut d = inner;
        while d > 0 && idx[d] == dims[d].0 {
            self.off -= dims[d].0 as isize * dims[d].1;
            idx[d] = 0;
            d -= 1;
            idx[d] += 1;
            self.off += dims[d].1;
        }
        Some(item)
    }
}

/// Rough cost of one element of an op, relative to an add.
fn cost(kind: OpKind) -> usize {
    use OpKind::*;
    match kind {
        Exp | Log | Log1p | Sin | Cos | Tanh | Acos | Atanh | Erf | Sigmoid | Silu | Gelu | Pow | Mod => 16,
        _ => 1,
    }
}

/// A group checked against its buffers, ready to evaluate any range of the output.
struct Plan<'a> {
    nodes: &'a [(Op, Vec<Operand>, Type)],
    dtypes: Vec<DType>,
    readers: Vec<Reader>,
    out_shape: Vec<usize>,
    out_dtype: DType,
    out_ptr: usize,
    out_fast: bool,
}

/// Per-thread lanes, reused from chunk to chunk.
struct Scratch {
    inputs: Vec<Lane>,
    values: Vec<Lane>,
    tmp: Lane,
}

impl<'a> Plan<'a> {
    fn new(group: &'a Fused, readers: Vec<Reader>, out: &Buffer) -> Result<Plan<'a>> {
        let out_shape = out.shape().to_vec();
        if group.nodes.is_empty() {
            return Err(Error::Value("empty fused group".into()));
        }
        let mut dtypes = Vec::with_capacity(group.nodes.len());
        for (j, (op, operands, ty)) in group.nodes.iter().enumerate() {
            dtypes.push(dtype_of(op, ty)?);
            let valid = |o: &Operand| match o {
                Operand::Input(i) => *i < readers.len(),
                Operand::Node(k) => *k < j,
            };
            if operands.len() > 3 || !operands.iter().all(valid) {
                return Err(Error::Value(format!("{}: malformed fused group", op.kind.name())));
            }
        }
        let out_dtype = out.dtype();
        Ok(Plan {
            nodes: &group.nodes,
            dtypes,
            readers,
            out_shape,
            out_dtype,
            out_ptr: out.addr() as usize,
            out_fast: fast::is_fast(out_dtype) && (out.addr() as usize).is_multiple_of(out_dtype.size_in_bytes()),
        })
    }

    fn scratch(&self) -> Scratch {
        let empty = || Lane::F(Vec::with_capacity(CHUNK));
        Scratch {
            inputs: self.readers.iter().map(|_| empty()).collect(),
            values: self.nodes.iter().map(|_| empty()).collect(),
            tmp: Lane::F(Vec::new()),
        }
    }

    /// Work per output element, in units of TASK_WORK.
    fn cost(&self) -> usize {
        2 + self.readers.len() + self.nodes.iter().map(|(op, _, _)| cost(op.kind)).sum::<usize>()
    }

    fn chunk(&self, s: &mut Scratch, start: usize, len: usize) -> Result<()> {
        for (r, lane) in self.readers.iter().zip(&mut s.inputs) {
            r.read(&self.out_shape, start, len, lane)?;
        }
        let last = self.nodes.len() - 1;
        for (j, (op, operands, _)) in self.nodes.iter().enumerate() {
            let (done, rest) = s.values.split_at_mut(j);
            let mut args = [Arg::B(&[]); 3];
            for (a, o) in args.iter_mut().zip(operands) {
                *a = match o {
                    Operand::Input(i) => s.inputs[*i].arg(len),
                    Operand::Node(k) => done[*k].arg(len),
                };
            }
            math::eval(op, &args[..operands.len()], &mut rest[0])?;
            // The last result is rounded by the store, which applies the same rules.
            if j < last {
                settle(&mut rest[0], self.dtypes[j], &mut s.tmp)?;
            }
        }
        let result = s.values[last].arg(len);
        if result.len() != len {
            return Err(Error::Value("fused group result has the wrong length".into()));
        }
        // SAFETY: the output is contiguous with the output shape, aligned when `out_fast`, and
        // each chunk is written by one task only.
        if self.out_fast && unsafe { fast::store(self.out_dtype, result, self.out_ptr as *mut u8, start) } {
            return Ok(());
        }
        lanes::store(self.out_dtype, result, self.out_ptr as *mut u8, start)
    }

    fn range(&self, lo: usize, hi: usize) -> Result<()> {
        let mut s = self.scratch();
        for start in (lo..hi).step_by(CHUNK) {
            self.chunk(&mut s, start, CHUNK.min(hi - start))?;
        }
        Ok(())
    }
}

/// Output elements per task: enough work (`per_elem` of `task_work` per element) to be worth a
/// thread, and enough tasks to balance the threads; a multiple of `chunk`.
fn grain(n: usize, per_elem: usize, task_work: usize, chunk: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let grain = (task_work / per_elem.max(1)).max(n.div_ceil(threads * 4));
    grain.div_ceil(chunk) * chunk
}

/// Runs `f` over `0..n` in ranges of `grain`, on the rayon pool when there is more than one.
fn for_ranges(n: usize, grain: usize, f: impl Fn(usize, usize) -> Result<()> + Sync) -> Result<()> {
    if n <= grain {
        return f(0, n);
    }
    (0..n.div_ceil(grain)).into_par_iter().try_for_each(|t| f(t * grain, n.min((t + 1) * grain)))
}

/// Runs a fused group (or a single op wrapped as one) over host buffers; `out` is contiguous.
pub fn run(group: &Fused, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let out_shape = out.shape();
    let readers: Vec<Reader> = inputs.iter().map(|b| Reader::new(b, out_shape)).collect::<Result<_>>()?;
    let n = out.num_elements();
    if let Some(plan) = single::Single::new(group, &readers, out) {
        return for_ranges(n, grain(n, plan.cost(), SINGLE_TASK_WORK, single::CHUNK), |lo, hi| plan.range(lo, hi));
    }
    let plan = Plan::new(group, readers, out)?;
    for_ranges(n, grain(n, plan.cost(), TASK_WORK, CHUNK), |lo, hi| plan.range(lo, hi))
}

/// `run` without single.rs, for its tests.
#[cfg(test)]
fn run_generic(group: &Fused, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let readers: Vec<Reader> = inputs.iter().map(|b| Reader::new(b, out.shape())).collect::<Result<_>>()?;
    let plan = Plan::new(group, readers, out)?;
    for_ranges(out.num_elements(), grain(out.num_elements(), plan.cost(), TASK_WORK, CHUNK), |lo, hi| {
        plan.range(lo, hi)
    })
}
