//! The engine's settings and kernel tuning knobs, each declared once ([`knobs`]: name, type,
//! default, doc), parsed once, and overridden for a scope.
//!
//! Two kinds of entries share the registry:
//! - **user settings** (`cuda_graphs`, `kernel_cache_dir`, ...), each with an environment variable
//!   of its own (`MAX_CUDA_GRAPHS`, ...), read when the registry is first used;
//! - **tuning knobs** (`conv.bn`, `gemm.splitk`, ...) that force a kernel's variant for benchmarks
//!   and tests; the defaults are what the measurements chose. They are set through one variable,
//!   `MAX_TUNING="conv.bn=128,gemm.splitk=2"`, or through [`scoped`] (Python:
//!   `max.tuning.override`).
//!
//! Launchers take one snapshot ([`current`]) per call and read typed values from it
//! ([`Tuning::flag`], [`Tuning::int`], [`Tuning::choice`]); nothing reads the environment on a
//! hot path. Every flag takes the same words: `1`, `true`, `on`, `yes` and `0`, `false`, `off`, `no`.

mod knobs;
mod parse;

use std::sync::{Arc, RwLock};

pub use knobs::{DECLS, Decl, Kind, Knob};
pub use parse::parse_flag;

/// A value of one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Flag(bool),
    Int(usize),
    Choice(&'static str),
    Text(Arc<str>),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Flag(b) => write!(f, "{}", if *b { "1" } else { "0" }),
            Value::Int(n) => write!(f, "{n}"),
            Value::Choice(c) => write!(f, "{c}"),
            Value::Text(t) => write!(f, "{t}"),
        }
    }
}

/// A snapshot of every entry: the declared defaults, under the environment, under any overrides.
/// `None` means "chosen per problem" (an entry without a default that nothing set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    values: Vec<Option<Value>>,
    /// Which entries were set explicitly (environment, MAX_TUNING or an override).
    set: Vec<bool>,
}

impl Default for Tuning {
    /// Every entry at its declared default.
    fn default() -> Tuning {
        let values = DECLS.iter().map(parse::default_of).collect();
        Tuning { values, set: vec![false; DECLS.len()] }
    }
}

impl Tuning {
    /// The defaults under `spec` (`"conv.bn=128,gemm.splitk=2"`).
    pub fn parse(spec: &str) -> Result<Tuning, String> {
        Tuning::default().with(spec)
    }

