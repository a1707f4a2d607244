//! numpy basic indexing on a view: integers, slices with steps, `...` and new axes.
//! The result is always a view of the same storage.

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexItem {
    /// One position along a dimension (negative counts from the end); removes the dimension.
    At(i64),
    /// `start:stop:step` with Python's defaults and clamping.
    Slice { start: Option<i64>, stop: Option<i64>, step: Option<i64> },
    /// `...`: as many full slices as needed.
    Ellipsis,
    /// `None`: a new dimension of extent 1.
    NewAxis,
}

/// A view's geometry: extents, element strides and the byte offset of element 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct View {
    pub shape: Vec<usize>,
    pub strides: Vec<isize>,
    pub offset: isize,
}

/// Python's slice.indices(len) followed by the slice length.
fn resolve_slice(start: Option<i64>, stop: Option<i64>, step: Option<i64>, len: i64) -> Result<(i64, i64, i64)> {
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(Error::Value("slice step cannot be zero".into()));
    }
    let clamp = |v: i64| -> i64 {
        let v = if v < 0 { v.saturating_add(len) } else { v };
        if step > 0 { v.clamp(0, len) } else { v.clamp(-1, len - 1) }
    };
    let (start, stop) = if step > 0 {
        (start.map_or(0, clamp), stop.map_or(len, clamp))
    } else {
        (start.map_or(len - 1, clamp), stop.map_or(-1, clamp))
    };
    let count = if step > 0 {
        if stop > start { (stop - start - 1) / step + 1 } else { 0 }
    } else if start > stop {
        (start - stop - 1) / (-step) + 1
    } else {
        0
    };
    Ok((start, step, count))
}

pub(crate) fn apply(view: &View, items: &[IndexItem], elem_bytes: usize) -> Result<View> {
    let ellipses = items.iter().filter(|i| matches!(i, IndexItem::Ellipsis)).count();
    if ellipses > 1 {
        return Err(Error::Index("an index can only have a single ellipsis ('...')".into()));
    }
    let consuming = items.iter().filter(|i| matches!(i, IndexItem::At(_) | IndexItem::Slice { .. })).count();
    let rank = view.shape.len();
    if consuming > rank {
        return Err(Error::Index(format!("too many indices: the buffer has rank {rank} but {consuming} were indexed")));
    }
    let mut out = View { shape: Vec::new(), strides: Vec::new(), offset: view.offset };
    let mut dim = 0usize;
    let full = IndexItem::Slice { start: None, stop: None, step: None };
    let mut expanded: Vec<IndexItem> = Vec::with_capacity(rank + items.len());
    for item in items {
        if *item == IndexItem::Ellipsis {
            expanded.extend(std::iter::repeat_n(full, rank - consuming));
        } else {
            expanded.push(*item);
        }
    }
    if ellipses == 0 {
        expanded.extend(std::iter::repeat_n(full, rank - consuming));
    }
    for item in expanded {
        match item {
            IndexItem::NewAxis => {
                out.shape.push(1);
                out.strides.push(0);
            }
            IndexItem::At(i) => {
                let len = view.shape[dim] as i64;
                let pos = if i < 0 { i + len } else { i };
                if pos < 0 || pos >= len {
                    return Err(Error::Index(format!("index {i} is out of bounds for axis {dim} with size {len}")));
                }
                out.offset += pos as isize * view.strides[dim] * elem_bytes as isize;
                dim += 1;
            }
            IndexItem::Slice { start, stop, step } => {
                let len = view.shape[dim] as i64;
                let (start, step, count) = resolve_slice(start, stop, step, len)?;
                if count > 0 {
                    out.offset += start as isize * view.strides[dim] * elem_bytes as isize;
                }
                out.shape.push(count as usize);
                out.strides.push(view.strides[dim] * step as isize);
                dim += 1;
            }
            IndexItem::Ellipsis => unreachable!("expanded above"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use IndexItem::*;

    fn base() -> View {
        View { shape: vec![3, 4], strides: vec![4, 1], offset: 0 }
    }

    fn sl(start: Option<i64>, stop: Option<i64>, step: Option<i64>) -> IndexItem {
        Slice { start, stop, step }
    }

    #[test]
    fn python_slice_semantics() {
        assert_eq!(resolve_slice(None, None, Some(-1), 5).unwrap(), (4, -1, 5));
        assert_eq!(resolve_slice(Some(-2), None, None, 5).unwrap(), (3, 1, 2));
        assert_eq!(resolve_slice(Some(10), Some(20), None, 5).unwrap().2, 0);
        assert_eq!(resolve_slice(Some(1), Some(-1), Some(2), 6).unwrap(), (1, 2, 2));
        assert_eq!(resolve_slice(Some(-100), Some(100), Some(-3), 7).unwrap(), (-1, -3, 0));
        assert!(resolve_slice(None, None, Some(0), 3).is_err());
    }

    #[test]
    fn ints_slices_ellipsis_newaxis() {
        let v = apply(&base(), &[At(1)], 4).unwrap();
        assert_eq!((v.shape, v.strides, v.offset), (vec![4], vec![1], 16));
        let v = apply(&base(), &[Ellipsis, At(-1)], 4).unwrap();
        assert_eq!((v.shape, v.strides, v.offset), (vec![3], vec![4], 12));
        let v = apply(&base(), &[sl(None, None, Some(-1)), NewAxis, sl(Some(1), None, Some(2))], 4).unwrap();
        assert_eq!((v.shape, v.strides, v.offset), (vec![3, 1, 2], vec![-4, 0, 2], 36));
    }

    #[test]
    fn errors() {
        assert!(matches!(apply(&base(), &[At(3)], 4), Err(Error::Index(_))));
        assert!(matches!(apply(&base(), &[At(-5)], 4), Err(Error::Index(_))));
        assert!(matches!(apply(&base(), &[At(0), At(0), At(0)], 4), Err(Error::Index(_))));
        assert!(matches!(apply(&base(), &[Ellipsis, Ellipsis], 4), Err(Error::Index(_))));
    }
}
