//! The graph layer's error type. Messages name the op, the offending argument and the input
//! types; crates/python maps the variants to ValueError, TypeError and IndexError.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("{0}")]
    Value(String),
    #[error("{0}")]
    Type(String),
    #[error("{0}")]
    Index(String),
}

pub type Result<T> = std::result::Result<T, GraphError>;
