//! Metrics through the `metrics` facade; an application (or the `tenure`
//! binary) installs an exporter, then calls [`describe`] so that every
//! series has its `# HELP` (and, for Prometheus, its `# TYPE` from the
//! first sample). Every series of an elector carries a `group` label, and
//! none carries a value that changes on every restart: the candidate id
//! (`hostname-pid-random` by default) is not a label, since each restart
//! would start new series and leave the old ones to go stale; the process
//! is the scrape target (Prometheus's `instance`), and `tenure status`
//! names the holder.
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `tenure_is_leader{group}` | gauge | 1 while this candidate leads |
//! | `tenure_transitions_total{group, kind}` | counter | `elected` / `ousted` |
//! | `tenure_step_downs_total{group, reason}` | counter | why terms ended |
//! | `tenure_renew_latency_seconds{group}` | histogram | renewal round trip; export it with [`RENEW_LATENCY_BUCKETS`] |
//! | `tenure_term_remaining_seconds{group}` | gauge | time left in the term after the last renewal |
//! | `tenure_store_errors_total{group, op}` | counter | failed store operations (`read`, `acquire`, `renew`, `release`) |
//! | `tenure_duty_failures_total{group}` | counter | failed runs of a periodic leader duty |
//!
//! A sharded set that follows a catalog adds, labelled `set` (and
//! `member`):
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `tenure_shard_catalog_unreadable_total{set, member}` | counter | reads of the catalog by this member that failed or found no whole catalog, once it stayed unreadable for two reads in a row |
//! | `tenure_shard_catalog_left_out_total{set}` | counter | shards the catalog leader left out of the catalog (they cannot be published), each counted when first left out |
//!
//! With `metrics-exporter-prometheus`, the renewal latency is a histogram
//! (rather than the exporter's default summary, which cannot be
//! aggregated across processes) once its buckets are set:
//!
//! ```
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//! let builder = PrometheusBuilder::new().set_buckets_for_metric(
//!     Matcher::Full(tenure::metrics::RENEW_LATENCY.to_owned()),
//!     tenure::metrics::RENEW_LATENCY_BUCKETS,
//! )?;
//! let recorder = builder.build_recorder();
//! metrics::with_local_recorder(&recorder, || {
//!     tenure::metrics::describe();
//!     // A renewal, as an elector records it.
//!     metrics::histogram!(tenure::metrics::RENEW_LATENCY, "group" => "g").record(0.004);
//! });
//! let text = recorder.handle().render();
//! assert!(text.contains("# HELP tenure_renew_latency_seconds"));
//! assert!(text.contains("# TYPE tenure_renew_latency_seconds histogram"));
//! # Ok::<(), metrics_exporter_prometheus::BuildError>(())
//! ```

use std::time::Duration;

use crate::machine::EndReason;
use crate::record::GroupName;

/// The name of the renewal latency histogram.
pub const RENEW_LATENCY: &str = "tenure_renew_latency_seconds";

/// Bucket bounds (seconds) for [`RENEW_LATENCY`]: 1 ms to 10 s, as a
/// store's round trip ranges from a LAN to a retried cloud call.
pub const RENEW_LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Describes every series tenure records (`# HELP` text and unit) to the
/// installed recorder. Call it once after installing the recorder (the
/// `tenure` binary does); without it the series still count, without help.
///
/// Install the recorder before starting electors: a term's renewal series
/// (latency, time remaining) are registered with the recorder installed
/// when the term begins and again every 16 renewals, so a recorder
/// installed during a term sees them within 16 renewals (every other
/// series from the next event on).
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_gauge!(
        "tenure_is_leader",
        "1 while this process leads the group, else 0"
    );
    describe_counter!(
        "tenure_transitions_total",
        "Changes of this process's role in the group: kind=elected or ousted"
    );
    describe_counter!(
        "tenure_step_downs_total",
        "Terms of this process that ended, by reason"
    );
    describe_histogram!(
        RENEW_LATENCY,
        Unit::Seconds,
        "Round trip of each successful renewal of the lease"
    );
    describe_gauge!(
        "tenure_term_remaining_seconds",
        Unit::Seconds,
        "Time left in this process's term after its last renewal (0 when not leading)"
    );
    describe_counter!(
        "tenure_store_errors_total",
        "Failed store operations, by op (read, acquire, renew, release)"
    );
    describe_counter!(
        "tenure_duty_failures_total",
        "Failed runs of a periodic leader duty"
    );
    describe_counter!(
        "tenure_shard_catalog_unreadable_total",
        "Reads of a sharded set's catalog by this member that failed or found no whole catalog"
    );
    describe_counter!(
        "tenure_shard_catalog_left_out_total",
        "Shards the catalog leader left out of the catalog because they cannot be published"
    );
}