    /// This snapshot with the entries of `spec` set; an error names the first bad entry.
    pub fn with(mut self, spec: &str) -> Result<Tuning, String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = parse::entry(item)?;
            self.set(name, value)?;
        }
        Ok(self)
    }

    /// Sets `name` (an entry's name) from its text form.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let decl = Knob::by_name(name).ok_or_else(|| parse::unknown(name))?.decl();
        let v = parse::value(decl, value)?;
        self.values[decl.knob as usize] = Some(v);
        self.set[decl.knob as usize] = true;
        Ok(())
    }

    /// Sets a knob to a typed value (Rust tests and launch selection tables).
    pub fn with_value(mut self, knob: Knob, value: Value) -> Tuning {
        self.values[knob as usize] = Some(value);
        self.set[knob as usize] = true;
        self
    }

    /// The knob's value, `None` when left to the heuristic.
    pub fn value(&self, knob: Knob) -> Option<&Value> {
        self.values[knob as usize].as_ref()
    }

    /// Whether the knob was set (rather than left at its default).
    pub fn is_set(&self, knob: Knob) -> bool {
        self.set[knob as usize]
    }

    /// A flag knob's value.
    pub fn flag(&self, knob: Knob) -> Option<bool> {
        debug_assert!(matches!(knob.decl().kind, Kind::Flag), "{} is not a flag", knob.decl().name);
        match self.value(knob) {
            Some(Value::Flag(b)) => Some(*b),
            _ => None,
        }
    }

    /// A flag knob's value, `default` when unset.
    pub fn flag_or(&self, knob: Knob, default: bool) -> bool {
        self.flag(knob).unwrap_or(default)
    }

    /// `numerics.batch_invariant`: every row's result independent of the rest of its batch.
    pub fn batch_invariant(&self) -> bool {
        self.flag_or(Knob::NumericsBatchInvariant, false)
    }

    /// An integer knob's value.
    pub fn int(&self, knob: Knob) -> Option<usize> {
        debug_assert!(
            matches!(knob.decl().kind, Kind::Int { .. } | Kind::OneOf(_)),
            "{} is not an integer",
            knob.decl().name
        );
        match self.value(knob) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        }
    }

    /// A choice knob's value (one of its declared words).
    pub fn choice(&self, knob: Knob) -> Option<&'static str> {
        debug_assert!(matches!(knob.decl().kind, Kind::Choice(_)), "{} is not a choice", knob.decl().name);
        match self.value(knob) {
            Some(Value::Choice(c)) => Some(c),
            _ => None,
        }
    }

    /// A text setting's value.
    pub fn text(&self, knob: Knob) -> Option<&str> {
        match self.value(knob) {
            Some(Value::Text(t)) => Some(t),
            _ => None,
        }
    }

    /// The explicitly set entries as a spec string (`"conv.bn=128,gemm.splitk=2"`).
    pub fn describe(&self) -> String {
        DECLS
            .iter()
            .filter(|d| self.set[d.knob as usize])
            .map(|d| match &self.values[d.knob as usize] {
                Some(v) => format!("{}={v}", d.name),
                None => format!("{}=", d.name),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The defaults under the user settings' variables and `MAX_TUNING`; bad entries are
    /// reported on stderr (once, naming the entry and what it takes) and left at their default.
    fn from_env() -> Tuning {
        let mut t = Tuning::default();
        let complain = |what: String| eprintln!("max: ignoring {what}");
        for d in DECLS {
            let Some(var) = d.env else { continue };
            let Ok(text) = std::env::var(var) else { continue };
            if let Err(why) = t.set(d.name, &text) {
                complain(format!("{var}={text}: {why}"));
            }
        }
        if let Ok(spec) = std::env::var(TUNING_VAR) {
            for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let applied = parse::entry(item).and_then(|(name, value)| t.set(name, value));
                if let Err(why) = applied {
                    complain(format!("{TUNING_VAR} entry '{item}': {why}"));
                }
            }
        }
        t
    }
}

/// The variable that sets tuning knobs (and settings) by name.
pub const TUNING_VAR: &str = "MAX_TUNING";

static CURRENT: RwLock<Option<Arc<Tuning>>> = RwLock::new(None);

/// The process's snapshot: the environment (read on first use) under any scoped overrides.
pub fn current() -> Arc<Tuning> {
    if let Some(t) = CURRENT.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return t.clone();
    }
    let mut slot = CURRENT.write().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(|| Arc::new(Tuning::from_env())).clone()
}

fn replace(t: Arc<Tuning>) -> Arc<Tuning> {
    let mut slot = CURRENT.write().unwrap_or_else(|e| e.into_inner());
    let prev = slot.take();
    *slot = Some(t);
    prev.unwrap_or_else(|| Arc::new(Tuning::from_env()))
}

/// An override in force until dropped (scopes nest; drop them in reverse order).
#[must_use = "the override ends when this is dropped"]
pub struct Scope {
    previous: Option<Arc<Tuning>>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(prev) = self.previous.take() {
            replace(prev);
        }
    }
}

/// Overrides the entries of `spec` (`"conv.bn=128,cuda_graphs=off"`) until the scope is dropped.
pub fn scoped(spec: &str) -> Result<Scope, String> {
    let next = (*current()).clone().with(spec)?;
    Ok(scoped_with(next))
}

/// Makes `t` the process's snapshot until the scope is dropped.
pub fn scoped_with(t: Tuning) -> Scope {
    let _ = current();
    Scope { previous: Some(replace(Arc::new(t))) }
}

#[cfg(test)]
mod tests;
