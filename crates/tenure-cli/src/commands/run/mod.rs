//! `tenure run`: stand for a group and run CMD only while leading.
//!
//! The life of the process is a series of *stints*, each with one
//! [`Elector`]. Within a stint, every term this candidate wins runs CMD once;
//! losing the term stops CMD and the candidate keeps standing. When CMD exits
//! on its own the stint ends: the elector shuts down (so the lease is
//! released and another candidate can take over at once), and after a
//! back-off a new stint stands again — or, with `--once`, tenure exits with
//! CMD's status. Shutting the elector down rather than merely resigning is
//! what makes the back-off real: a resigned candidate stands again after one
//! poll period, which would turn a crash-looping CMD into leadership flapping
//! across the whole group.
//!
//! What only `run` uses lives beside it: [`sharded`] (`--shards`,
//! `--slots`), [`http`] (`--metrics-addr`) and [`metadata_file`]
//! (`--metadata-file`).

mod http;
mod metadata_file;
mod sharded;

pub(crate) use sharded::slot_prefix;

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context;
use tenure::{Config, Elector, ElectorError, Event, Metadata, Term, Timing};
use tokio::sync::watch;
use tracing::Instrument;

use crate::cli::RunArgs;
use crate::connect::{self, Connected};
use crate::exit::{self, usage};
use crate::process::child;
use crate::process::supervise::{self, CmdPlan, Ran};
use crate::signals::Stop;
use crate::view;

/// A CMD that ran at least this long was not crash-looping: the back-off
/// starts over.
const STABLE_RUN: Duration = Duration::from_secs(60);
/// The longest back-off.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Runs `tenure run`.
pub async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let group = connect::group(&args.group)?;
    check_term(args.term())?;
    let config = Config::new(args.term());
    let timing = config.validate().map_err(usage)?;
    let mut metadata: Metadata = args.metadata.iter().cloned().collect();
    metadata.validate_published().map_err(usage)?;
    let base_metadata = metadata.clone();
    if let Some(path) = &args.metadata_file {
        metadata = metadata_file::read(path, &metadata).map_err(|e| usage(format!("{e:#}")))?;
    }
    let id = args.id.clone().unwrap_or_else(default_id);
    let conn = connect::open_shared(args.store.store.as_deref()).await?;
    let stop = Stop::listen()?;
    child::become_subreaper();

    let (electors, elector_rx) = watch::channel(None);
    let notifier = crate::notify::Notifier::from_captured();
    if let Some(n) = &notifier {
        n.spawn(elector_rx.clone());
        let n = std::sync::Arc::clone(n);
        let stop = stop.clone();
        tokio::spawn(async move {
            stop.stopped().await;
            n.stopping();
        });
    }
    if let Some(addr) = args.metrics_addr {
        // Installed before any elector starts, so its first series count.
        let metrics = http::install_metrics()?;
        http::serve(
            addr,
            http::Sources {
                metrics,
                elector: elector_rx,
                metadata: metadata.clone(),
            },
        )
        .await?;
    }
    let plan = CmdPlan {
        command: args.command.clone(),
        kill_grace: args.kill_grace,
        margin: kill_margin(&timing),
        follow_every: supervise::follow_every(config.term),
    };
    if let Some(count) = args.shards.or(args.slots) {
        if conn.url.scheme() == "kafka" {
            return Err(usage(
                "--shards and --slots need a lease store: on kafka:// leadership is decided by consumer-group assignment of one partition",
            ));
        }
        if let Some(n) = &notifier {
            n.notify(&format!(
                "READY=1\nSTATUS=member {} of {} set {}",
                view::escape(&id),
                if args.shards.is_some() {
                    "sharded"
                } else {
                    "slotted"
                },
                view::escape(group.as_str())
            ));
        }
        let span = tracing::info_span!("run", group = %group, candidate = %id);
        let setup = sharded::Setup {
            conn,
            config,
            metadata,
            plan,
            stop,
            id,
        };
        return if args.shards.is_some() {
            sharded::run_shards(&args, setup, count)
                .instrument(span)
                .await
        } else {
            sharded::run_slots(&args, setup, count)
                .instrument(span)
                .await
        };
    }
    if let Some(path) = args.metadata_file.clone() {
        tokio::spawn(metadata_file::follow(
            path,
            base_metadata,
            electors.subscribe(),
        ));
    }
    let span = tracing::info_span!("run", group = %group, candidate = %id);
    let runner = Runner {
        args,
        conn,
        config,
        plan,
        metadata,
        id,
        stop,
        electors,
    };
    runner.main().instrument(span).await
}

struct Runner {
    args: RunArgs,
    conn: Connected,
    config: Config,
    plan: CmdPlan,
    metadata: Metadata,
    id: String,
    stop: Stop,
    electors: watch::Sender<Option<Elector>>,
}

