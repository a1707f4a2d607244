//! Lanes: a chunk of elements in the widest form of their kind (f64 for every float type, i64
//! for signed, u64 for unsigned integers, bool), the working format of the elementwise kernels.
//! Loading converts from the storage dtype exactly; storing converts with the cast rules.
//!
//! The functions here go through `Canon` one element at a time and handle every dtype cast
//! handles: they define the results. `fast` has direct loops for the common dtypes that give
//! the same bits (lanes/tests.rs compares the two).

pub mod fast;

use max_graph::DType;

use crate::cpu::cast::{Canon, Elem};
use crate::{Error, Result, with_cast_type};

#[derive(Clone, Debug, PartialEq)]
pub enum Lane {
    F(Vec<f64>),
    I(Vec<i64>),
    U(Vec<u64>),
    B(Vec<bool>),
}

/// A borrowed run of lane values (a lane, or the first elements of one).
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    F(&'a [f64]),
    I(&'a [i64]),
    U(&'a [u64]),
    B(&'a [bool]),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneKind {
    F,
    I,
    U,
    B,
}

pub fn kind_of(d: DType) -> LaneKind {
    if d == DType::Bool {
        LaneKind::B
    } else if d.is_float() {
        LaneKind::F
    } else if d.is_signed_integral() {
        LaneKind::I
    } else {
        LaneKind::U
    }
}

impl Lane {
    pub fn len(&self) -> usize {
        match self {
            Lane::F(v) => v.len(),
            Lane::I(v) => v.len(),
            Lane::U(v) => v.len(),
            Lane::B(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn kind(&self) -> LaneKind {
        match self {
            Lane::F(_) => LaneKind::F,
            Lane::I(_) => LaneKind::I,
            Lane::U(_) => LaneKind::U,
            Lane::B(_) => LaneKind::B,
        }
    }

    /// The first `len` values (all of them when the lane is shorter).
    pub fn arg(&self, len: usize) -> Arg<'_> {
        match self {
            Lane::F(v) => Arg::F(&v[..len.min(v.len())]),
            Lane::I(v) => Arg::I(&v[..len.min(v.len())]),
            Lane::U(v) => Arg::U(&v[..len.min(v.len())]),
            Lane::B(v) => Arg::B(&v[..len.min(v.len())]),
        }
    }

    /// Empties the lane and makes it of `kind`, keeping its allocation when the kind matches.
    pub fn reset(&mut self, kind: LaneKind) {
        match (self.kind() == kind, &mut *self) {
            (true, Lane::F(v)) => v.clear(),
            (true, Lane::I(v)) => v.clear(),
            (true, Lane::U(v)) => v.clear(),
            (true, Lane::B(v)) => v.clear(),
            (false, _) => *self = Lane::empty(kind),
        }
    }

    pub fn empty(kind: LaneKind) -> Lane {
        match kind {
            LaneKind::F => Lane::F(Vec::new()),
            LaneKind::I => Lane::I(Vec::new()),
            LaneKind::U => Lane::U(Vec::new()),
            LaneKind::B => Lane::B(Vec::new()),
        }
    }

    /// The lane's values converted (with the cast rules) to the lane kind of `to`, then rounded
    /// through `to` so they are exactly what storing as `to` would keep.
    pub fn convert(&self, to: DType) -> Result<Lane> {
        self.arg(self.len()).convert(to)
    }
}

impl Arg<'_> {
    pub fn len(&self) -> usize {
        match self {
            Arg::F(v) => v.len(),
            Arg::I(v) => v.len(),
            Arg::U(v) => v.len(),
            Arg::B(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn kind(&self) -> LaneKind {
        match self {
            Arg::F(_) => LaneKind::F,
            Arg::I(_) => LaneKind::I,
            Arg::U(_) => LaneKind::U,
            Arg::B(_) => LaneKind::B,
        }
    }

    fn canon(&self, i: usize) -> Canon {
        match self {
            Arg::F(v) => Canon::F(v[i]),
            Arg::I(v) => Canon::I(v[i]),
            Arg::U(v) => Canon::U(v[i]),
            Arg::B(v) => Canon::U(v[i] as u64),
        }
    }

    /// See `Lane::convert`.
    pub fn convert(&self, to: DType) -> Result<Lane> {
        let n = self.len();
        with_cast_type!(
            to,
            T,
            Ok(from_canons(kind_of(to), (0..n).map(|i| T::from_canon(self.canon(i)).canon()))),
            Err(unsupported(to))
        )
    }
}

fn unsupported(d: DType) -> Error {
    Error::Value(format!("elementwise ops do not support {d}"))
}

fn from_canons(kind: LaneKind, vals: impl Iterator<Item = Canon>) -> Lane {
    match kind {
        LaneKind::F => Lane::F(vals.map(|c| if let Canon::F(f) = c { f } else { 0.0 }).collect()),
        LaneKind::I => Lane::I(vals.map(|c| if let Canon::I(v) = c { v } else { 0 }).collect()),
        LaneKind::U => Lane::U(vals.map(|c| if let Canon::U(v) = c { v } else { 0 }).collect()),
        LaneKind::B => Lane::B(vals.map(|c| matches!(c, Canon::U(v) if v != 0)).collect()),
    }
}

fn load_typed<T: Elem>(ptr: *const u8, offsets: &[isize]) -> Vec<Canon> {
    // SAFETY: every offset addresses an element inside the operand's buffer (checked by the
    // caller against the buffer's shape).
    offsets.iter().map(|&o| unsafe { std::ptr::read_unaligned(ptr.cast::<T>().offset(o)) }.canon()).collect()
}

/// Reads the elements at `offsets` (in elements from `ptr`) of dtype `d` into a lane.
pub fn load(d: DType, ptr: *const u8, offsets: &[isize]) -> Result<Lane> {
    let vals = with_cast_type!(d, T, load_typed::<T>(ptr, offsets), return Err(unsupported(d)));
    Ok(from_canons(kind_of(d), vals.into_iter()))
}

fn store_typed<T: Elem>(arg: Arg, ptr: *mut u8, start: usize) {
    for i in 0..arg.len() {
        // SAFETY: the output buffer holds at least start + arg.len() elements of T.
        unsafe { std::ptr::write_unaligned(ptr.cast::<T>().add(start + i), T::from_canon(arg.canon(i))) };
    }
}

/// Writes the values as dtype `d` into contiguous elements `start..start + len` at `ptr`.
pub fn store(d: DType, arg: Arg, ptr: *mut u8, start: usize) -> Result<()> {
    with_cast_type!(
        d,
        T,
        {
            store_typed::<T>(arg, ptr, start);
            Ok(())
        },
        Err(unsupported(d))
    )
}

#[cfg(test)]
mod tests;
