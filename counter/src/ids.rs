//! Validated identifiers: a [`Scope`] (the limited owner) and a
//! [`ResourceId`] (an item inside it). Both become DynamoDB key values, so a
//! bad value is rejected here with a clear message instead of becoming a
//! malformed or surprising key.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest accepted scope or id, in bytes of UTF-8. DynamoDB allows 2048
/// bytes for a partition key and 1024 for a sort key; 256 keeps keys cheap
/// and leaves room for the counters table's composite names.
pub const MAX_ID_BYTES: usize = 256;

/// Why a scope or id was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{kind} must not be empty")]
    Empty { kind: &'static str },
    #[error("{kind} is {len} bytes long; the maximum is {max} bytes")]
    TooLong { kind: &'static str, len: usize, max: usize },
    #[error("{kind} contains a control character at byte {at}; use printable characters only")]
    ControlCharacter { kind: &'static str, at: usize },
    #[error("{kind} must not start or end with whitespace")]
    SurroundingWhitespace { kind: &'static str },
}

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong {
            kind,
            len: value.len(),
            max: MAX_ID_BYTES,
        });
    }
    if let Some((at, _)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return Err(IdError::ControlCharacter { kind, at });
    }
    if value.trim() != value {
        return Err(IdError::SurroundingWhitespace { kind });
    }
    Ok(())
}

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates `value` and wraps it.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate($kind, &value)?;
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(value: &str) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_newtype!(
    /// The limited owner (account, tenant): the resources table's partition key.
    Scope,
    "scope"
);
id_newtype!(
    /// A resource inside a scope: the resources table's sort key.
    ResourceId,
    "resource id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_and_unicode_values() {
        assert_eq!(Scope::new("acct-42").unwrap().as_str(), "acct-42");
        assert!(ResourceId::new("widget/ü/日本").is_ok());
        assert!(Scope::new("a".repeat(MAX_ID_BYTES)).is_ok());
    }

    #[test]
    fn rejects_empty_long_control_and_padded_values_with_a_reason() {
        assert_eq!(Scope::new(""), Err(IdError::Empty { kind: "scope" }));
        assert_eq!(
            ResourceId::new("x".repeat(MAX_ID_BYTES + 1)),
            Err(IdError::TooLong {
                kind: "resource id",
                len: MAX_ID_BYTES + 1,
                max: MAX_ID_BYTES
            })
        );
        assert_eq!(
            ResourceId::new("ab\u{0}c"),
            Err(IdError::ControlCharacter {
                kind: "resource id",
                at: 2
            })
        );
        assert!(matches!(
            Scope::new("line\nbreak"),
            Err(IdError::ControlCharacter { .. })
        ));
        assert!(matches!(
            Scope::new(" padded"),
            Err(IdError::SurroundingWhitespace { .. })
        ));
        let message = Scope::new("").unwrap_err().to_string();
        assert_eq!(message, "scope must not be empty");
    }

    #[test]
    fn length_limit_counts_bytes_not_characters() {
        // 86 three-byte characters = 258 bytes > 256.
        let err = ResourceId::new("日".repeat(86)).unwrap_err();
        assert!(matches!(err, IdError::TooLong { len: 258, .. }));
    }

    #[test]
    fn deserializing_validates_too() {
        let ok: Scope = serde_json::from_str("\"tenant\"").unwrap();
        assert_eq!(ok.as_str(), "tenant");
        let bad = serde_json::from_str::<Scope>("\"\"").unwrap_err();
        assert!(bad.to_string().contains("scope must not be empty"));
    }
}