/// How a stint ended.
enum Stint {
    /// SIGINT/SIGTERM: CMD is stopped; release and exit.
    Stopped,
    /// CMD exited on its own after running this long; its group is gone.
    Exited { status: ExitStatus, ran: Duration },
    /// With `--once`: leadership ended while CMD ran; CMD was stopped and
    /// is not started again.
    LostOnce,
    /// With `--wait`: not leading in time.
    NotLeading,
    /// CMD could not be started.
    SpawnFailed(io::Error),
    /// The elector stopped by itself.
    ElectorGone,
}

/// How one term ended.
enum TermEnd {
    /// Leadership ended; CMD is stopped; stand on.
    Lost,
    /// Leadership ended before CMD started; stand on, even with `--once`.
    LostBeforeStart,
    /// The stint is over.
    Over(Stint),
}

impl Runner {
    /// An elector builder on this run's backend: the lease store, or for
    /// `kafka://` a fresh coordinator (one per stint, as it is consumed).
    fn builder(&self) -> anyhow::Result<tenure::ElectorBuilder> {
        #[cfg(feature = "kafka")]
        if let (true, Some(url)) = (self.conn.url.scheme() == "kafka", self.conn.url.raw()) {
            return Ok(Elector::with_coordinator(
                crate::kafka::coordinator(url, self.args.term)?,
                &self.args.group,
            ));
        }
        Ok(Elector::builder(self.conn.store()?, &self.args.group))
    }

    async fn main(self) -> anyhow::Result<u8> {
        let mut backoff = Backoff::new(self.args.backoff);
        // `--wait` bounds only the first election.
        let mut wait = self.args.wait;
        loop {
            let mut builder = self
                .builder()?
                .candidate_id(self.id.clone())
                .config(self.config.clone())
                .metadata(self.metadata.clone());
            if let Some(priority) = self.args.priority {
                builder = builder.priority(priority);
            }
            if let Some(delay) = self.args.preempt_after {
                builder = builder.preempt_after(delay);
            }
            let elector = builder.start().map_err(exit::start_error)?;
            self.electors.send_replace(Some(elector.clone()));
            tracing::info!(store = %self.conn.url, term = ?self.config.term, "standing");
            let events = tokio::spawn(log_events(elector.events()).in_current_span());
            let stint = self.stint(&elector, wait.take()).await;
            // Drains (nothing is held by now) and releases the lease, so the
            // next candidate need not wait out the term.
            elector.shutdown().await;
            events.abort();
            self.electors.send_replace(None);
            match stint {
                Stint::Stopped => {
                    tracing::info!("released; exiting");
                    let code = match (self.args.once, self.stop.signal()) {
                        (true, Some(sig)) => 128u8.saturating_add(u8::try_from(sig).unwrap_or(0)),
                        _ => 0,
                    };
                    return Ok(code);
                }
                Stint::Exited { status, ran } => {
                    if self.args.once {
                        tracing::info!(%status, "CMD finished; released; exiting with its status");
                        return Ok(exit::of_status(status));
                    }
                    let delay = backoff.after(ran);
                    tracing::info!(%status, ran = %view::short(ran), backoff = %view::short(delay), "CMD exited; released leadership, standing again after the back-off");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.stop.stopped() => return Ok(0),
                    }
                }
                Stint::LostOnce => {
                    tracing::error!(
                        code = exit::LOST,
                        "leadership was lost while CMD ran: CMD was stopped before it finished; with --once it is not run again; exiting"
                    );
                    return Ok(exit::LOST);
                }
                Stint::SpawnFailed(e) => {
                    let cmd = self.args.command.first().cloned().unwrap_or_default();
                    return Err(anyhow::Error::new(e))
                        .with_context(|| format!("cannot start {}", cmd.to_string_lossy()));
                }
                Stint::NotLeading => {
                    tracing::warn!(
                        code = exit::NOT_LEADING,
                        wait = ?self.args.wait,
                        "not leading within --wait: released; exiting"
                    );
                    return Ok(exit::NOT_LEADING);
                }
                Stint::ElectorGone => anyhow::bail!("the elector stopped unexpectedly"),
            }
        }
    }

    /// Leads as often as elected, until CMD exits or tenure is stopped;
    /// gives up if the first election does not come within `wait`.
    async fn stint(&self, elector: &Elector, mut wait: Option<Duration>) -> Stint {
        loop {
            let elected = async {
                match wait.take() {
                    None => elector.wait_for_leadership().await.map(Some),
                    // Zero tries once: one look, one attempt if free.
                    Some(d) if d.is_zero() => elector.try_acquire().await,
                    Some(d) => match elector.wait_for_leadership_within(d).await {
                        Err(ElectorError::NotLeader { .. }) => Ok(None),
                        other => other.map(Some),
                    },
                }
            };
            let term = tokio::select! {
                biased;
                _ = self.stop.stopped() => return Stint::Stopped,
                t = elected => match t {
                    Ok(Some(t)) => t,
                    Ok(None) => return Stint::NotLeading,
                    Err(_) => return Stint::ElectorGone,
                },
            };
            let span = tracing::info_span!("term", token = term.token());
            match self.lead(elector, &term).instrument(span).await {
                // `--once` starts CMD at most once: a job cut short by a
                // lost term is reported, not silently run a second time.
                TermEnd::Lost if self.args.once => return Stint::LostOnce,
                TermEnd::Lost | TermEnd::LostBeforeStart => continue,
                TermEnd::Over(stint) => return stint,
            }
        }
    }

    /// Runs CMD for one term.
    async fn lead(&self, elector: &Elector, term: &Term) -> TermEnd {
        let env = supervise::term_env(
            elector.group().as_str(),
            elector.candidate_id(),
            term,
            elector.timing().term,
        );
        match supervise::run_term(&self.plan, &self.stop, term, &env).await {
            Ran::Stopped => TermEnd::Over(Stint::Stopped),
            Ran::Lost => TermEnd::Lost,
            Ran::LostBeforeStart => TermEnd::LostBeforeStart,
            Ran::Exited { status, ran } => TermEnd::Over(Stint::Exited { status, ran }),
            Ran::SpawnFailed(e) => TermEnd::Over(Stint::SpawnFailed(e)),
        }
    }
}

