//! The loop tenure is measured against, and the server's CPU time: what
//! `tenure bench --renewal-cost` compares the engine with. Not for
//! production: the baseline has no fencing token, no change feed, no
//! deadline and no safety argument.
//!
//! [`NaiveLoop`] is what a user would write instead of tenure to hold many
//! leases on Redis: one tokio task per lease, a compare-and-set Lua script
//! (`GET`, then `SET … PX term` if the key is free or still ours) every
//! third of the term, over one multiplexed connection.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

use crate::conn::{ctx, open};
use crate::error::RedisStoreError;
use crate::options::RedisOptions;

/// The naive compare-and-set: take the key if it is free or ours, for
/// `ARGV[2]` milliseconds. Replies 1 if held, 0 if someone else holds it.
static NAIVE_CAS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
",
    )
});

/// Leases held by one task each (see the module docs). Dropping it stops
/// every task; the keys expire by themselves.
#[derive(Debug)]
pub struct NaiveLoop {
    tasks: JoinSet<()>,
    renewals: Arc<AtomicU64>,
    held: Arc<AtomicUsize>,
}

impl NaiveLoop {
    /// Starts one task per key `{key_prefix}{i}`, `i` in `0..n`, each taking
    /// and keeping its key as `owner` for `term`, on one connection to the
    /// Redis at `url` (the URL's `prefix` option is not used).
    pub async fn start(
        url: &str,
        key_prefix: &str,
        owner: &str,
        n: usize,
        term: Duration,
    ) -> Result<NaiveLoop, RedisStoreError> {
        let conn = connect(url).await?;
        let renewals = Arc::new(AtomicU64::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        let ttl_ms = u64::try_from(term.as_millis()).unwrap_or(u64::MAX).max(1);
        let every = term / 3;
        for i in 0..n {
            let (mut conn, renewals, held) = (conn.clone(), renewals.clone(), held.clone());
            let key = format!("{key_prefix}{i}");
            let owner = owner.to_owned();
            tasks.spawn(async move {
                let mut holding = false;
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let reply: Result<i64, _> = NAIVE_CAS
                        .key(&key)
                        .arg(&owner)
                        .arg(ttl_ms)
                        .invoke_async(&mut conn)
                        .await;
                    let now = matches!(reply, Ok(1));
                    if holding {
                        renewals.fetch_add(1, Ordering::Relaxed);
                    }
                    if now != holding {
                        if now {
                            held.fetch_add(1, Ordering::Relaxed);
                        } else {
                            held.fetch_sub(1, Ordering::Relaxed);
                        }
                        holding = now;
                    }
                }
            });
        }
        Ok(NaiveLoop {
            tasks,
            renewals,
            held,
        })
    }

    /// Renewals sent so far by tasks that held their key.
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    /// Keys held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Stops every task.
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

async fn connect(url: &str) -> Result<MultiplexedConnection, RedisStoreError> {
    let options = RedisOptions::from_url(url)?;
    let client = crate::store::client(&options, redis::ProtocolVersion::RESP2)?;
    open(
        &client,
        &options,
        None::<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    )
    .await
}

/// The CPU time the Redis server at `url` has used so far, user and system
/// (`INFO cpu`: `used_cpu_sys` + `used_cpu_user`, every thread of it).
pub async fn server_cpu(url: &str) -> Result<Duration, RedisStoreError> {
    let options = RedisOptions::from_url(url)?;
    let mut conn = connect(url).await?;
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut conn)
        .await
        .map_err(|e| ctx(&options).classify("INFO cpu", e))?;
    Ok(parse_cpu(&info))
}

/// `used_cpu_sys` + `used_cpu_user` of an `INFO cpu` reply (0 for a field
/// missing or not a number).
fn parse_cpu(info: &str) -> Duration {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .unwrap_or(0.0)
    };
    Duration::try_from_secs_f64(field("used_cpu_sys") + field("used_cpu_user"))
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_read_from_info_and_nonsense_is_zero() {
        let info = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.0\r\n";
        assert_eq!(parse_cpu(info), Duration::from_millis(3750));
        assert_eq!(
            parse_cpu("used_cpu_sys:-1\r\nused_cpu_user:x"),
            Duration::ZERO
        );
        assert_eq!(parse_cpu("used_cpu_sys:1e400"), Duration::ZERO);
    }
}
