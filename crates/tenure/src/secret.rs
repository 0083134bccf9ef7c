//! A secret option value (a password, a token, a secret key) that cannot be
//! printed by accident: store options derive `Debug` and stay safe to log.

use std::fmt;

/// A secret string. `Debug` and `Display` show `<redacted>`; only
/// [`expose`](Secret::expose) gives the value, at the one place that hands
/// it to the server.
///
/// ```
/// use tenure::secret::Secret;
///
/// let password = Secret::new("hunter2");
/// assert_eq!(format!("{password:?} {password}"), "<redacted> <redacted>");
/// assert_eq!(password.expose(), "hunter2");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the server and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
