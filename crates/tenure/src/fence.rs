//! Fencing at the resource: the rule a resource applies to the token a
//! writer brings, and the refusal it answers a stale writer with.
//!
//! A [`Term`](crate::Term) ends at its deadline, but a leader that was
//! paused (a GC pause, `SIGSTOP`, a swapped-out VM) does not know that yet
//! when it wakes: a write it had in flight can reach the resource after the
//! next leader's. Only the resource can tell, and only if every write
//! carries the writer's [`token`](crate::Term::token) and the resource keeps
//! the highest token it has admitted, in the same atomic step as the write.
//!
//! The recipes (a PostgreSQL row or trigger, a Redis script, an etcd
//! transaction, an S3 conditional write, a file under a lock) are in
//! `docs/fencing.md`, each with an example run against the real server;
//! the PostgreSQL, Redis and etcd crates carry their small helpers
//! (`tenure_postgres::fence`, `tenure_redis::fence`, `tenure_etcd::fence`).
//! [`check`] is the rule they all apply, for resources whose compare runs
//! in the application (under a lock or before a conditional write).

/// A write refused because the resource has already admitted a higher
/// fencing token: a later term has begun, so this writer's term is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {token}: the resource has already admitted token {highest}, so a later term has begun; this writer's term is over and it must stop writing")]
pub struct StaleToken {
    /// The token the refused writer brought.
    pub token: u64,
    /// The highest token the resource had admitted.
    pub highest: u64,
}

/// The fencing rule: admit `token` unless the resource has already admitted
/// a higher one. An equal token is the same term writing again and is
/// admitted; `None` (a resource never written with a token) admits any.
///
/// The check and the write that records `token` as the new highest must be
/// one atomic step (a lock held across both, or a conditional write that
/// fails if the resource changed since it was read); otherwise two writers
/// can both pass the check.
///
/// ```
/// use tenure::fence::{check, StaleToken};
///
/// assert_eq!(check(None, 1), Ok(()));
/// assert_eq!(check(Some(7), 7), Ok(()));
/// assert_eq!(check(Some(7), 8), Ok(()));
/// assert_eq!(check(Some(8), 7), Err(StaleToken { token: 7, highest: 8 }));
/// ```
pub fn check(highest: Option<u64>, token: u64) -> Result<(), StaleToken> {
    match highest {
        Some(highest) if highest > token => Err(StaleToken { token, highest }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lower_token_is_refused() {
        assert_eq!(check(None, 1), Ok(()));
        assert_eq!(check(Some(0), 1), Ok(()));
        assert_eq!(check(Some(5), 5), Ok(()));
        assert_eq!(check(Some(5), 6), Ok(()));
        assert_eq!(check(Some(u64::MAX), u64::MAX), Ok(()));
        assert_eq!(
            check(Some(6), 5),
            Err(StaleToken {
                token: 5,
                highest: 6
            })
        );
        assert_eq!(
            check(Some(u64::MAX), u64::MAX - 1),
            Err(StaleToken {
                token: u64::MAX - 1,
                highest: u64::MAX
            })
        );
    }

    #[test]
    fn the_refusal_names_both_tokens_and_what_to_do() {
        let text = StaleToken {
            token: 41,
            highest: 42,
        }
        .to_string();
        assert!(text.contains("41"), "{text}");
        assert!(text.contains("42"), "{text}");
        assert!(text.contains("must stop writing"), "{text}");
    }
}
