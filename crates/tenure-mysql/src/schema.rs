//! The lease table: created only when it is missing; for a user who may
//! not create it, a typed error carrying the statement to run.

use mysql_async::prelude::Queryable;
use tenure::StoreError;

use crate::conn::Live;
use crate::error::{classify, code, server_code, MysqlStoreError};
use crate::options::MysqlOptions;
use crate::sql;

/// Checks that the table exists with tenure's columns, creating it first
/// if it does not exist.
///
/// `CREATE TABLE IF NOT EXISTS` is not run when the table is there: it
/// needs `CREATE` even then, which a least-privilege user lacks.
pub(crate) async fn ensure_table(
    live: &mut Live,
    options: &MysqlOptions,
) -> Result<(), MysqlStoreError> {
    let target = options.redacted_url();
    let table = &options.table.quoted;
    let probe = format!("SELECT group_name, version, record FROM {table} LIMIT 0");
    match live.conn.query_drop(&probe).await {
        Ok(()) => return Ok(()),
        Err(e) if server_code(&e) == Some(code::NO_SUCH_TABLE) => {}
        Err(e) => return Err(classify("looking up the lease table", target, e).into()),
    }
    let ddl = sql::create_table(table);
    match live.conn.query_drop(&ddl).await {
        Ok(()) => {}
        Err(e)
            if matches!(
                server_code(&e),
                Some(
                    code::TABLE_ACCESS_DENIED
                        | code::DB_ACCESS_DENIED
                        | code::SPECIFIC_ACCESS_DENIED
                )
            ) =>
        {
            return Err(MysqlStoreError::MissingTable {
                server: options.server(),
                table: options.table.name.clone(),
                ddl: format!("{ddl};"),
            });
        }
        Err(e) => return Err(classify("creating the lease table", target, e).into()),
    }
    live.conn
        .query_drop(&probe)
        .await
        .map_err(|e| -> StoreError { classify("looking up the lease table", target, e) })?;
    Ok(())
}