/// The labels of one candidate's series: its group only (see the module).
pub(crate) struct Meter {
    labels: [(&'static str, String); 1],
    /// The series a renewal records, registered when the term began: a
    /// renewal is the engine's most frequent event, and naming a series
    /// (its labels copied, its key hashed and looked up) cost more than
    /// anything else the engine does per renewal. Registered again every
    /// [`RENEWALS_PER_REGISTRATION`] renewals.
    renewal: Option<RenewalSeries>,
}

/// How many renewals record on one registration of their series before
/// it is made again: a recorder installed during a term (a library user
/// may install one late) is found within this many renewals, at a
/// sixteenth of the cost of naming the series every time.
const RENEWALS_PER_REGISTRATION: u32 = 16;

/// See [`Meter::renewal`].
struct RenewalSeries {
    latency: metrics::Histogram,
    remaining: metrics::Gauge,
    /// Renewals recorded since the series were registered.
    recorded: u32,
}

impl RenewalSeries {
    fn register(labels: &[(&'static str, String); 1]) -> Self {
        RenewalSeries {
            latency: metrics::histogram!(RENEW_LATENCY, labels),
            remaining: metrics::gauge!("tenure_term_remaining_seconds", labels),
            recorded: 0,
        }
    }
}

impl Meter {
    pub(crate) fn new(group: &GroupName) -> Self {
        let meter = Meter {
            labels: [("group", group.to_string())],
            renewal: None,
        };
        metrics::gauge!("tenure_is_leader", &meter.labels).set(0.0);
        meter
    }

    /// A term began: the renewals' series are registered with the recorder
    /// installed now, for the term's life.
    pub(crate) fn elected(&mut self, remaining: Duration) {
        metrics::gauge!("tenure_is_leader", &self.labels).set(1.0);
        let series = RenewalSeries::register(&self.labels);
        series.remaining.set(remaining.as_secs_f64());
        self.renewal = Some(series);
        let mut labels = self.labels.to_vec();
        labels.push(("kind", "elected".into()));
        metrics::counter!("tenure_transitions_total", &labels).increment(1);
    }

    pub(crate) fn renewed(&mut self, latency: Duration, remaining: Duration) {
        let Some(series) = &mut self.renewal else {
            return;
        };
        if series.recorded >= RENEWALS_PER_REGISTRATION {
            *series = RenewalSeries::register(&self.labels);
        }
        series.recorded += 1;
        series.latency.record(latency.as_secs_f64());
        series.remaining.set(remaining.as_secs_f64());
    }

    pub(crate) fn ended(&mut self, reason: &EndReason) {
        self.renewal = None;
        metrics::gauge!("tenure_is_leader", &self.labels).set(0.0);
        metrics::gauge!("tenure_term_remaining_seconds", &self.labels).set(0.0);
        let mut labels = self.labels.to_vec();
        labels.push(("kind", "ousted".into()));
        metrics::counter!("tenure_transitions_total", &labels).increment(1);
        let mut labels = self.labels.to_vec();
        labels.push(("reason", reason.label().into()));
        metrics::counter!("tenure_step_downs_total", &labels).increment(1);
    }

    pub(crate) fn store_error(&self, op: &'static str) {
        let mut labels = self.labels.to_vec();
        labels.push(("op", op.into()));
        metrics::counter!("tenure_store_errors_total", &labels).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorder installed while a term runs sees its renewals within
    /// [`RENEWALS_PER_REGISTRATION`] of them, though the term's series
    /// were first registered with none installed.
    #[test]
    fn a_recorder_installed_during_a_term_sees_its_renewals(
    ) -> Result<(), crate::error::ConfigError> {
        let group = GroupName::new("late-recorder")?;
        let mut meter = Meter::new(&group);
        meter.elected(Duration::from_secs(10));
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..=RENEWALS_PER_REGISTRATION {
                meter.renewed(Duration::from_millis(4), Duration::from_secs(9));
            }
        });
        let text = handle.render();
        assert!(
            text.contains("tenure_term_remaining_seconds{group=\"late-recorder\"} 9"),
            "{text}"
        );
        assert!(text.contains(RENEW_LATENCY), "{text}");
        Ok(())
    }
}
