//! Retrying throttled requests with jittered exponential back-off.
//!
//! The SDK's own retries are switched off (see `store.rs`): its standard
//! mode would also resend a conditional write after a lost reply, turning
//! "applied" into a spurious "conflict", and its throttling back-off starts
//! at a second, a tenth of a default term. Here only throttling is retried:
//! DynamoDB rejects a throttled request before carrying it out, so sending
//! it again cannot apply a write twice, and a compare-and-swap stays exactly
//! one conditional write as far as the table is concerned.
//!
//! The loop is bounded twice: by the store's throttle budget, and by the
//! [`Elector`](tenure::Elector), which drops an operation's future at its
//! deadline (term / 4 by default) so a renewal never outlives the term.
//! Throttling therefore costs a leader at most its term (it steps down
//! before its deadline, as for any store failure), never safety: a write
//! that was not applied cannot make a second leader.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tenure::StoreError;

use crate::error::Failure;

/// The metric counting throttled requests, labelled by `table` and `op`.
pub const THROTTLED_METRIC: &str = "tenure_dynamodb_throttled_total";

/// The metric counting operations that gave up because throttling outlasted
/// the budget, labelled by `table` and `op`.
pub const THROTTLE_EXHAUSTED_METRIC: &str = "tenure_dynamodb_throttle_exhausted_total";

/// Describes this crate's metrics (`# HELP`) to the installed recorder, as
/// [`tenure::metrics::describe`] does tenure's; the `tenure` binary calls
/// both.
pub fn describe_metrics() {
    metrics::describe_counter!(
        THROTTLED_METRIC,
        "DynamoDB requests answered with throttling, by table and op"
    );
    metrics::describe_counter!(
        THROTTLE_EXHAUSTED_METRIC,
        "DynamoDB operations that gave up because throttling outlasted the budget, by table and op"
    );
}

/// First back-off: about DynamoDB's own SDKs' base delay for throttling
/// retries in their fast modes.
const FIRST_DELAY: Duration = Duration::from_millis(25);

/// Longest single back-off: a default term is 10 s, and a renewal should
/// get several tries within its 2.5 s deadline.
const MAX_DELAY: Duration = Duration::from_millis(800);

/// How a store operation retries throttling.
#[derive(Clone, Debug)]
pub(crate) struct Throttle {
    pub(crate) table: String,
    pub(crate) budget: Duration,
}

impl Throttle {
    /// Runs `attempt` until it succeeds, fails for a reason other than
    /// throttling, or throttling has lasted longer than the budget.
    /// `op` labels the metric (`read`, `write`, `describe`, `create`).
    pub(crate) async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        mut attempt: F,
    ) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let mut backoff = self.backoff(op);
        loop {
            match attempt().await {
                Err(Failure::Throttled(e)) => backoff.wait(e).await?,
                other => return other,
            }
        }
    }

    /// The back-off of one operation, for loops that keep partial results
    /// between attempts (a `BatchGetItem` that left keys unprocessed).
    pub(crate) fn backoff(&self, op: &'static str) -> Backoff<'_> {
        Backoff {
            throttle: self,
            op,
            start: tokio::time::Instant::now(),
            ceiling: FIRST_DELAY,
            attempts: 0,
        }
    }
}

/// The back-off state of one operation (see [`Throttle::backoff`]).
pub(crate) struct Backoff<'a> {
    throttle: &'a Throttle,
    op: &'static str,
    start: tokio::time::Instant,
    ceiling: Duration,
    attempts: u32,
}

