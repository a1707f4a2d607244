//! Binding symbolic dims to the sizes of the buffers a model is called with, and evaluating
//! every shape of the graph under those bindings.

use std::collections::HashMap;

use max_graph::{DType, Dim, TensorType, Type};

use crate::{Error, Result};

/// Values of the symbolic dims, learned from the inputs (and, for data-dependent dims such as
/// nonzero's count, from ops as they run).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings(pub HashMap<String, i64>);

impl Bindings {
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.get(name).copied()
    }

    /// The concrete extents of `dims`, or None while a symbol is still unbound.
    pub fn eval(&self, dims: &[Dim]) -> Result<Option<Vec<usize>>> {
        let mut out = Vec::with_capacity(dims.len());
        for d in dims {
            let v = d.evaluate(&|s| self.get(s)).map_err(|e| Error::Value(e.to_string()))?;
            match v {
                Some(n) if n >= 0 => out.push(n as usize),
                Some(n) => {
                    return Err(Error::Value(format!("dimension {d} evaluates to {n}, which is negative")));
                }
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// Binds `name` to `value`; a conflicting earlier binding is an error naming both sources.
    pub fn bind(&mut self, name: &str, value: i64, source: &str) -> Result<()> {
        match self.0.get(name) {
            Some(&v) if v != value => Err(Error::Value(format!(
                "symbolic dimension '{name}' is {v} in an earlier input but {value} in {source}"
            ))),
            _ => {
                self.0.insert(name.to_string(), value);
                Ok(())
            }
        }
    }
}

fn fmt_shape(shape: &[usize]) -> String {
    let s: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("({})", s.join(", "))
}

/// Binds the symbols of the graph's input types to the given (dtype, shape) of each input.
/// Algebraic dims are checked once every symbol they use is bound.
pub fn bind_inputs(types: &[Type], given: &[(DType, Vec<usize>)]) -> Result<Bindings> {
    if types.len() != given.len() {
        return Err(Error::Value(format!("the model takes {} inputs but {} were given", types.len(), given.len())));
    }
    let mut b = Bindings::default();
    let mut deferred: Vec<(usize, usize, &Dim)> = Vec::new();
    for (i, (ty, (dtype, shape))) in types.iter().zip(given).enumerate() {
        let t: &TensorType = match ty {
            Type::Tensor(t) | Type::Buffer(t) => t,
            Type::Chain => continue,
        };
        let want = max_graph::types::shape_str(&t.shape);
        if *dtype != t.dtype {
            return Err(Error::Value(format!("input {i}: expected dtype {} (shape {want}), got {dtype}", t.dtype)));
        }
        if shape.len() != t.rank() {
            return Err(Error::Value(format!(
                "input {i}: expected rank {} (shape {want}), got shape {}",
                t.rank(),
                fmt_shape(shape)
            )));
        }
        for (axis, (d, &n)) in t.shape.iter().zip(shape).enumerate() {
            if let Some(s) = d.as_static() {
                if s != n as i64 {
                    return Err(Error::Value(format!(
                        "input {i}: expected shape {want}, got {}: dimension {axis} must be {s}",
                        fmt_shape(shape)
                    )));
                }
            } else if let Some(name) = d.as_symbol() {
                b.bind(name, n as i64, &format!("input {i} (axis {axis})"))?;
            } else {
                deferred.push((i, axis, d));
            }
        }
    }
    for (i, axis, d) in deferred {
        let n = given[i].1[axis] as i64;
        match d.evaluate(&|s| b.get(s)).map_err(|e| Error::Value(e.to_string()))? {
            Some(v) if v == n => {}
            Some(v) => {
                return Err(Error::Value(format!("input {i}: dimension {axis} must be {d} = {v}, got {n}")));
            }
            None => {
                // A symbol that appears only inside expressions: solve the simple case `k*s + c`.
                let params = d.parameters();
                if let [only] = params.as_slice() {
                    let at = |x: i64| d.evaluate(&|s| (s == &**only).then_some(x)).ok().flatten();
                    if let (Some(c), Some(k1)) = (at(0), at(1)) {
                        let k = k1 - c;
                        if k != 0 && (n - c) % k == 0 && at((n - c) / k) == Some(n) {
                            b.bind(only, (n - c) / k, &format!("input {i} (axis {axis})"))?;
                            continue;
                        }
                    }
                }
                return Err(Error::Value(format!(
                    "input {i}: dimension {axis} ({d}) cannot be determined from the inputs"
                )));
            }
        }
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use max_graph::DeviceRef;

    fn ty(dims: Vec<Dim>) -> Type {
        Type::Tensor(TensorType::new(DType::Float32, dims, DeviceRef::CPU))
    }

    #[test]
    fn binds_and_checks() {
        let batch = Dim::sym("batch").unwrap();
        let types = vec![ty(vec![batch.clone(), Dim::stat(3)]), ty(vec![batch.mul(&Dim::stat(2)).unwrap()])];
        let b = bind_inputs(&types, &[(DType::Float32, vec![5, 3]), (DType::Float32, vec![10])]).unwrap();
        assert_eq!(b.get("batch"), Some(5));
        let err = bind_inputs(&types, &[(DType::Float32, vec![5, 3]), (DType::Float32, vec![9])]).unwrap_err();
        assert!(err.to_string().contains("must be batch * 2 = 10"), "{err}");
        let err = bind_inputs(&types, &[(DType::Float32, vec![5, 4]), (DType::Float32, vec![10])]).unwrap_err();
        assert!(err.to_string().contains("dimension 1 must be 3"), "{err}");
        let err = bind_inputs(&types, &[(DType::Int32, vec![5, 3]), (DType::Float32, vec![10])]).unwrap_err();
        assert!(err.to_string().contains("expected dtype float32"), "{err}");
    }

    #[test]
    fn solves_a_symbol_seen_only_in_an_expression() {
        let n = Dim::sym("n").unwrap();
        let types = vec![ty(vec![n.mul(&Dim::stat(2)).unwrap().add(&Dim::stat(1)).unwrap()])];
        let b = bind_inputs(&types, &[(DType::Float32, vec![9])]).unwrap();
        assert_eq!(b.get("n"), Some(4));
        assert_eq!(b.eval(&[n.add(&Dim::stat(1)).unwrap()]).unwrap(), Some(vec![5]));
        assert!(bind_inputs(&types, &[(DType::Float32, vec![8])]).is_err());
    }
}
