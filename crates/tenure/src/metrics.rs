//! Metrics through the `metrics` facade; an application (or the `tenure`
//! binary) installs an exporter. Every series carries `group` and
//! `candidate` labels.
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `tenure_is_leader` | gauge | 1 while this candidate leads |
//! | `tenure_transitions_total{kind}` | counter | `elected` / `ousted` |
//! | `tenure_step_downs_total{reason}` | counter | why terms ended |
//! | `tenure_renew_latency_seconds` | histogram | renewal round trip |
//! | `tenure_term_remaining_seconds` | gauge | time left in the term after the last renewal |
//! | `tenure_store_errors_total{op}` | counter | failed store operations (`read`, `acquire`, `renew`, `release`) |
//! | `tenure_duty_failures_total` | counter | failed runs of a periodic leader duty |
//!
//! A sharded set that follows a catalog adds, labelled `set` (and
//! `member`):
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `tenure_shard_catalog_unreadable_total{set, member}` | counter | reads of the catalog by this member that failed or found no whole catalog, once it stayed unreadable for two reads in a row |
//! | `tenure_shard_catalog_left_out_total{set}` | counter | shards the catalog leader left out of the catalog (they cannot be published), each counted when first left out |

use std::time::Duration;

use crate::machine::EndReason;
use crate::record::GroupName;

/// The labels of one candidate's series.
pub(crate) struct Meter {
    labels: [(&'static str, String); 2],
}

impl Meter {
    pub(crate) fn new(group: &GroupName, candidate: &str) -> Self {
        let meter = Meter {
            labels: [
                ("group", group.to_string()),
                ("candidate", candidate.to_owned()),
            ],
        };
        metrics::gauge!("tenure_is_leader", &meter.labels).set(0.0);
        meter
    }

    pub(crate) fn elected(&self, remaining: Duration) {
        metrics::gauge!("tenure_is_leader", &self.labels).set(1.0);
        metrics::gauge!("tenure_term_remaining_seconds", &self.labels).set(remaining.as_secs_f64());
        let mut labels = self.labels.to_vec();
        labels.push(("kind", "elected".into()));
        metrics::counter!("tenure_transitions_total", &labels).increment(1);
    }

    pub(crate) fn renewed(&self, latency: Duration, remaining: Duration) {
        metrics::histogram!("tenure_renew_latency_seconds", &self.labels)
            .record(latency.as_secs_f64());
        metrics::gauge!("tenure_term_remaining_seconds", &self.labels).set(remaining.as_secs_f64());
    }

    pub(crate) fn ended(&self, reason: &EndReason) {
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
