//! PostgreSQL errors, told apart into what retrying can fix and what an
//! operator must fix, each with a message naming the fix.

use tenure::StoreError;
use tokio_postgres::error::SqlState;

/// Why the PostgreSQL store could not connect: a malformed URL
/// ([`InvalidUrl`](tenure::error::ConnectError::InvalidUrl)), an unusable
/// CA file (`ca=`, or libpq's `sslrootcert=`), or what connecting met,
/// worded as the operations word it (credentials, the database, the
/// grants, the lease table's layout, TLS, the server unreachable), naming
/// the server (never the password) and the fix.
///
/// [`PostgresStore::connect`](crate::PostgresStore::connect) and
/// [`PostgresOptions::from_url`](crate::PostgresOptions::from_url) return
/// it; the [`LeaseStore`](tenure::LeaseStore) operations return
/// [`StoreError`]s.
pub type PostgresStoreError = tenure::error::ConnectError;

pub(crate) fn classify(what: &str, target: &str, e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().clone();
        let fix = if code == SqlState::INVALID_PASSWORD
            || code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            Some("authentication failed: check the user and password in the store URL".to_owned())
        } else if code == SqlState::INVALID_CATALOG_NAME {
            Some(format!(
                "{}: create the database or fix the name in the store URL",
                db.message()
            ))
        } else if code == SqlState::INSUFFICIENT_PRIVILEGE {
            Some(format!(
                "{}: grant the user SELECT, INSERT and UPDATE on the lease table; if the table does not exist yet, have its owner create it once (or grant CREATE on the schema)",
                db.message()
            ))
        } else if code == SqlState::UNDEFINED_COLUMN
            || code == SqlState::DATATYPE_MISMATCH
            || code == SqlState::UNDEFINED_TABLE
        {
            Some(format!(
                "{}: the lease table does not have tenure's layout; choose another table with ?table= or fix it",
                db.message()
            ))
        } else if code == SqlState::LOCK_NOT_AVAILABLE {
            // The statement failed whole, so nothing was written: busy,
            // not unknown. The lock holder may finish; say who to look for.
            return StoreError::busy(format!(
                "PostgreSQL at {target}: {what} found the lease row locked by another session \
                 (an open transaction? look in pg_locks and pg_stat_activity, and end it)"
            ));
        } else if code == SqlState::QUERY_CANCELED {
            return StoreError::unavailable(
                format!(
                    "PostgreSQL at {target}: {what} ran longer than statement_timeout (the store's timeout=) and was cancelled"
                ),
                e,
            );
        } else if code == SqlState::READ_ONLY_SQL_TRANSACTION {
            Some("the server is read-only (a standby?): point the URL at the primary".to_owned())
        } else {
            None
        };
        if let Some(message) = fix {
            return StoreError::misconfigured(format!("PostgreSQL at {target}: {message}"), e);
        }
    }
    let text = e.to_string();
    let lower = text.to_lowercase();
    if lower.contains("tls") || lower.contains("ssl") || lower.contains("certificate") {
        return StoreError::misconfigured(
            format!("PostgreSQL at {target}: TLS failed ({text}): check sslmode and ca (libpq's sslrootcert) in the store URL"),
            e,
        );
    }
    StoreError::unavailable(format!("PostgreSQL at {target}: {what} failed: {text}"), e)
}
