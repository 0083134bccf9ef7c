//! Fencing a PostgreSQL table: a trigger that refuses a stale writer, and
//! how to recognise its refusal.
//!
//! The plain recipe needs no helper: every guarded row carries a
//! `fence_token bigint NOT NULL` column, and every write is
//! `UPDATE … SET …, fence_token = $token WHERE … AND fence_token <= $token`;
//! zero rows updated means a later term has written the row. The trigger
//! below enforces the same rule for writers that do not add the `WHERE`
//! clause: install [`TRIGGER_FUNCTION_SQL`] once per database, then
//!
//! ```sql
//! CREATE TRIGGER reports_fence BEFORE UPDATE ON reports
//!     FOR EACH ROW EXECUTE FUNCTION tenure_refuse_stale_fence_token();
//! ```
//!
//! Every write must still set `fence_token` to the writer's token: an
//! `UPDATE` that leaves it out keeps the row's token and is admitted, and a
//! `DELETE` carries no token at all (delete through the `WHERE` recipe, or
//! mark rows deleted with an `UPDATE`). `docs/fencing.md` in the repository
//! has both recipes, a fence row guarding a whole transaction, and why the
//! checks hold under concurrent writers; `examples/fencing_postgres.rs` runs them.
//!
//! ```no_run
//! use tenure_postgres::fence;
//!
//! # async fn demo(db: &tokio_postgres::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
//! db.batch_execute(fence::TRIGGER_FUNCTION_SQL).await?;
//! let token = i64::try_from(token)?;
//! match db
//!     .execute("UPDATE reports SET body = $1, fence_token = $2 WHERE name = 'daily'", &[&"…", &token])
//!     .await
//! {
//!     Ok(_) => println!("written"),
//!     Err(e) => match fence::stale_token(&e) {
//!         Some(stale) => println!("refused: {stale}"),
//!         None => return Err(e.into()),
//!     },
//! }
//! # Ok(()) }
//! ```

use tenure::fence::StaleToken;

/// The SQLSTATE the trigger raises when it refuses a stale writer
/// (class `TF` is not used by PostgreSQL itself).
pub const STALE_TOKEN_SQLSTATE: &str = "TF001";

/// Creates (or replaces) `tenure_refuse_stale_fence_token()`, a row trigger
/// function for `BEFORE UPDATE` triggers: it raises [`STALE_TOKEN_SQLSTATE`]
/// when the new row's `fence_token` is below the old row's, so the whole
/// statement (and its transaction) fails. The error's detail is
/// `token=N highest=M`, which [`stale_token`] reads back.
///
/// The row lock the `UPDATE` holds while the trigger runs makes the check
/// and the write one step: a concurrent writer of the same row waits, and
/// its trigger then sees the row as this write left it.
pub const TRIGGER_FUNCTION_SQL: &str = r"
CREATE OR REPLACE FUNCTION tenure_refuse_stale_fence_token() RETURNS trigger
LANGUAGE plpgsql AS $tenure_fence$
BEGIN
    IF NEW.fence_token < OLD.fence_token THEN
        RAISE EXCEPTION 'stale fencing token % on table %: the row holds token %, written by a later term; this writer must stop',
                NEW.fence_token, TG_TABLE_NAME, OLD.fence_token
            USING ERRCODE = 'TF001',
                  DETAIL = format('token=%s highest=%s', NEW.fence_token, OLD.fence_token);
    END IF;
    RETURN NEW;
END
$tenure_fence$;
";

/// The refusal in a statement's error, if the trigger from
/// [`TRIGGER_FUNCTION_SQL`] raised it; `None` for any other error.
pub fn stale_token(error: &tokio_postgres::Error) -> Option<StaleToken> {
    let db = error.as_db_error()?;
    if db.code().code() != STALE_TOKEN_SQLSTATE {
        return None;
    }
    parse_detail(db.detail()?)
}

/// Reads `token=N highest=M`.
fn parse_detail(detail: &str) -> Option<StaleToken> {
    let mut token = None;
    let mut highest = None;
    for part in detail.split_whitespace() {
        match part.split_once('=') {
            Some(("token", n)) => token = n.parse().ok(),
            Some(("highest", n)) => highest = n.parse().ok(),
            _ => return None,
        }
    }
    Some(StaleToken {
        token: token?,
        highest: highest?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detail_reads_back_and_anything_else_is_not_a_refusal() {
        assert_eq!(
            parse_detail("token=5 highest=6"),
            Some(StaleToken {
                token: 5,
                highest: 6
            })
        );
        assert_eq!(parse_detail("token=5"), None);
        assert_eq!(parse_detail("token=5 highest=x"), None);
        assert_eq!(parse_detail("token=5 highest=6 extra"), None);
        assert_eq!(parse_detail("token=-1 highest=6"), None);
    }
}
