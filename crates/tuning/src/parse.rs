//! The text forms: one boolean syntax for every flag, integers checked against their
//! declaration, choices by their words.

use std::sync::Arc;

use crate::{DECLS, Decl, Kind, Value};

/// `1`/`true`/`on`/`yes` or `0`/`false`/`off`/`no` (any case, spaces ignored).
pub fn parse_flag(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// `name=value`.
pub(crate) fn entry(item: &str) -> Result<(&str, &str), String> {
    let (name, value) = item.split_once('=').ok_or_else(|| format!("'{item}' is not of the form name=value"))?;
    Ok((name.trim(), value.trim()))
}

pub(crate) fn unknown(name: &str) -> String {
    let close: Vec<&str> = DECLS
        .iter()
        .map(|d| d.name)
        .filter(|n| n.split('.').next() == name.split('.').next() && name.contains('.'))
        .collect();
    if close.is_empty() {
        format!("no setting or tuning knob is called '{name}'")
    } else {
        format!("no tuning knob is called '{name}' (that family has: {})", close.join(", "))
    }
}

/// What an entry of this kind takes, for messages.
pub(crate) fn takes(kind: &Kind) -> String {
    match kind {
        Kind::Flag => "a flag (1/true/on/yes or 0/false/off/no)".into(),
        Kind::Int { min, max, step } => {
            let upper = if *max == usize::MAX { String::new() } else { max.to_string() };
            if *step > 1 {
                format!("a multiple of {step} in {min}..{upper}")
            } else {
                format!("an integer in {min}..{upper}")
            }
        }
        Kind::OneOf(values) => {
            format!("one of {}", values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "))
        }
        Kind::Choice(words) => format!("one of {}", words.join(", ")),
        Kind::Text => "a text".into(),
    }
}

/// The value `text` gives the declared entry.
pub(crate) fn value(decl: &Decl, text: &str) -> Result<Value, String> {
    let text = text.trim();
    let bad = || format!("{} takes {}, not '{text}'", decl.name, takes(&decl.kind));
    match &decl.kind {
        Kind::Flag => parse_flag(text).map(Value::Flag).ok_or_else(bad),
        Kind::Int { min, max, step } => {
            let n: usize = text.parse().map_err(|_| bad())?;
            if n < *min || n > *max || !n.is_multiple_of(*step) {
                return Err(bad());
            }
            Ok(Value::Int(n))
        }
        Kind::OneOf(values) => {
            let n: usize = text.parse().map_err(|_| bad())?;
            if values.contains(&n) { Ok(Value::Int(n)) } else { Err(bad()) }
        }
        Kind::Choice(words) => {
            let lower = text.to_ascii_lowercase();
            if let Some(w) = words.iter().find(|w| **w == lower) {
                return Ok(Value::Choice(w));
            }
            // A flag word picks the choices named "on" and "off" where the knob has them.
            match parse_flag(text) {
                Some(on) => {
                    let word = if on { "on" } else { "off" };
                    words.iter().find(|w| **w == word).map(|w| Value::Choice(w)).ok_or_else(bad)
                }
                None => Err(bad()),
            }
        }
        Kind::Text => Ok(Value::Text(Arc::from(text))),
    }
}

/// The declared default (`None`: chosen per problem).
pub(crate) fn default_of(decl: &Decl) -> Option<Value> {
    if decl.default.is_empty() {
        return None;
    }
    match value(decl, decl.default) {
        Ok(v) => Some(v),
        Err(why) => unreachable!("declared default of {}: {why}", decl.name),
    }
}
