//! What a lease costs in DynamoDB requests, computed from the timing rather
//! than written down, and kinsumer's defaults beside it.
//!
//! A leader writes once per renew interval (the interval counts from when
//! each renewal was sent, so round trips do not stretch it). A waiting
//! candidate reads once per retry interval plus a uniform jitter, counted
//! from each reply; by the renewal theorem its long-run rate is one over the
//! mean period. Neither reads nor writes otherwise while nothing changes: a
//! leader reads only after a renewal conflicted, a candidate writes only to
//! take over.

use std::fmt::{self, Write as _};
use std::time::Duration;

use tenure::Timing;

/// Hours in an average month (8766 h / 12, rounded as AWS bills do).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Requests per hour of one participant in a lease.
#[derive(Clone, Debug, PartialEq)]
pub struct Cost {
    /// What this row describes.
    pub label: String,
    /// Conditional writes of the leader per hour.
    pub leader_writes_per_hour: f64,
    /// Consistent reads of one waiting candidate per hour (long-run mean).
    pub candidate_reads_per_hour: f64,
    /// The fewest and most reads per hour a waiting candidate makes, at
    /// the longest and shortest jittered period.
    pub candidate_reads_range: (f64, f64),
    /// Worst-case time from a leader's crash to the next leader.
    pub crash_failover: Duration,
    /// What the figures assume.
    pub note: String,
}

impl Cost {
    /// The cost of a tenure lease with this timing.
    ///
    /// ```
    /// let timing = tenure::Config::default().validate()?;
    /// let cost = tenure_dynamodb::cost::Cost::tenure(&timing);
    /// assert_eq!(cost.leader_writes_per_hour.round(), 1080.0);
    /// assert_eq!(cost.candidate_reads_per_hour.round(), 1200.0);
    /// # Ok::<(), tenure::ConfigError>(())
    /// ```
    pub fn tenure(timing: &Timing) -> Cost {
        let hour = 3600.0;
        let poll_min = timing.retry_interval.as_secs_f64();
        let poll_max = poll_min + timing.retry_jitter.as_secs_f64();
        let poll_mean = f64::midpoint(poll_min, poll_max);
        Cost {
            label: format!("tenure, term {}", humantime::format_duration(timing.term)),
            leader_writes_per_hour: hour / timing.renew_interval.as_secs_f64(),
            candidate_reads_per_hour: hour / poll_mean,
            candidate_reads_range: (hour / poll_max, hour / poll_min),
            crash_failover: timing.bounds().crash_failover,
            note: format!(
                "renew every {:.3?}; poll every {:.3?} + up to {:.3?} jitter",
                timing.renew_interval, timing.retry_interval, timing.retry_jitter
            ),
        }
    }

    /// kinsumer's leader lease with its `leaderActionFrequency` (one minute
    /// by default).
    ///
    /// Read from kinsumer's `leader.go`, `kinsumer.go` and `config.go`:
    /// only the client first in the clients table campaigns; it calls
    /// `registerLeadership` (one conditional `PutItem`) when it becomes
    /// first and then on every `leaderActionFrequency` tick, whether or not
    /// it holds the lease; a lease is stale after
    /// `maxAgeForLeaderRecord = 5 × leaderActionFrequency`. Every other
    /// client never touches the leader item (0 requests), but keeps its row
    /// in the clients table: one write and one `Scan` of that table per
    /// `shardCheckFrequency` (one minute), which kinsumer needs for shard
    /// assignment anyway and which is not counted here. After a crash the
    /// next client becomes first once the dead client's row is older than
    /// `5 × shardCheckFrequency`, and registers on its next tick: about
    /// five to six minutes, by wall clocks that must agree.
    pub fn kinsumer(leader_action_frequency: Duration) -> Cost {
        let per_hour = 3600.0 / leader_action_frequency.as_secs_f64();
        Cost {
            label: format!(
                "kinsumer, leaderActionFrequency {}",
                humantime::format_duration(leader_action_frequency)
            ),
            leader_writes_per_hour: per_hour,
            candidate_reads_per_hour: 0.0,
            candidate_reads_range: (0.0, 0.0),
            crash_failover: leader_action_frequency * 6,
            note: "only the first client campaigns; others watch the clients table".to_owned(),
        }
    }
}

/// The comparison in the crate docs: tenure at its default term, tenure at
/// kinsumer's lease age (five minutes), and kinsumer's defaults. Each row
/// gives requests per hour and per month; every request is one capacity
/// unit while the item stays under 1 KB (a write) or 4 KB (a consistent
/// read), which it does unless the metadata is large.
///
/// ```
/// println!("{}", tenure_dynamodb::cost::comparison_table());
/// ```
pub fn comparison_table() -> String {
    // Every setting derived from the term, as `Config::new` does; those
    // validate for any term of a few milliseconds or more, so no row is
    // ever dropped here.
    let tenure_rows = [Duration::from_secs(10), Duration::from_secs(300)]
        .into_iter()
        .filter_map(|term| tenure::Config::new(term).validate().ok())
        .map(|timing| Cost::tenure(&timing));
    let mut rows: Vec<Cost> = tenure_rows.collect();
    rows.push(Cost::kinsumer(Duration::from_secs(60)));
    Table(rows).to_string()
}

struct Table(Vec<Cost>);

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| lease | leader writes / h | waiting candidate reads / h | per month (leader writes, candidate reads) | crash failover |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|")?;
        for c in &self.0 {
            let (lo, hi) = c.candidate_reads_range;
            let reads = if hi == 0.0 {
                "0".to_owned()
            } else {
                format!("{:.0} ({lo:.0}–{hi:.0})", c.candidate_reads_per_hour)
            };
            let mut failover = String::new();
            let secs = c.crash_failover.as_secs_f64();
            if secs < 120.0 {
                let _ = write!(failover, "≤ {secs:.1} s");
            } else {
                let _ = write!(failover, "≈ {:.1} min", secs / 60.0);
            }
            writeln!(
                f,
                "| {} | {:.0} | {reads} | {:.0}, {:.0} | {failover} |",
                c.label,
                c.leader_writes_per_hour,
                c.leader_writes_per_hour * HOURS_PER_MONTH,
                c.candidate_reads_per_hour * HOURS_PER_MONTH,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_term_figures() {
        let timing = tenure::Config::default().validate().unwrap();
        let c = Cost::tenure(&timing);
        assert!((c.leader_writes_per_hour - 1080.0).abs() < 1e-6, "{c:?}");
        assert!((c.candidate_reads_per_hour - 1200.0).abs() < 1e-6, "{c:?}");
        assert!((c.candidate_reads_range.0 - 3600.0 / 3.5).abs() < 1e-6);
        assert!((c.candidate_reads_range.1 - 1440.0).abs() < 1e-6);
        let k = Cost::kinsumer(Duration::from_secs(60));
        assert_eq!(k.leader_writes_per_hour, 60.0);
        assert_eq!(k.crash_failover, Duration::from_secs(360));
    }

    #[test]
    fn the_crate_docs_show_the_computed_table() {
        let table = comparison_table();
        eprintln!("{table}");
        let docs: String = include_str!("lib.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .collect::<Vec<_>>()
            .join("\n");
        for line in table.lines() {
            assert!(
                docs.contains(line),
                "the crate docs lack this line of cost::comparison_table(); paste the table again:\n{line}\n\n{table}"
            );
        }
    }
}
