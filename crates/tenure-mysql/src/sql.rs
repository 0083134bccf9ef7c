//! The statements, and reading their answers without trusting the table's
//! contents.
//!
//! Single operations are prepared statements (the binary protocol).
//! Batches are multi-statement requests in the text protocol, every value
//! in them a hexadecimal literal (`X'…'`) or a number the store formatted
//! itself: nothing from a caller or the table is ever spliced into SQL as
//! text.

use mysql_async::Value;

/// The server's clock in microseconds since the epoch (the session's time
/// zone is UTC): the least version a write gives a row.
pub(crate) const CLOCK: &str = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)";

/// The version a write gives a row whose version is `version`: one more,
/// or the server's clock if that is higher. Wrapped in `LAST_INSERT_ID()`
/// so the server reports it in the statement's reply, with no read after.
pub(crate) fn next_version() -> String {
    format!("LAST_INSERT_ID(GREATEST(version + 1, {CLOCK}))")
}

/// The highest version tenure writes or expects: versions are the server's
/// clock in microseconds (about 2^50 today), so anything above this was
/// put there by hand.
pub(crate) const MAX_VERSION: u64 = i64::MAX as u64 - 1;

/// `CREATE TABLE` for the lease table (`table` already quoted).
pub(crate) fn create_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
             group_name VARBINARY(255)  NOT NULL,\n    \
             version    BIGINT UNSIGNED NOT NULL,\n    \
             record     LONGBLOB        NOT NULL,\n    \
             PRIMARY KEY (group_name),\n    \
             KEY tenure_version (version)\n\
         ) ENGINE = InnoDB"
    )
}

/// A hexadecimal literal for `bytes`.
#[cfg(test)]
fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + 3);
    push_hex(&mut s, bytes);
    s
}

/// Appends a hexadecimal literal for `bytes` to `s` (a table lookup per
/// byte: a batch's request holds every record in hex).
pub(crate) fn push_hex(s: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    s.reserve(bytes.len() * 2 + 3);
    s.push_str("X'");
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xF)]));
    }
    s.push('\'');
}

/// `(X'…', X'…', …)` for an `IN` list of group names.
pub(crate) fn in_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut s = String::from("(");
    for (i, n) in names.enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        push_hex(&mut s, n.as_bytes());
    }
    s.push(')');
    s
}

/// A column's value as an unsigned number (the text protocol sends
/// numbers as text); `None` for NULL or anything else.
pub(crate) fn as_u64(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::UInt(n) => Some(*n),
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A column's value as bytes; `None` for NULL or a non-string value.
pub(crate) fn as_bytes(v: Option<Value>) -> Option<Vec<u8>> {
    match v? {
        Value::Bytes(b) => Some(b),
        _ => None,
    }
}

/// A row's values, however many it has.
pub(crate) fn values(row: mysql_async::Row) -> Vec<Option<Value>> {
    row.unwrap_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_hex_only() {
        assert_eq!(hex(b""), "X''");
        assert_eq!(hex(b"a'\\\0"), "X'61275C00'");
        assert_eq!(in_list(["a", "b"].into_iter()), "(X'61', X'62')");
    }

    #[test]
    fn values_read_from_either_protocol() {
        assert_eq!(as_u64(Some(&Value::Bytes(b"42".to_vec()))), Some(42));
        assert_eq!(as_u64(Some(&Value::UInt(7))), Some(7));
        assert_eq!(as_u64(Some(&Value::Int(-1))), None);
        assert_eq!(as_u64(Some(&Value::Bytes(b"-1".to_vec()))), None);
        assert_eq!(as_u64(Some(&Value::Bytes(b"x".to_vec()))), None);
        assert_eq!(as_u64(Some(&Value::NULL)), None);
        assert_eq!(as_u64(None), None);
        assert_eq!(as_bytes(Some(Value::NULL)), None);
        assert_eq!(as_bytes(Some(Value::Bytes(vec![1]))), Some(vec![1]));
    }
}
