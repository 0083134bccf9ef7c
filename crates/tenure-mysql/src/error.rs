//! MySQL and MariaDB errors, told apart into what retrying can fix and
//! what an operator must fix, each with a message naming the fix.

use tenure::error::BoxError;
use tenure::StoreError;

/// Why the MySQL store could not connect: a malformed URL, an unusable TLS
/// file, a lease table that is missing for a user who may not create it
/// (with the statement to run), or what connecting met, worded as the
/// operations word it (credentials, the database, the grants, the table's
/// layout, TLS, the server unreachable), naming the server (never the
/// password) and the fix.
///
/// [`MysqlStore::connect`](crate::MysqlStore::connect) and
/// [`MysqlOptions::from_url`](crate::MysqlOptions::from_url) return it; the
/// [`LeaseStore`](tenure::LeaseStore) operations return [`StoreError`]s.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MysqlStoreError {
    /// The URL, an option or a name in it is malformed.
    #[error("bad MySQL URL {url}: {reason}")]
    InvalidUrl {
        /// The URL, without secrets.
        url: String,
        /// What is wrong and how to write it instead.
        reason: String,
    },
    /// A TLS file the URL names (`ca`, `cert`, `key`) cannot be read or
    /// does not hold what its option says.
    #[error(transparent)]
    TlsFile(#[from] tenure::store::tls::PemError),
    /// The lease table does not exist and this user may not create it:
    /// let its owner run `ddl` once, then grant the user
    /// `SELECT, INSERT, UPDATE` on it.
    #[error(
        "MySQL at {server}: the lease table {table} does not exist and this user may not create it; \
         have an administrator run once:\n{ddl}\nGRANT SELECT, INSERT, UPDATE ON {table} TO <this user>;"
    )]
    MissingTable {
        /// The server, `host:port`.
        server: String,
        /// The table, as the URL names it (in the URL's database).
        table: String,
        /// The `CREATE TABLE` statement to run.
        ddl: String,
    },
    /// Connecting failed as an operation would: the message names the
    /// fix.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl MysqlStoreError {
    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        match self {
            MysqlStoreError::Store(e) => e.is_transient(),
            MysqlStoreError::InvalidUrl { .. }
            | MysqlStoreError::TlsFile(_)
            | MysqlStoreError::MissingTable { .. } => false,
        }
    }
}

impl tenure::error::BackendError for MysqlStoreError {
    fn is_transient(&self) -> bool {
        MysqlStoreError::is_transient(self)
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            MysqlStoreError::TlsFile(e) => Some(Box::new(e)),
            MysqlStoreError::InvalidUrl { .. }
            | MysqlStoreError::MissingTable { .. }
            | MysqlStoreError::Store(_) => None,
        }
    }

    fn into_store_error(self) -> Result<StoreError, Self> {
        match self {
            MysqlStoreError::Store(e) => Ok(e),
            other => Err(other),
        }
    }
}

impl From<MysqlStoreError> for StoreError {
    fn from(e: MysqlStoreError) -> Self {
        StoreError::from_backend(e)
    }
}

/// Server error codes the store tells apart.
pub(crate) mod code {
    /// `ER_DBACCESS_DENIED_ERROR`: no rights on the database.
    pub(crate) const DB_ACCESS_DENIED: u16 = 1044;
    /// `ER_ACCESS_DENIED_ERROR`: wrong user or password.
    pub(crate) const ACCESS_DENIED: u16 = 1045;
    /// `ER_BAD_DB_ERROR`: no such database.
    pub(crate) const BAD_DB: u16 = 1049;
    /// `ER_BAD_FIELD_ERROR`: no such column.
    pub(crate) const BAD_FIELD: u16 = 1054;
    /// `ER_DUP_ENTRY`: a duplicate key.
    pub(crate) const DUP_ENTRY: u16 = 1062;
    /// `ER_TABLEACCESS_DENIED_ERROR`: a command denied on the table.
    pub(crate) const TABLE_ACCESS_DENIED: u16 = 1142;
    /// `ER_COLUMNACCESS_DENIED_ERROR`.
    pub(crate) const COLUMN_ACCESS_DENIED: u16 = 1143;
    /// `ER_NO_SUCH_TABLE`.
    pub(crate) const NO_SUCH_TABLE: u16 = 1146;
    /// `ER_LOCK_WAIT_TIMEOUT`: the statement waited `innodb_lock_wait_timeout`
    /// for a row lock and was rolled back.
    pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// `ER_LOCK_DEADLOCK`: the transaction was rolled back.
    pub(crate) const DEADLOCK: u16 = 1213;
    /// `ER_SPECIFIC_ACCESS_DENIED_ERROR`.
    pub(crate) const SPECIFIC_ACCESS_DENIED: u16 = 1227;
    /// `ER_OPTION_PREVENTS_STATEMENT` (`--read-only`).
    pub(crate) const READ_ONLY: u16 = 1290;
    /// `ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION`.
    pub(crate) const READ_ONLY_TRANSACTION: u16 = 1792;
    /// MariaDB's `ER_STATEMENT_TIMEOUT` (`max_statement_time`).
    pub(crate) const MARIADB_STATEMENT_TIMEOUT: u16 = 1969;
    /// MySQL's `ER_QUERY_TIMEOUT` (`max_execution_time`).
    pub(crate) const MYSQL_QUERY_TIMEOUT: u16 = 3024;
    /// `ER_QUERY_INTERRUPTED`.
    pub(crate) const QUERY_INTERRUPTED: u16 = 1317;
    /// `ER_BINLOG_STMT_MODE_AND_ROW_ENGINE`: statement-based binary logging
    /// refuses every write of a `READ COMMITTED` session on InnoDB.
    pub(crate) const BINLOG_STATEMENT_FORMAT: u16 = 1665;
    /// `ER_WRONG_VALUE_COUNT_ON_ROW`, `ER_TRUNCATED_WRONG_VALUE_FOR_FIELD`,
    /// `ER_DATA_TOO_LONG`, `ER_WARN_DATA_OUT_OF_RANGE`: a table whose
    /// columns cannot hold what tenure writes.
    pub(crate) const LAYOUT: [u16; 4] = [1136, 1366, 1406, 1264];
}

