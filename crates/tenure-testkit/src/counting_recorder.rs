//! A `metrics` recorder that counts, for tests that check the counters a
//! store reports.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// A [`metrics::Recorder`] that keeps every counter it is given, by name and
/// labels, and drops gauges and histograms. Install it for one test with
/// `metrics::set_default_local_recorder(&recorder)` (the current thread),
/// or as `Arc<CountingRecorder>` with `metrics::set_global_recorder`.
///
/// ```
/// let recorder = tenure_testkit::CountingRecorder::default();
/// {
///     let _local = metrics::set_default_local_recorder(&recorder);
///     metrics::counter!("retries_total", "op" => "write", "table" => "t").increment(2);
///     metrics::counter!("retries_total", "op" => "read", "table" => "t").increment(1);
/// }
/// assert_eq!(recorder.count("retries_total", &[("op", "write")]), 2);
/// assert_eq!(recorder.count("retries_total", &[("op", "read"), ("table", "t")]), 1);
/// assert_eq!(recorder.count("retries_total", &[]), 3);
/// assert_eq!(recorder.count("other_total", &[]), 0);
/// ```
#[derive(Default)]
pub struct CountingRecorder {
    counters: Mutex<HashMap<Key, Arc<Count>>>,
}

impl CountingRecorder {
    /// The sum of the counters named `name` whose labels include every
    /// `(key, value)` of `labels` (all counters of that name for `&[]`);
    /// 0 if none was incremented.
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let counters = self.counters();
        counters
            .iter()
            .filter(|(key, _)| key.name() == name)
            .filter(|(key, _)| {
                labels.iter().all(|(k, v)| {
                    key.labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
            })
            .map(|(_, count)| count.0.load(Ordering::Relaxed))
            .sum()
    }

    /// The counters, even after a panic elsewhere while they were held:
    /// the map only ever holds whole entries, and a recorder that panicked
    /// would take down the library code that reports a metric.
    fn counters(&self) -> MutexGuard<'_, HashMap<Key, Arc<Count>>> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One counter's value.
#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters();
        Counter::from_arc(counters.entry(key.clone()).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
