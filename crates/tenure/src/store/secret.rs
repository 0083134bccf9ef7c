//! Secret option values (a password, a token, a secret key) that cannot be
//! printed by accident, and the static access keys of cloud stores built
//! from them: store options derive `Debug` and stay safe to log.

use std::fmt;

/// A secret string. `Debug` and `Display` show `<redacted>`; only
/// [`expose`](Secret::expose) gives the value, at the one place that hands
/// it to the server.
///
/// ```
/// use tenure::store::secret::Secret;
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

/// Static access keys of a cloud service (DynamoDB, S3): a key pair, and a
/// session token for temporary credentials. `Debug` shows the key id
/// [shortened](crate::store::url::mask_key_id) and nothing of the secrets, so
/// options holding keys stay safe to log.
///
/// ```
/// use tenure::store::secret::AccessKeys;
///
/// let keys = AccessKeys::new("AKIDEXAMPLE", "s3cr3t", Some("t0ken".to_owned()));
/// assert_eq!(keys.secret_access_key().expose(), "s3cr3t");
/// let shown = format!("{keys:?}");
/// assert!(shown.contains("***MPLE") && !shown.contains("s3cr3t") && !shown.contains("t0ken"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKeys {
    access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
}

impl AccessKeys {
    /// A key pair, with the session token of temporary credentials.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> AccessKeys {
        AccessKeys {
            access_key_id: access_key_id.into(),
            secret_access_key: Secret::new(secret_access_key),
            session_token: session_token.map(Secret::from),
        }
    }

    /// The access key id (not a secret, but shown only shortened).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The secret access key.
    pub fn secret_access_key(&self) -> &Secret {
        &self.secret_access_key
    }

    /// The session token of temporary credentials.
    pub fn session_token(&self) -> Option<&Secret> {
        self.session_token.as_ref()
    }
}

impl fmt::Debug for AccessKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessKeys")
            .field(
                "access_key_id",
                &crate::store::url::mask_key_id(&self.access_key_id),
            )
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token)
            .finish()
    }
}
