//! The lease table: created only when it is missing, and resolved to the
//! one schema-qualified name every connection agrees on, from which the
//! notification channel is derived.

use tenure::StoreError;
use tokio_postgres::Client;

use crate::error;
use crate::options::Table;

/// The table as the server resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// `schema.table`, as the catalog names it.
    pub(crate) qualified: String,
    /// The channel every write to the table notifies.
    pub(crate) channel: String,
}

/// The longest identifier PostgreSQL keeps (NAMEDATALEN − 1): `LISTEN`
/// truncates a longer channel name while `pg_notify` refuses it.
const MAX_IDENTIFIER: usize = 63;

/// Resolves the table, creating it first if it does not exist.
///
/// `CREATE TABLE IF NOT EXISTS` is not run when the table is there: it
/// needs `CREATE` on the schema even then (PostgreSQL checks that first),
/// which a least-privilege user with only `SELECT, INSERT, UPDATE` on the
/// table lacks, and it sends a notice on every connect.
pub(crate) async fn ensure_table(
    client: &Client,
    table: &Table,
    target: &str,
) -> Result<Resolved, StoreError> {
    if let Some(found) = resolve(client, table, target).await? {
        return Ok(found);
    }
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {} (
            group_name TEXT PRIMARY KEY,
            version    BIGINT NOT NULL,
            record     BYTEA NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
        table.quoted
    );
    if let Err(e) = client.batch_execute(&create).await {
        // Two first runs racing to create the table: the loser sees a
        // unique violation on the catalog; the table exists either way.
        let raced = e.as_db_error().is_some_and(|d| {
            d.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                || d.code() == &tokio_postgres::error::SqlState::DUPLICATE_TABLE
        });
        if !raced {
            return Err(error::classify("creating the lease table", target, e));
        }
    }
    resolve(client, table, target).await?.ok_or_else(|| {
        StoreError::misconfigured(
            format!(
                "PostgreSQL at {target}: the lease table {} cannot be found right after creating it: check search_path",
                table.name
            ),
            std::io::Error::other("table not found"),
        )
    })
}

/// The table's schema-qualified name, if it exists.
async fn resolve(
    client: &Client,
    table: &Table,
    target: &str,
) -> Result<Option<Resolved>, StoreError> {
    let row = client
        .query_opt(
            "SELECT n.nspname::text, c.relname::text
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = to_regclass($1)",
            &[&table.quoted],
        )
        .await
        .map_err(|e| error::classify("looking up the lease table", target, e))?;
    let Some(row) = row else { return Ok(None) };
    let schema: String = row
        .try_get(0)
        .map_err(|e| error::classify("looking up the lease table", target, e))?;
    let name: String = row
        .try_get(1)
        .map_err(|e| error::classify("looking up the lease table", target, e))?;
    let qualified = format!("{schema}.{name}");
    Ok(Some(Resolved {
        channel: channel_name(&qualified),
        qualified,
    }))
}

/// `tenure:<schema>.<table>`, or for names too long for an identifier,
/// `tenure:` and a 64-bit FNV-1a hash of them: the same for every process
/// whatever name (`t`, `public.t`) it was given, and always a valid channel.
pub(crate) fn channel_name(qualified: &str) -> String {
    let readable = format!("tenure:{qualified}");
    if readable.len() <= MAX_IDENTIFIER {
        return readable;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in qualified.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("tenure:{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_short_and_stable() {
        assert_eq!(channel_name("public.t"), "tenure:public.t");
        let long = format!("public.{}", "x".repeat(63));
        let c = channel_name(&long);
        assert!(c.len() <= MAX_IDENTIFIER, "{c}");
        assert_eq!(c, channel_name(&long), "deterministic");
        assert_ne!(c, channel_name(&format!("public.{}", "y".repeat(63))));
        // The FNV-1a test vector, so the hash never silently changes.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in b"a" {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        assert_eq!(h, 0xaf63_dc4c_8601_ec8c);
    }
}
