//! The lease table: created only when it is missing (with the index that
//! lists by prefix), and resolved to the one schema-qualified name every
//! connection agrees on, from which the notification channel is derived.

use tenure::StoreError;
use tokio_postgres::error::SqlState;
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
    /// Whether the server stores text as UTF-8 (`server_encoding` `UTF8`,
    /// or `SQL_ASCII`, which keeps the client's UTF-8 bytes as they are),
    /// so that byte order is code point order and a listing by prefix can
    /// be a range of the index (see [`crate::batch`]).
    pub(crate) utf8: bool,
    /// Whether the table has an index that serves that range: a valid
    /// b-tree whose first column is `group_name` in the `"C"` collation.
    pub(crate) prefix_index: bool,
}

/// The longest identifier PostgreSQL keeps (NAMEDATALEN − 1): `LISTEN`
/// truncates a longer channel name while `pg_notify` refuses it.
const MAX_IDENTIFIER: usize = 63;

/// The statements that create the lease table `quoted` and its index
/// `index` (see [`index_ddl`]), as the crate documentation shows them.
pub(crate) fn ddl(quoted: &str, index: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {quoted} (
            group_name TEXT PRIMARY KEY,
            version    BIGINT NOT NULL,
            record     BYTEA NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        {}",
        index_ddl(quoted, index, false)
    )
}

/// The index a listing by prefix ranges over: `group_name` in the `"C"`
/// collation, whose order is byte order whatever the database's collation
/// (the primary key's default collation may ignore punctuation and case at
/// first, so a range of it is not "starts with"). `concurrently` for a
/// table already in use: building it then does not block writes.
pub(crate) fn index_ddl(quoted: &str, index: &str, concurrently: bool) -> String {
    let concurrently = if concurrently { " CONCURRENTLY" } else { "" };
    format!(
        "CREATE INDEX{concurrently} IF NOT EXISTS {index} ON {quoted} (group_name COLLATE \"C\")"
    )
}

/// The index's name (quoted) for a table named `table` (unquoted, without
/// its schema): `<table>_group_name_c`, or, if that is too long for an
/// identifier (PostgreSQL would truncate it, maybe to the table's own
/// name), `tenure_` and a hash of the table's name.
pub(crate) fn index_name(table: &str) -> String {
    let readable = format!("{table}_group_name_c");
    let name = if readable.len() <= MAX_IDENTIFIER {
        readable
    } else {
        format!("tenure_{:016x}_group_name_c", fnv1a(table))
    };
    quote(&name)
}

/// `name` as a quoted identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The table's own name in `schema.table` (or `table`).
fn last_part(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The statement an operator runs to add the index to an existing table
/// `schema.table` (as [`Resolved::qualified`] names it).
pub(crate) fn missing_index_ddl(qualified: &str) -> String {
    let (schema, table) = qualified.split_once('.').unwrap_or(("", qualified));
    let quoted = if schema.is_empty() {
        quote(table)
    } else {
        format!("{}.{}", quote(schema), quote(table))
    };
    index_ddl(&quoted, &index_name(table), true)
}

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
    // One implicit transaction: the table never exists without its index.
    let create = ddl(&table.quoted, &index_name(last_part(&table.name)));
    if let Err(e) = client.batch_execute(&create).await {
        // Two first runs racing to create the table: the loser sees a
        // unique violation on the catalog; the table exists either way.
        let code = e.as_db_error().map(|d| d.code().clone());
        let raced = code.as_ref().is_some_and(|c| {
            c == &SqlState::UNIQUE_VIOLATION
                || c == &SqlState::DUPLICATE_TABLE
                || c == &SqlState::DUPLICATE_OBJECT
        });
        if code == Some(SqlState::INSUFFICIENT_PRIVILEGE) {
            // A least-privilege user: say what the owner must run.
            let why = e
                .as_db_error()
                .map_or(String::new(), |d| d.message().to_owned());
            return Err(StoreError::misconfigured(
                format!(
                    "PostgreSQL at {target}: the lease table {} does not exist and this user may not create it ({why}): \
                     have its owner create it once, running\n{create};\n\
                     then grant the user SELECT, INSERT and UPDATE on it (GRANT SELECT, INSERT, UPDATE ON {} TO …), \
                     or grant this user CREATE on the schema",
                    table.name, table.quoted
                ),
                e,
            ));
        }
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
            "SELECT n.nspname::text, c.relname::text,
                current_setting('server_encoding') IN ('UTF8', 'SQL_ASCII'),
                EXISTS (
                    SELECT 1 FROM pg_catalog.pg_index i
                    JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
                    JOIN pg_catalog.pg_am am ON am.oid = ic.relam
                    JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'group_name'
                    JOIN pg_catalog.pg_opclass o ON o.oid = i.indclass[0]
                    WHERE i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL
                      AND am.amname = 'btree' AND i.indkey[0] = a.attnum
                      AND o.opcname = 'text_ops' AND o.opcnamespace = 'pg_catalog'::regnamespace
                      AND i.indcollation[0] = (
                          SELECT co.oid FROM pg_catalog.pg_collation co
                          WHERE co.collname = 'C' AND co.collnamespace = 'pg_catalog'::regnamespace)
                )
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
    let utf8: bool = row
        .try_get(2)
        .map_err(|e| error::classify("looking up the lease table", target, e))?;
    let prefix_index: bool = row
        .try_get(3)
        .map_err(|e| error::classify("looking up the lease table", target, e))?;
    let qualified = format!("{schema}.{name}");
    Ok(Some(Resolved {
        channel: channel_name(&qualified),
        qualified,
        utf8,
        prefix_index,
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
    format!("tenure:{:016x}", fnv1a(qualified))
}

/// The 64-bit FNV-1a hash of `s`'s bytes.
fn fnv1a(s: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
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
        assert_eq!(fnv1a("a"), h);
    }

    #[test]
    fn index_names_fit_an_identifier_and_never_become_the_tables() {
        assert_eq!(
            index_name("tenure_leases"),
            "\"tenure_leases_group_name_c\""
        );
        let long = "x".repeat(63);
        let i = index_name(&long);
        assert!(i.len() <= MAX_IDENTIFIER + 2, "{i}");
        assert_ne!(i, quote(&long));
        assert_eq!(
            missing_index_ddl("ops.tenure"),
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS \"tenure_group_name_c\" ON \"ops\".\"tenure\" (group_name COLLATE \"C\")"
        );
        assert_eq!(last_part("ops.tenure"), "tenure");
        assert!(ddl("\"t\"", &index_name("t")).contains(
            "CREATE INDEX IF NOT EXISTS \"t_group_name_c\" ON \"t\" (group_name COLLATE \"C\")"
        ));
    }
}