impl Backoff<'_> {
    /// After a throttled attempt (`err` says how): waits before the next
    /// one, or gives up with the operation's final error once waiting
    /// would outlast the budget. Counts the metrics.
    pub(crate) async fn wait(&mut self, err: StoreError) -> Result<(), Failure> {
        self.attempts += 1;
        let (op, table, attempts) = (self.op, &self.throttle.table, self.attempts);
        let labels = [("table", table.clone()), ("op", op.to_owned())];
        metrics::counter!(THROTTLED_METRIC, &labels).increment(1);
        // Full jitter: candidates throttled together spread out instead
        // of retrying in lockstep.
        let delay = self
            .ceiling
            .mul_f64(rand::thread_rng().gen_range(0.5..=1.0));
        let elapsed = self.start.elapsed();
        if elapsed + delay > self.throttle.budget {
            metrics::counter!(THROTTLE_EXHAUSTED_METRIC, &labels).increment(1);
            tracing::warn!(table = %table, op, attempts, ?elapsed, "DynamoDB kept throttling; giving up");
            return Err(Failure::Other(StoreError::Unavailable {
                message: format!(
                    "DynamoDB throttled the {op} on table {table} {attempts} times over {elapsed:.1?}: \
                     switch the table to on-demand capacity or raise its provisioned capacity \
                     (metric {THROTTLED_METRIC})"
                ),
                source: Some(Box::new(err)),
            }));
        }
        tracing::debug!(table = %table, op, attempts, ?delay, error = %err, "throttled; retrying");
        tokio::time::sleep(delay).await;
        self.ceiling = (self.ceiling * 2).min(MAX_DELAY);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The retry loop with real SDK throttling errors, on paused time, with
    //! a recorder that counts the metric.

    use aws_sdk_dynamodb::error::SdkError;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;
    use tenure_testkit::CountingRecorder;

    use super::*;
    use crate::error::tests::sdk_meta;
    use crate::error::{classify, Target};

    /// The labels of the metric for `op` on the table of [`throttle`].
    const fn on_leases(op: &str) -> [(&str, &str); 2] {
        [("op", op), ("table", "leases")]
    }

    fn throttled() -> Failure {
        let e: SdkError<UpdateItemError, Response> = SdkError::service_error(
            UpdateItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                        .message("The level of configured provisioned throughput for the table was exceeded.")
                        .meta(sdk_meta("ProvisionedThroughputExceededException", "The level of configured provisioned throughput for the table was exceeded."))
                        .build(),
            ),
            Response::new(StatusCode::try_from(400).unwrap(), SdkBody::empty()),
        );
        classify(
            e,
            &Target::new("leases", Some("local"), None),
            "compare-and-swap",
        )
    }

    fn throttle(budget: Duration) -> Throttle {
        Throttle {
            table: "leases".into(),
            budget,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_throttling_then_succeeds_and_counts_it() {
        let recorder = CountingRecorder::default();
        let _guard = metrics::set_default_local_recorder(&recorder);
        let mut calls = 0;
        let start = tokio::time::Instant::now();
        let result = throttle(Duration::from_secs(5))
            .run("write", || {
                calls += 1;
                let n = calls;
                async move {
                    if n <= 3 {
                        Err(throttled())
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(result.unwrap(), 4);
        assert_eq!(
            recorder.count("tenure_dynamodb_throttled_total", &on_leases("write")),
            3
        );
        assert_eq!(
            recorder.count(
                "tenure_dynamodb_throttle_exhausted_total",
                &on_leases("write")
            ),
            0
        );
        // Back-offs of at most 25 + 50 + 100 ms, at least half that.
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_micros(87_500) && waited <= Duration::from_millis(175),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_at_the_budget_with_a_message_naming_the_fix() {
        let recorder = CountingRecorder::default();
        let _guard = metrics::set_default_local_recorder(&recorder);
        let start = tokio::time::Instant::now();
        let result: Result<(), Failure> = throttle(Duration::from_secs(2))
            .run("read", || async { Err(throttled()) })
            .await;
        let waited = start.elapsed();
        assert!(waited <= Duration::from_secs(2), "{waited:?}");
        let Err(Failure::Other(e)) = result else {
            panic!("expected a final error, got {result:?}")
        };
        assert!(e.is_transient());
        let text = e.to_string();
        assert!(text.contains("on-demand capacity"), "{text}");
        assert!(recorder.count("tenure_dynamodb_throttled_total", &on_leases("read")) >= 5);
        assert_eq!(
            recorder.count(
                "tenure_dynamodb_throttle_exhausted_total",
                &on_leases("read")
            ),
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_failures_and_conflicts_are_not_retried() {
        let mut calls = 0;
        let r: Result<(), Failure> = throttle(Duration::from_secs(5))
            .run("write", || {
                calls += 1;
                async { Err(Failure::ConditionFailed) }
            })
            .await;
        assert!(matches!(r, Err(Failure::ConditionFailed)));
        assert_eq!(calls, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_elector_deadline_cuts_the_loop_short() {
        // The elector drops the future at its op deadline; the loop holds
        // no state that outlives it.
        let r = tokio::time::timeout(
            Duration::from_millis(300),
            throttle(Duration::from_secs(60)).run("write", || async { Err::<(), _>(throttled()) }),
        )
        .await;
        assert!(r.is_err(), "the op deadline ends the retries");
    }
}
