//! Lanes: a chunk of elements in the widest form of their kind (f64 for every float type, i64
//! for signed, u64 for unsigned integers, bool), the working format of the elementwise kernels.
//! Loading converts from the storage dtype exactly; storing converts with the cast rules.

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

    fn canon(&self, i: usize) -> Canon {
        match self {
            Lane::F(v) => Canon::F(v[i]),
            Lane::I(v) => Canon::I(v[i]),
            Lane::U(v) => Canon::U(v[i]),
            Lane::B(v) => Canon::U(v[i] as u64),
        }
    }

    /// This lane converted (with the cast rules) to the lane kind of `to`, then rounded
    /// through `to` so the values are exactly what storing as `to` would keep.
    pub fn convert(&self, to: DType) -> Result<Lane> {
        let n = self.len();
        with_cast_type!(
            to,
            T,
            {
                let vals: Vec<Canon> = (0..n).map(|i| T::from_canon(self.canon(i)).canon()).collect();
                Ok(match kind_of(to) {
                    LaneKind::F => Lane::F(vals.iter().map(|c| if let Canon::F(f) = c { *f } else { 0.0 }).collect()),
                    LaneKind::I => Lane::I(vals.iter().map(|c| if let Canon::I(v) = c { *v } else { 0 }).collect()),
                    LaneKind::U => Lane::U(vals.iter().map(|c| if let Canon::U(v) = c { *v } else { 0 }).collect()),
                    LaneKind::B => Lane::B(vals.iter().map(|c| matches!(c, Canon::U(v) if *v != 0)).collect()),
                })
            },
            Err(Error::Value(format!("elementwise ops do not support {to}")))
        )
    }
}

fn load_typed<T: Elem>(ptr: *const u8, offsets: &[isize]) -> Vec<Canon> {
    // SAFETY: every offset addresses an element inside the operand's buffer (checked by the
    // caller against the buffer's shape).
    offsets.iter().map(|&o| unsafe { std::ptr::read_unaligned(ptr.cast::<T>().offset(o)) }.canon()).collect()
}

/// Reads the elements at `offsets` (in elements from `ptr`) of dtype `d` into a lane.
pub fn load(d: DType, ptr: *const u8, offsets: &[isize]) -> Result<Lane> {
    let vals = with_cast_type!(d, T, load_typed::<T>(ptr, offsets), {
        return Err(Error::Value(format!("elementwise ops do not support {d}")));
    });
    Ok(match kind_of(d) {
        LaneKind::F => Lane::F(vals.iter().map(|c| if let Canon::F(f) = c { *f } else { 0.0 }).collect()),
        LaneKind::I => Lane::I(vals.iter().map(|c| if let Canon::I(v) = c { *v } else { 0 }).collect()),
        LaneKind::U => Lane::U(vals.iter().map(|c| if let Canon::U(v) = c { *v } else { 0 }).collect()),
        LaneKind::B => Lane::B(vals.iter().map(|c| matches!(c, Canon::U(v) if *v != 0)).collect()),
    })
}

fn store_typed<T: Elem>(lane: &Lane, ptr: *mut u8, start: usize) {
    for i in 0..lane.len() {
        // SAFETY: the output buffer holds at least start + lane.len() elements of T.
        unsafe { std::ptr::write_unaligned(ptr.cast::<T>().add(start + i), T::from_canon(lane.canon(i))) };
    }
}

/// Writes the lane as dtype `d` into contiguous elements `start..start + len` at `ptr`.
pub fn store(d: DType, lane: &Lane, ptr: *mut u8, start: usize) -> Result<()> {
    with_cast_type!(
        d,
        T,
        {
            store_typed::<T>(lane, ptr, start);
            Ok(())
        },
        Err(Error::Value(format!("elementwise ops do not support {d}")))
    )
}
