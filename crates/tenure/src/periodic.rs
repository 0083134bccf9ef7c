//! Leader-only periodic duties (kinsumer's shard refresh), with the period
//! holding across leader changes: a flapping leadership does not repeat the
//! duty early.

use std::future::Future;
use std::time::Duration;

use crate::clock::WallTime;
use crate::elector::Elector;
use crate::error::ElectorError;
use crate::record::DUTY_PREFIX;
use crate::role::Event;
use crate::term::Term;

/// How [`Elector::run_periodic`] schedules a duty.
///
/// ```
/// use std::time::Duration;
/// use tenure::Periodic;
/// let refresh = Periodic::every(Duration::from_secs(60)).named("shard-refresh");
/// # let _ = refresh;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Periodic {
    period: Duration,
    name: String,
    across_leaders: bool,
}

impl Periodic {
    /// Run every `period` while leading. By default the period holds across
    /// leader changes: each run is recorded in the lease (metadata key
    /// `tenure.duty.NAME`, the wall time it started), and a new leader waits
    /// out the rest of the period since any leader's last run.
    pub fn every(period: Duration) -> Self {
        Periodic {
            period,
            name: "default".into(),
            across_leaders: true,
        }
    }

    /// Names the duty, when one group runs several (each keeps its own
    /// last run).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Runs at once on every new term instead, ignoring earlier leaders'
    /// runs (and recording nothing in the lease).
    pub fn at_every_new_term(mut self) -> Self {
        self.across_leaders = false;
        self
    }

    fn key(&self) -> String {
        format!("{DUTY_PREFIX}{}", self.name)
    }
}

impl Elector {
    /// Runs `duty` every `period` while leading, until the elector stops:
    /// kinsumer's leader-only periodic actions. Shorthand for
    /// [`run_periodic`](Elector::run_periodic) with [`Periodic::every`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tenure::{Elector, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let elector = Elector::builder(MemoryStore::new(), "shard-cache").start()?;
    /// # let stopper = elector.clone();
    /// # tokio::spawn(async move { tokio::time::sleep(Duration::from_millis(50)).await; stopper.shutdown().await; });
    /// elector
    ///     .run_periodic_while_leader(Duration::from_secs(60), |term| async move {
    ///         // refresh the shard cache, fenced by term.token()
    ///         Ok::<(), std::io::Error>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_periodic_while_leader<F, Fut, E>(
        &self,
        period: Duration,
        duty: F,
    ) -> Result<(), ElectorError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        self.run_periodic(Periodic::every(period), duty).await
    }

    /// Runs `duty` on the schedule of `periodic` while leading, until the
    /// elector stops.
    ///
    /// A run still going when the term ends is dropped (at the deadline at
    /// the latest). A failed run is reported as [`Event::DutyFailed`],
    /// logged, and counted in the metric `tenure_duty_failures_total`; the
    /// next period runs anyway. Returns `Ok(())` once the elector has
    /// stopped after [`shutdown`](Elector::shutdown), and
    /// [`ElectorError::Failed`] if it stopped because it can never lead.
    ///
    /// Across leader changes (the default) the last run's wall-clock start
    /// is kept in the lease record, so clocks of different hosts are
    /// compared: a skew of a few seconds moves a run by as much, which is
    /// what a rate limit can bear (fencing never depends on it). Through a
    /// [`Coordinator`](crate::Coordinator) nothing can be recorded and the
    /// duty runs at every new term.
    pub async fn run_periodic<F, Fut, E>(
        &self,
        periodic: Periodic,
        mut duty: F,
    ) -> Result<(), ElectorError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        // No candidate label: see the metrics module.
        let labels = [("group", self.group().to_string())];
        let key = periodic.key();
        loop {
            let term = match self.wait_for_leadership().await {
                Ok(term) => term,
                Err(ElectorError::Stopped) => return Ok(()),
                Err(e) => return Err(e),
            };
            let _guard = term.hold();
            if periodic.across_leaders {
                // Wait out what is left of the period since any leader's
                // last run.
                let last = term
                    .predecessor_metadata()
                    .get(&key)
                    .and_then(|ms| ms.parse::<u64>().ok());
                if let Some(last) = last {
                    let period = u64::try_from(periodic.period.as_millis()).unwrap_or(u64::MAX);
                    let due = last.saturating_add(period);
                    let now = self.shared.clock.now().wall.as_millis();
                    // A last run stamped a period or more ahead of this
                    // clock (by a host whose clock runs ahead) is not
                    // waited out: taken at its word it would hold the duty
                    // back until this clock caught up, however far.
                    let wait = if last >= now.saturating_add(period) {
                        Duration::ZERO
                    } else {
                        Duration::from_millis(due.saturating_sub(now))
                    };
                    if !self.sleep_in_term(&term, wait).await {
                        continue;
                    }
                }
            }
            loop {
                let started = self.shared.clock.now().wall;
                let outcome = term.bound(term.cancelled(), duty(term.clone())).await;
                match outcome {
                    None => break,
                    Some(Err(e)) => {
                        tracing::warn!(group = %term.group(), token = term.token(), error = %e, "leader duty failed");
                        metrics::counter!("tenure_duty_failures_total", &labels).increment(1);
                        self.shared.published.events.send(Event::DutyFailed {
                            token: term.token(),
                            error: e.to_string(),
                        });
                    }
                    Some(Ok(())) => {
                        if periodic.across_leaders {
                            self.record_run(&key, started);
                        }
                    }
                }
                if !self.sleep_in_term(&term, periodic.period).await {
                    break;
                }
            }
        }
    }

    /// Records a duty's run in the lease (best effort: a coordinator cannot
    /// record it, and then the duty runs at every new term).
    fn record_run(&self, key: &str, started: WallTime) {
        let _ = self.update_metadata(|md| md.insert(key, started.as_millis().to_string()));
    }

    /// Sleeps for `wait` unless the term ends first; `true` if it slept.
    async fn sleep_in_term(&self, term: &Term, wait: Duration) -> bool {
        let until = self.shared.clock.now().mono + wait;
        tokio::select! {
            biased;
            _ = term.cancelled() => false,
            _ = self.shared.clock.sleep_until(until) => true,
        }
    }
}
