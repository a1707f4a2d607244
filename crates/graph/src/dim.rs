//! Tensor dimensions: static sizes, named symbols, and algebraic expressions over them, kept in
//! one canonical form so that equal expressions compare equal (`-x - 4 == -(x + 4)`).
//!
//! The canonical form is a polynomial with integer coefficients: a sorted list of terms, each a
//! coefficient times a sorted product of atoms raised to powers. An atom is a symbol or a floor
//! division that could not be simplified away. Zero coefficients are dropped, so a static dim is
//! a polynomial with at most a constant term.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::error::GraphError;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    Sym(Arc<str>),
    /// `num // den` where the division could not be done symbolically.
    FloorDiv(Box<Dim>, Box<Dim>),
}

/// A product of atoms with positive powers, sorted by atom.
type Monomial = Vec<(Atom, u32)>;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dim {
    /// Sorted by monomial; no zero coefficients; the constant term has the empty monomial.
    terms: Vec<(Monomial, i64)>,
}

/// What kind of dimension a canonical expression is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimKind {
    Static,
    Symbolic,
    Algebraic,
}

pub(crate) fn overflow() -> GraphError {
    GraphError::Value("dimension arithmetic overflows a 64-bit integer".into())
}

/// A valid symbol name: a letter or '_' then letters, digits, '_' or '.'.
pub fn valid_symbol(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

impl Dim {
    pub fn stat(n: i64) -> Dim {
        if n == 0 { Dim { terms: vec![] } } else { Dim { terms: vec![(vec![], n)] } }
    }

    pub fn sym(name: &str) -> Result<Dim, GraphError> {
        if !valid_symbol(name) {
            return Err(GraphError::Value(format!(
                "invalid name for a symbolic dimension: {name:?} (use a letter or '_' followed by \
                 letters, digits, '_' or '.')"
            )));
        }
        Ok(Dim { terms: vec![(vec![(Atom::Sym(Arc::from(name)), 1)], 1)] })
    }

    fn from_map(map: BTreeMap<Monomial, i64>) -> Dim {
        Dim { terms: map.into_iter().filter(|(_, c)| *c != 0).collect() }
    }

    pub fn kind(&self) -> DimKind {
        match self.terms.as_slice() {
            [] => DimKind::Static,
            [(m, _)] if m.is_empty() => DimKind::Static,
            [(m, 1)] if matches!(m.as_slice(), [(Atom::Sym(_), 1)]) => DimKind::Symbolic,
            _ => DimKind::Algebraic,
        }
    }

    /// The value of a static dim.
    pub fn as_static(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [(m, c)] if m.is_empty() => Some(*c),
            _ => None,
        }
    }

    /// The name of a symbolic dim.
    pub fn as_symbol(&self) -> Option<&str> {
        match self.terms.as_slice() {
            [(m, 1)] => match m.as_slice() {
                [(Atom::Sym(s), 1)] => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// The canonical terms: each a product of atoms with their powers, and its coefficient
    /// (the sum of the terms is the expression).
    pub fn terms(&self) -> impl Iterator<Item = (&[(Atom, u32)], i64)> {
        self.terms.iter().map(|(m, c)| (m.as_slice(), *c))
    }

    pub fn is_static(&self) -> bool {
        self.kind() == DimKind::Static
    }

    /// Every symbol the expression depends on, sorted and without repeats.
    pub fn parameters(&self) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        self.collect_params(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_params(&self, out: &mut Vec<Arc<str>>) {
        for (m, _) in &self.terms {
            for (atom, _) in m {
                match atom {
                    Atom::Sym(s) => out.push(s.clone()),
                    Atom::FloorDiv(a, b) => {
                        a.collect_params(out);
                        b.collect_params(out);
                    }
                }
            }
        }
    }

    pub fn add(&self, other: &Dim) -> Result<Dim, GraphError> {
        let mut map: BTreeMap<Monomial, i64> = self.terms.iter().cloned().collect();
        for (m, c) in &other.terms {
            let e = map.entry(m.clone()).or_insert(0);
            *e = e.checked_add(*c).ok_or_else(overflow)?;
        }
        Ok(Dim::from_map(map))
    }

    pub fn neg(&self) -> Result<Dim, GraphError> {
        let terms = self
            .terms
            .iter()
            .map(|(m, c)| c.checked_neg().map(|c| (m.clone(), c)).ok_or_else(overflow))
            .collect::<Result<_, _>>()?;
        Ok(Dim { terms })
    }

    pub fn sub(&self, other: &Dim) -> Result<Dim, GraphError> {
        self.add(&other.neg()?)
    }

    pub fn mul(&self, other: &Dim) -> Result<Dim, GraphError> {
        let mut map: BTreeMap<Monomial, i64> = BTreeMap::new();
        for (ma, ca) in &self.terms {
            for (mb, cb) in &other.terms {
                let mut powers: BTreeMap<Atom, u32> = ma.iter().cloned().collect();
                for (atom, p) in mb {
                    *powers.entry(atom.clone()).or_insert(0) += p;
                }
                let coeff = ca.checked_mul(*cb).ok_or_else(overflow)?;
                let e = map.entry(powers.into_iter().collect()).or_insert(0);
                *e = e.checked_add(coeff).ok_or_else(overflow)?;
            }
        }
        Ok(Dim::from_map(map))
    }

    /// Floor division. Exact divisions simplify (`(4 * x) // 2 == 2 * x`, `x // x == 1`);
    /// the rest stay as a `//` atom.
    pub fn floordiv(&self, other: &Dim) -> Result<Dim, GraphError> {
        if other.as_static() == Some(0) {
            return Err(GraphError::Value(format!("dimension division by zero: {self} // 0")));
        }
        if let (Some(a), Some(b)) = (self.as_static(), other.as_static()) {
            let q = a.checked_div(b).ok_or_else(overflow)?;
            let floor = if a % b != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q };
            return Ok(Dim::stat(floor));
        }
        if self.as_static() == Some(0) {
            return Ok(Dim::stat(0));
        }
        if self == other {
            return Ok(Dim::stat(1));
        }
        if other.as_static() == Some(1) {
            return Ok(self.clone());
        }
        // Division by a single term c * m: exact when every term's monomial contains m and its
        // coefficient is a multiple of c.
        if let [(den_m, den_c)] = other.terms.as_slice() {
            let mut out = Vec::with_capacity(self.terms.len());
            let mut exact = true;
            for (m, c) in &self.terms {
                // (c % den_c overflows only for i64::MIN // -1, whose quotient does not fit)
                match (divide_monomial(m, den_m), c.checked_rem(*den_c).ok_or_else(overflow)? == 0) {
                    (Some(q), true) => out.push((q, c.checked_div(*den_c).ok_or_else(overflow)?)),
                    _ => {
                        exact = false;
                        break;
                    }
                }
            }
            if exact {
                let map: BTreeMap<Monomial, i64> = out.into_iter().fold(BTreeMap::new(), |mut acc, (m, c)| {
                    *acc.entry(m).or_insert(0) += c;
                    acc
                });
                return Ok(Dim::from_map(map));
            }
        }
        Ok(Dim { terms: vec![(vec![(Atom::FloorDiv(Box::new(self.clone()), Box::new(other.clone())), 1)], 1)] })
    }

    /// Replaces symbols by dims (for binding symbolic shapes to concrete ones).
    pub fn substitute(&self, env: &dyn Fn(&str) -> Option<Dim>) -> Result<Dim, GraphError> {
        let mut acc = Dim::stat(0);
        for (m, c) in &self.terms {
            let mut term = Dim::stat(*c);
            for (atom, p) in m {
                let base = match atom {
                    Atom::Sym(s) => env(s).unwrap_or_else(|| Dim { terms: vec![(vec![(atom.clone(), 1)], 1)] }),
                    Atom::FloorDiv(a, b) => a.substitute(env)?.floordiv(&b.substitute(env)?)?,
                };
                for _ in 0..*p {
                    term = term.mul(&base)?;
                }
            }
            acc = acc.add(&term)?;
        }
        Ok(acc)
    }

    /// The value with every symbol bound, when all are.
    pub fn evaluate(&self, env: &dyn Fn(&str) -> Option<i64>) -> Result<Option<i64>, GraphError> {
        let d = self.substitute(&|s| env(s).map(Dim::stat))?;
        Ok(d.as_static())
    }

    /// `repr` form, as MAX writes it: `Dim('batch') * Dim(5)`.
    pub fn repr(&self) -> String {
        self.render(true)
    }

    fn render(&self, repr: bool) -> String {
        if let Some(n) = self.as_static() {
            return if repr { format!("Dim({n})") } else { n.to_string() };
        }
        let atom = |a: &Atom| -> String {
            match a {
                Atom::Sym(s) if repr => format!("Dim('{s}')"),
                Atom::Sym(s) => s.to_string(),
                Atom::FloorDiv(x, y) => {
                    let wrap = |d: &Dim| {
                        let s = d.render(repr);
                        if d.terms.len() > 1 || d.terms.first().is_some_and(|(m, c)| m.len() + (*c != 1) as usize > 1) {
                            format!("({s})")
                        } else {
                            s
                        }
                    };
                    format!("{} // {}", wrap(x), wrap(y))
                }
            }
        };
        let mut terms: Vec<(bool, String)> = Vec::new();
        for (m, c) in &self.terms {
            let mut factors: Vec<String> = Vec::new();
            for (a, p) in m {
                for _ in 0..*p {
                    factors.push(atom(a));
                }
            }
            if m.is_empty() || *c != 1 {
                factors.push(if repr { format!("Dim({c})") } else { c.to_string() });
            }
            let product = factors.len() > 1;
            terms.push((product, factors.join(" * ")));
        }
        if terms.len() == 1 {
            return terms.remove(0).1;
        }
        // Products first, then plain symbols, then the constant.
        let constant = self.terms.first().is_some_and(|(m, _)| m.is_empty());
        let mut ordered: Vec<String> = Vec::new();
        let body = if constant { &terms[1..] } else { &terms[..] };
        for (product, s) in body.iter().filter(|(p, _)| *p) {
            let _ = product;
            ordered.push(format!("({s})"));
        }
        for (_, s) in body.iter().filter(|(p, _)| !*p) {
            ordered.push(s.clone());
        }
        if constant {
            ordered.push(terms[0].1.clone());
        }
        ordered.join(" + ")
    }
}

fn divide_monomial(m: &Monomial, by: &Monomial) -> Option<Monomial> {
    let mut powers: BTreeMap<Atom, u32> = m.iter().cloned().collect();
    for (atom, p) in by {
        let have = powers.get_mut(atom)?;
        match (*have).cmp(p) {
            Ordering::Less => return None,
            Ordering::Equal => {
                powers.remove(atom);
            }
            Ordering::Greater => *have -= p,
        }
    }
    Some(powers.into_iter().collect())
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(false))
    }
}

impl From<i64> for Dim {
    fn from(n: i64) -> Dim {
        Dim::stat(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: &str) -> Dim {
        Dim::sym(n).unwrap()
    }

    #[test]
    fn an_exact_division_that_overflows_is_an_error() {
        let x = s("x");
        let big = x.mul(&Dim::stat(i64::MIN)).unwrap();
        assert!(big.floordiv(&Dim::stat(-1)).is_err());
        let sum = x.add(&Dim::stat(i64::MIN)).unwrap();
        assert!(sum.floordiv(&Dim::stat(-1)).is_err());
        assert_eq!(big.floordiv(&Dim::stat(2)).unwrap(), x.mul(&Dim::stat(i64::MIN / 2)).unwrap());
    }

    #[test]
    fn canonical_forms_compare_equal() {
        let x = s("x");
        let four = Dim::stat(4);
        let lhs = x.neg().unwrap().sub(&four).unwrap();
        let rhs = x.add(&four).unwrap().neg().unwrap();
        assert_eq!(lhs, rhs);
        assert_eq!(x.add(&Dim::stat(0)).unwrap(), x);
        assert_eq!(x.add(&four).unwrap().sub(&four).unwrap().kind(), DimKind::Symbolic);
        let b = s("batch");
        let expanded = b.add(&Dim::stat(1)).unwrap().mul(&b.sub(&Dim::stat(1)).unwrap()).unwrap();
        assert_eq!(expanded, b.mul(&b).unwrap().sub(&Dim::stat(1)).unwrap());
        assert_eq!(Dim::stat(2).mul(&Dim::stat(3)).unwrap().as_static(), Some(6));
    }

    #[test]
    fn floordiv_simplifies_exact_divisions() {
        let b = s("b");
        assert_eq!(b.mul(&Dim::stat(4)).unwrap().floordiv(&Dim::stat(2)).unwrap(), b.mul(&Dim::stat(2)).unwrap());
        assert_eq!(b.floordiv(&b).unwrap().as_static(), Some(1));
        let half = b.floordiv(&Dim::stat(2)).unwrap();
        assert_eq!(half.kind(), DimKind::Algebraic);
        assert_eq!(half.to_string(), "b // 2");
        assert_eq!(Dim::stat(7).floordiv(&Dim::stat(2)).unwrap().as_static(), Some(3));
        assert_eq!(Dim::stat(-7).floordiv(&Dim::stat(2)).unwrap().as_static(), Some(-4));
        assert!(b.floordiv(&Dim::stat(0)).is_err());
        let env = |n: &str| (n == "b").then_some(9);
        assert_eq!(half.evaluate(&env).unwrap(), Some(4));
    }

    #[test]
    fn printing_matches_max() {
        let b = s("batch");
        assert_eq!(b.mul(&Dim::stat(5)).unwrap().to_string(), "batch * 5");
        assert_eq!(b.mul(&Dim::stat(5)).unwrap().repr(), "Dim('batch') * Dim(5)");
        assert_eq!(b.neg().unwrap().sub(&Dim::stat(4)).unwrap().to_string(), "(batch * -1) + -4");
        let x = s("x");
        let e = b.add(&Dim::stat(4)).unwrap().sub(&x.mul(&Dim::stat(2)).unwrap()).unwrap();
        assert_eq!(e.to_string(), "(x * -2) + batch + 4");
        assert_eq!(b.add(&Dim::stat(-1)).unwrap().repr(), "Dim('batch') + Dim(-1)");
    }

    #[test]
    fn names_and_parameters() {
        assert!(Dim::sym("1abc").is_err() && Dim::sym("").is_err() && Dim::sym("a b").is_err());
        let e = s("b").mul(&s("a")).unwrap().add(&Dim::stat(1)).unwrap();
        let p: Vec<String> = e.parameters().iter().map(|s| s.to_string()).collect();
        assert_eq!(p, vec!["a", "b"]);
        assert!(Dim::stat(i64::MAX).add(&Dim::stat(1)).is_err());
    }
}
