//! Fencing a MySQL or MariaDB table: a trigger that refuses a stale
//! writer, and how to recognise its refusal.
//!
//! The plain recipe needs no helper: every guarded row carries a
//! `fence_token BIGINT UNSIGNED NOT NULL` column, and every write is
//! `UPDATE … SET …, fence_token = ? WHERE … AND fence_token <= ?` with the
//! term's token for both; zero rows matched (the store's connections and
//! the example count matched rows, `CLIENT_FOUND_ROWS`) means a later term
//! has written the row. The trigger from [`trigger_sql`] enforces the same
//! rule for writers that do not add the `WHERE` clause: it refuses an
//! `UPDATE` whose new `fence_token` is below the row's with
//! `SQLSTATE '45000'` and a message [`stale_token`] reads back.
//!
//! Every write must still set `fence_token` to the writer's token: an
//! `UPDATE` that leaves it out keeps the row's token and is admitted, and a
//! `DELETE` carries no token at all (delete through the `WHERE` recipe, or
//! mark rows deleted with an `UPDATE`). Creating a trigger needs the
//! `TRIGGER` privilege (and, with binary logging on, `SUPER` or
//! `log_bin_trust_function_creators`). `docs/fencing.md` in the
//! repository has both recipes and why the checks hold under concurrent
//! writers; `examples/fencing_mysql.rs` runs them.

use tenure::fence::StaleToken;

/// The `MESSAGE_TEXT` the trigger's refusal begins with.
pub const STALE_TOKEN_PREFIX: &str = "tenure: stale fencing token";

/// `CREATE TRIGGER` for `table` (a plain identifier, the caller's own):
/// before each `UPDATE`, a new `fence_token` below the old one fails the
/// statement with `SQLSTATE '45000'` and the message
/// `tenure: stale fencing token N, the row holds M`.
///
/// The row lock the `UPDATE` holds while the trigger runs makes the check
/// and the write one step: a concurrent writer of the same row waits, and
/// its trigger then sees the row as this write left it.
///
/// ```
/// let sql = tenure_mysql::fence::trigger_sql("reports");
/// assert!(sql.starts_with("CREATE TRIGGER `reports_tenure_fence` BEFORE UPDATE ON `reports`"));
/// ```
pub fn trigger_sql(table: &str) -> String {
    format!(
        "CREATE TRIGGER `{table}_tenure_fence` BEFORE UPDATE ON `{table}` FOR EACH ROW \
         BEGIN \
           IF NEW.fence_token < OLD.fence_token THEN \
             SET @tenure_fence_message = CONCAT('{STALE_TOKEN_PREFIX} ', NEW.fence_token, ', the row holds ', OLD.fence_token); \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = @tenure_fence_message; \
           END IF; \
         END"
    )
}

/// The refusal in a statement's error, if the trigger from
/// [`trigger_sql`] raised it; `None` for any other error.
pub fn stale_token(error: &mysql_async::Error) -> Option<StaleToken> {
    let mysql_async::Error::Server(s) = error else {
        return None;
    };
    if s.state != "45000" {
        return None;
    }
    parse_message(&s.message)
}

/// Reads `tenure: stale fencing token N, the row holds M`.
fn parse_message(message: &str) -> Option<StaleToken> {
    let rest = message.strip_prefix(STALE_TOKEN_PREFIX)?.trim_start();
    let (token, highest) = rest.split_once(", the row holds ")?;
    Some(StaleToken {
        token: token.trim().parse().ok()?,
        highest: highest.trim().parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_reads_back_and_anything_else_is_not_a_refusal() {
        assert_eq!(
            parse_message("tenure: stale fencing token 5, the row holds 6"),
            Some(StaleToken {
                token: 5,
                highest: 6
            })
        );
        assert_eq!(parse_message("tenure: stale fencing token 5"), None);
        assert_eq!(
            parse_message("tenure: stale fencing token x, the row holds 6"),
            None
        );
        assert_eq!(parse_message("other"), None);
        assert_eq!(
            parse_message("tenure: stale fencing token -1, the row holds 6"),
            None
        );
    }
}