/// The server's error code, if `e` is a server error.
pub(crate) fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// A failure of `what` (an operation) on the server `target` (redacted
/// URL), as a [`StoreError`] naming the fix.
pub(crate) fn classify(what: &str, target: &str, e: mysql_async::Error) -> StoreError {
    if let mysql_async::Error::Server(s) = &e {
        let message = s.message.clone();
        let fix = match s.code {
            code::ACCESS_DENIED => Some(
                "authentication failed: check the user and password in the store URL".to_owned(),
            ),
            code::BAD_DB => Some(format!(
                "{message}: create the database or fix the name in the store URL"
            )),
            code::DB_ACCESS_DENIED
            | code::TABLE_ACCESS_DENIED
            | code::COLUMN_ACCESS_DENIED
            | code::SPECIFIC_ACCESS_DENIED => Some(format!(
                "{message}: grant the user SELECT, INSERT and UPDATE on the lease table; if the table \
                 does not exist yet, have its owner create it once (or grant CREATE on the database)"
            )),
            code::BAD_FIELD | code::NO_SUCH_TABLE => Some(format!(
                "{message}: the lease table does not have tenure's layout; choose another table with \
                 ?table= or fix it"
            )),
            c if code::LAYOUT.contains(&c) => Some(format!(
                "{message}: the lease table does not have tenure's layout; choose another table with \
                 ?table= or fix it"
            )),
            code::BINLOG_STATEMENT_FORMAT => Some(format!(
                "{message}: the server logs statements (binlog_format=STATEMENT), which refuses the \
                 writes of the READ COMMITTED sessions the store runs; set binlog_format to ROW or \
                 MIXED on the server"
            )),
            code::READ_ONLY | code::READ_ONLY_TRANSACTION => Some(format!(
                "{message}: the server is read-only (a replica?): point the URL at the primary"
            )),
            code::LOCK_WAIT_TIMEOUT | code::DEADLOCK => {
                // The statement (or the transaction) was rolled back whole:
                // nothing was written.
                return StoreError::busy(format!(
                    "MySQL at {target}: {what} found a lease row locked by another session \
                     ({message}; an open transaction? look in information_schema.innodb_trx and end it)"
                ));
            }
            code::MARIADB_STATEMENT_TIMEOUT
            | code::MYSQL_QUERY_TIMEOUT
            | code::QUERY_INTERRUPTED => {
                return StoreError::unavailable(
                    format!(
                        "MySQL at {target}: {what} ran longer than the statement time the store sets \
                         (below its timeout=) and was interrupted"
                    ),
                    e,
                );
            }
            _ => None,
        };
        if let Some(fix) = fix {
            return StoreError::misconfigured(format!("MySQL at {target}: {fix}"), e);
        }
    }
    if let mysql_async::Error::Io(mysql_async::IoError::Tls(_)) = &e {
        let text = e.to_string();
        return StoreError::misconfigured(
            format!(
                "MySQL at {target}: TLS failed ({text}): check tls= and the ca file in the store URL, \
                 and that the server has TLS on"
            ),
            e,
        );
    }
    let text = e.to_string();
    let lower = text.to_lowercase();
    if matches!(e, mysql_async::Error::Driver(_))
        && (lower.contains("tls") || lower.contains("ssl"))
    {
        return StoreError::misconfigured(
            format!(
                "MySQL at {target}: TLS failed ({text}): check tls= and the ca file in the store URL, \
                 and that the server has TLS on"
            ),
            e,
        );
    }
    StoreError::unavailable(format!("MySQL at {target}: {what} failed: {text}"), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that logs statements refuses every write of the store's
    /// sessions (seen on MariaDB 10.11 started with --log-bin
    /// --binlog-format=STATEMENT): an operator's fix, named, not an outage
    /// of unknown outcome retried for ever.
    #[test]
    fn statement_binary_logging_is_misconfiguration_naming_the_fix() {
        let e = mysql_async::Error::Server(mysql_async::ServerError {
            code: 1665,
            message: "Cannot execute statement: impossible to write to binary log since \
                      BINLOG_FORMAT = STATEMENT and at least one table uses a storage engine \
                      limited to row-based logging."
                .into(),
            state: "HY000".into(),
        });
        let e = classify("compare-and-swap", "mysql://app:***@db/app", e);
        assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
        assert!(!e.is_transient(), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("binlog_format to ROW or MIXED"), "{text}");
    }
}