/// The longest term `run` accepts. Nothing sensible needs more (fail-over
/// after a crash takes a whole term), and the library's monotonic
/// arithmetic is in nanoseconds, which absurd terms overflow.
pub const MAX_TERM: Duration = Duration::from_secs(24 * 60 * 60);

/// Refuses terms longer than [`MAX_TERM`].
pub fn check_term(term: Duration) -> anyhow::Result<()> {
    if term > MAX_TERM {
        return Err(usage(format!(
            "invalid timing: a term of {} is longer than the 24h this tool accepts: fail-over after a crash takes a whole term; use a term of seconds to minutes",
            humantime::format_duration(term)
        )));
    }
    Ok(())
}

/// How long before the term's deadline CMD's group must be dead: a quarter
/// of the stop grace the library leaves between telling work to stop and
/// the deadline, within [20 ms, 250 ms], so SIGTERM still gets most of that
/// window and SIGKILL plus the kernel's teardown fit in the rest.
fn kill_margin(timing: &Timing) -> Duration {
    (timing.stop_grace / 4)
        .clamp(Duration::from_millis(20), Duration::from_millis(250))
        .min(timing.stop_grace)
}

/// The default candidate id: host name and pid, stable across the stints of
/// this process (the library's default adds a random suffix per elector).
fn default_id() -> String {
    format!("{}-{}", tenure::host_name(), std::process::id())
}

/// Logs who leads when it changes; the library logs this candidate's own
/// elections and step-downs.
async fn log_events(mut events: tenure::EventStream) {
    while let Some(event) = events.next().await {
        if let Event::LeaderChanged { leader } = event {
            match leader {
                Some(l) => {
                    tracing::info!(leader = %view::escape(&l.candidate), token = l.token, "following")
                }
                None => tracing::info!("no leader visible"),
            }
        }
    }
}

/// Exponential back-off between stints.
struct Backoff {
    first: Duration,
    next: Duration,
}

impl Backoff {
    fn new(first: Duration) -> Self {
        Backoff { first, next: first }
    }

    /// The wait after CMD ran for `ran`.
    fn after(&mut self, ran: Duration) -> Duration {
        if ran >= STABLE_RUN {
            self.next = self.first;
        }
        let wait = self.next;
        self.next = self.next.saturating_mul(2).min(MAX_BACKOFF.max(self.first));
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1));
        assert_eq!(b.after(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(b.after(Duration::ZERO), Duration::from_secs(2));
        assert_eq!(b.after(Duration::ZERO), Duration::from_secs(4));
        assert_eq!(b.after(STABLE_RUN), Duration::from_secs(1));
        for _ in 0..10 {
            b.after(Duration::ZERO);
        }
        assert_eq!(b.after(Duration::ZERO), MAX_BACKOFF);
    }

    #[test]
    fn margin_fits_in_the_stop_grace() {
        for term in [1u64, 2, 10, 60] {
            let t = Config::new(Duration::from_secs(term)).validate().unwrap();
            let m = kill_margin(&t);
            assert!(m <= t.stop_grace && m >= Duration::from_millis(20), "{m:?}");
        }
    }
}
