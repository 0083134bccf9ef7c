//! The handle users hold: start an elector, watch its role, run work while
//! leading, pulse, resign, shut down.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::{CancellationToken, ReusableBoxFuture};

use crate::clock::{system_clock, Clock};
use crate::config::{Config, Timing};
use crate::coordinator::{Command, Coordinator, Session};
use crate::engine::{Engine, EngineShared, Joining, ToEngine};
use crate::error::{ConfigError, ElectorError};
use crate::link::{Link, Route};
use crate::machine::Fault;
use crate::publish::{self, Events, Publisher};
use crate::record::{
    check_name, GroupName, Holder, Metadata, MAX_CANDIDATE_BYTES, RESERVED_PREFIX,
};
use crate::role::{Event, Role};
use crate::store::LeaseStore;
use crate::term::Term;

/// What decides leadership.
enum Backend {
    /// A lease store: the engine shared by the store's clones runs it.
    Lease(Arc<dyn LeaseStore>),
    /// An engine chosen explicitly.
    Engine(Arc<EngineShared>),
    Coordinator(Box<dyn Coordinator>),
}

/// What runs an elector's campaign: the engine of its store (its machine
/// among the engine's groups), or a coordinator that decides leadership
/// itself.
enum Runner {
    Engine(Arc<EngineShared>),
    Coordinator(Box<dyn Coordinator>),
}

/// Configures and starts an [`Elector`]; see [`Elector::builder`].
pub struct ElectorBuilder {
    backend: Backend,
    group: Result<GroupName, ConfigError>,
    candidate_id: Option<String>,
    config: Config,
    metadata: Metadata,
    clock: Arc<dyn Clock>,
    priority: Option<u32>,
    preempt_after: Option<Duration>,
    cancel_on: Option<CancellationToken>,
}

impl ElectorBuilder {
    /// Shuts the elector down (as [`Elector::shutdown`]: drains a leader's
    /// work, releases the lease so the next candidate takes over at once)
    /// when `token` is cancelled: wire it to the application's own
    /// shutdown, SIGTERM included, and a stop hands over in one round trip
    /// instead of leaving the lease to expire.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tenure::ElectorError> {
    /// use tokio_util::sync::CancellationToken;
    /// let shutdown = CancellationToken::new();
    /// let elector = tenure::Elector::builder(tenure::MemoryStore::new(), "billing")
    ///     .cancel_on(shutdown.clone())
    ///     .start()?;
    /// elector.wait_for_leadership().await?;
    /// // In an application: tokio::signal::ctrl_c().await, or SIGTERM, then:
    /// shutdown.cancel();
    /// let mut role = elector.watch_role();
    /// role.wait_for(|r| matches!(r, tenure::Role::Stopped)).await.ok();
    /// # Ok(()) }
    /// ```
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel_on = Some(token);
        self
    }

    /// This candidate's id (default: `hostname-pid-random`). Ids should be
    /// unique; two processes given the same id are still told apart.
    pub fn candidate_id(mut self, id: impl Into<String>) -> Self {
        self.candidate_id = Some(id.into());
        self
    }

    /// The term: how long one successful write keeps the lease (default
    /// 10 s). Other timings derive from it unless set with
    /// [`config`](ElectorBuilder::config).
    pub fn term(mut self, term: Duration) -> Self {
        self.config.term = term;
        self
    }

    /// The whole timing configuration.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// What the leader publishes in its record (its address, say).
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// This candidate's priority (default: none, which is 0). It is
    /// published in the record while this candidate leads; while another
    /// leads with a lower priority (one that set none is 0), this
    /// candidate, once it has stood for the
    /// [preemption delay](ElectorBuilder::preempt_after), asks the leader
    /// to hand over. The leader checks the request against its own
    /// priority on a read of its own record and, if it is higher, drains
    /// its work and releases the lease reserved for this candidate (the
    /// path of [`Elector::transfer_to`]): never two valid terms, and the
    /// token rises. Equal priorities never preempt; a candidate up for
    /// less than the delay never takes over by preemption. Not available
    /// with a [`Coordinator`] (Kafka decides leadership itself).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tenure::{Elector, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let clock = std::sync::Arc::new(tenure::TokioClock::new());
    /// let old = Elector::builder(store.clone(), "jobs").candidate_id("v1").clock(clock.clone()).start()?;
    /// old.wait_for_leadership().await?;
    /// // The new version, preferred: it leads one delay after it starts.
    /// let new = Elector::builder(store, "jobs")
    ///     .candidate_id("v2")
    ///     .priority(10)
    ///     .preempt_after(Duration::from_secs(5))
    ///     .clock(clock)
    ///     .start()?;
    /// let term = new.wait_for_leadership().await?;
    /// assert_eq!(term.token(), 2);
    /// # old.shutdown().await; new.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// How long this candidate, with a [`priority`](ElectorBuilder::priority),
    /// stands under one lower-priority leader's term before it asks it to
    /// hand over, and waits again after each request (default: one term).
    /// The hysteresis against a flapping candidate: one that is up for
    /// less than this never takes leadership by preemption.
    pub fn preempt_after(mut self, delay: Duration) -> Self {
        self.preempt_after = Some(delay);
        self
    }

    /// Resign when the application has not called
    /// [`Elector::pulse`] for this long (NELI's liveness coupling).
    pub fn liveness_timeout(mut self, timeout: Duration) -> Self {
        self.config.liveness_timeout = Some(timeout);
        self
    }

    /// The clock (default: [`SystemClock`](crate::SystemClock); tests use
    /// [`TokioClock`](crate::TokioClock) with tokio's paused time).
    /// Electors on clones of one store share an engine only if they share
    /// the clock handle too. An elector built from an [`Engine`] runs on the
    /// engine's clock and may not set another.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub(crate) fn in_engine(engine: Arc<EngineShared>, group: impl AsRef<str>) -> Self {
        let clock = engine.clock.clone();
        let mut builder = Elector::builder_for(Backend::Engine(engine), group);
        builder.clock = clock;
        builder
    }

    /// Validates everything and starts campaigning in the background.
    /// Must be called within a tokio runtime.
    pub fn start(self) -> Result<Elector, ElectorError> {
        let group = self.group?;
        let timing = self.config.validate()?;
        let candidate = match self.candidate_id {
            Some(id) => id,
            None => default_candidate_id(),
        };
        check_name("candidate id", &candidate, MAX_CANDIDATE_BYTES)?;
        self.metadata.validate_published()?;
        let mut metadata = self.metadata;
        if let Some(priority) = self.priority {
            if matches!(self.backend, Backend::Coordinator(_)) {
                return Err(ElectorError::Unsupported {
                    what: "candidate priority (a coordinator decides leadership itself)",
                });
            }
            metadata.insert(crate::record::PRIORITY_KEY, priority.to_string());
            metadata.validate()?;
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ElectorError::NoRuntime)?;

        let holder = Holder {
            id: candidate,
            incarnation: self.clock.random_u64(),
        };
        let (role_tx, role_rx) = watch::channel(Role::Candidate);
        let is_system = crate::clock::is_system_clock(&self.clock);
        let pulse = Arc::new(PulseState {
            last: AtomicU64::new(self.clock.now().mono.as_nanos()),
            waiting: AtomicBool::new(false),
        });
        let published = publish::Shared {
            events: Events::default(),
            leader_until: Arc::new(AtomicU64::new(0)),
            fault: Arc::new(OnceLock::new()),
        };
        let make_session = |drained, channels| {
            let publisher = Publisher::new(
                group.clone(),
                holder.clone(),
                self.clock.clone(),
                role_tx,
                &published,
                drained,
            );
            Session::new(
                publisher,
                channels,
                pulse.clone(),
                timing.clone(),
                metadata.clone(),
            )
        };
        let runner = match self.backend {
            Backend::Coordinator(coordinator) => Runner::Coordinator(coordinator),
            Backend::Lease(store) => {
                Runner::Engine(EngineShared::for_store(store, &self.clock, &runtime))
            }
            Backend::Engine(engine) => {
                if !std::ptr::addr_eq(Arc::as_ptr(&engine.clock), Arc::as_ptr(&self.clock)) {
                    return Err(ConfigError::timing(
                        "an elector built from an Engine runs on the engine's clock: set the clock on Engine::builder instead",
                    )
                    .into());
                }
                Runner::Engine(engine)
            }
        };
        // A candidate of priority above 0 asks lower-priority leaders to
        // hand over (a machine's decision, carried out by the engine).
        let preempt_after = self
            .priority
            .filter(|p| *p > 0)
            .map(|_| self.preempt_after.unwrap_or(timing.term));
        let (link, engine) = match runner {
            Runner::Coordinator(coordinator) => {
                let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
                let (drained_tx, drained_rx) = mpsc::unbounded_channel();
                let session = make_session(Route::Channel(drained_tx), Some((cmd_rx, drained_rx)));
                runtime.spawn(coordinator.run(session));
                (Link(Route::Channel(cmd_tx)), None)
            }
            Runner::Engine(engine) => {
                let id = engine.next_id();
                let route = Route::Engine {
                    engine: engine.clone(),
                    id,
                };
                let session = make_session(route, None);
                engine.send(ToEngine::Join(Box::new(Joining {
                    id,
                    session,
                    seed: self.clock.random_u64(),
                    preempt_after,
                })));
                let link = Link(Route::Engine {
                    engine: engine.clone(),
                    id,
                });
                (link, Some(engine))
            }
        };
        let elector = Elector {
            shared: Arc::new(Shared {
                group,
                holder,
                timing,
                clock: self.clock,
                role: role_rx,
                published,
                metadata: std::sync::Mutex::new(metadata),
                link,
                pulse,
                engine,
                system_clock: is_system,
            }),
        };
        if let Some(token) = self.cancel_on {
            // A weak handle: the task keeps nothing alive, and ends once
            // the elector stops, whoever stopped it.
            let weak = Arc::downgrade(&elector.shared);
            let mut role = elector.watch_role();
            let stopped = async move {
                loop {
                    let stopped = matches!(*role.borrow_and_update(), Role::Stopped);
                    if stopped || role.changed().await.is_err() {
                        return;
                    }
                }
            };
            runtime.spawn(async move {
                tokio::select! {
                    biased;
                    () = token.cancelled() => {
                        if let Some(shared) = weak.upgrade() {
                            Elector { shared }.shutdown().await;
                        }
                    }
                    () = stopped => {}
                }
            });
        }
        Ok(elector)
    }
}

/// This host's name as default candidate ids start with it: control
/// characters left out, at most 200 characters (an id may have 255), and
/// `host` when the system has none.
///
/// ```
/// let host = tenure::host_name();
/// assert!(!host.is_empty() && host.chars().count() <= 200);
/// ```
#[allow(unsafe_code, reason = "std has no stable call for the host name")]
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its full length; gethostname writes at
    // most that many bytes and we stop at the first NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let host: String = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end])
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect()
    } else {
        String::new()
    };
    if host.is_empty() {
        "host".to_owned()
    } else {
        host
    }
}

pub(crate) fn default_candidate_id() -> String {
    let suffix: u16 = rand::random();
    format!("{}-{}-{suffix:04x}", host_name(), std::process::id())
}

pub(crate) struct PulseState {
    /// Monotonic nanoseconds of the latest pulse.
    pub(crate) last: AtomicU64,
    /// Set by the engine while leadership is blocked on a missing pulse, so
    /// that only then a pulse wakes it.
    pub(crate) waiting: AtomicBool,
}

pub(crate) struct Shared {
    pub(crate) group: GroupName,
    pub(crate) holder: Holder,
    timing: Timing,
    pub(crate) clock: Arc<dyn Clock>,
    role: watch::Receiver<Role>,
    /// Events, the lock-free leadership deadline and the fault, as the
    /// backend publishes them.
    pub(crate) published: publish::Shared,
    /// What this candidate publishes now: the application's metadata and
    /// tenure's reserved entries (a duty's last run).
    pub(crate) metadata: std::sync::Mutex<Metadata>,
    /// The way to the backend: commands and pulses.
    link: Link,
    pub(crate) pulse: Arc<PulseState>,
    /// The engine running this candidate, for a lease store.
    engine: Option<Arc<EngineShared>>,
    /// Whether `clock` is the system clock (read directly on hot paths).
    system_clock: bool,
}

/// A candidate in one group's election. Clones are handles to the same
/// candidate; when the last handle is dropped the candidate shuts down
/// (draining and releasing as [`shutdown`](Elector::shutdown) does).
///
/// ```
/// use std::time::Duration;
/// use tenure::{Elector, MemoryStore, Metadata};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new(); // or tenure_sqlite::SqliteStore::connect("tenure.db").await?
/// let elector = Elector::builder(store, "nightly-billing")
///     .candidate_id("host-a")
///     .term(Duration::from_secs(10))
///     .metadata(Metadata::address("10.0.0.7:8080"))
///     .start()?;
///
/// let term = elector.wait_for_leadership().await?;
/// assert_eq!(term.token(), 1);
/// // ... work, passing term.token() to what it writes, until term.cancelled() ...
/// elector.shutdown().await; // drains the work, releases the lease at once
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Elector {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("group", &self.shared.group)
            .field("candidate", &self.shared.holder.id)
            .field("role", &*self.shared.role.borrow())
            .finish()
    }
}

impl Elector {
    /// Starts configuring a candidate for `group` on `store`. A group name
    /// that is invalid is reported by [`ElectorBuilder::start`].
    pub fn builder(store: impl LeaseStore, group: impl AsRef<str>) -> ElectorBuilder {
        Self::builder_for(Backend::Lease(Arc::new(store)), group)
    }

    /// Starts configuring a candidate whose leadership `coordinator` decides
    /// (for instance Kafka's consumer-group assignment in `tenure-kafka`).
    /// The handle works exactly as with a lease store.
    pub fn with_coordinator(
        coordinator: impl Coordinator,
        group: impl AsRef<str>,
    ) -> ElectorBuilder {
        Self::builder_for(Backend::Coordinator(Box::new(coordinator)), group)
    }

    fn builder_for(backend: Backend, group: impl AsRef<str>) -> ElectorBuilder {
        ElectorBuilder {
            backend,
            group: GroupName::new(group.as_ref()),
            candidate_id: None,
            config: Config::default(),
            metadata: Metadata::new(),
            clock: system_clock(),
            priority: None,
            preempt_after: None,
            cancel_on: None,
        }
    }

    /// The group this elector stands for.
    pub fn group(&self) -> &GroupName {
        &self.shared.group
    }

    /// Whether `other` is a handle to the same candidate (a clone of this
    /// one), not merely one with the same id.
    pub(crate) fn same_candidate(&self, other: &Elector) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// This candidate's id.
    pub fn candidate_id(&self) -> &str {
        &self.shared.holder.id
    }

    /// The validated timing in force.
    pub fn timing(&self) -> &Timing {
        &self.shared.timing
    }

    /// The current role.
    pub fn role(&self) -> Role {
        self.shared.role.borrow().clone()
    }

    /// A watch of the role, for `changed().await` loops.
    pub fn watch_role(&self) -> watch::Receiver<Role> {
        self.shared.role.clone()
    }

    /// Whether this candidate leads right now with a valid term: never true
    /// once the term's deadline has passed or the term was told to end.
    /// Lock-free (an atomic load and a clock read), cheap enough to guard
    /// every write of the work.
    pub fn is_leader(&self) -> bool {
        let until = self.shared.published.leader_until.load(Ordering::Acquire);
        if until == 0 {
            return false;
        }
        let now = if self.shared.system_clock {
            // The common case, without the indirect call.
            crate::clock::SystemClock::mono_now()
        } else {
            self.shared.clock.mono()
        };
        now.as_nanos() < until
    }

    /// The engine running this candidate, if it campaigns on a lease store
    /// (not through a [`Coordinator`]).
    pub fn engine(&self) -> Option<Engine> {
        self.shared.engine.clone().map(Engine::from_shared)
    }

    /// The current term, if leading and not yet cancelled.
    pub fn current_term(&self) -> Option<Term> {
        match &*self.shared.role.borrow() {
            Role::Leader(t) if t.is_valid() => Some(t.clone()),
            _ => None,
        }
    }

    /// A stream of [`Event`]s from now on. A receiver that falls more than
    /// 256 events behind skips the oldest.
    pub fn events(&self) -> EventStream {
        EventStream::new(self.shared.published.events.subscribe())
    }

    /// Waits until this candidate leads with a valid term (not cancelled,
    /// deadline not passed), and returns the term.
    ///
    /// Fails with [`ElectorError::Stopped`] once the elector has stopped, or
    /// [`ElectorError::Failed`] if it stopped because it can never lead.
    pub async fn wait_for_leadership(&self) -> Result<Term, ElectorError> {
        let mut rx = self.shared.role.clone();
        loop {
            match &*rx.borrow_and_update() {
                // A term past its deadline but not yet ended (the process was
                // paused, and the driver has not ticked since) is not handed
                // out: its end is already on the way.
                Role::Leader(t) if t.is_valid() => return Ok(t.clone()),
                Role::Stopped => return Err(self.stopped_error()),
                _ => {}
            }
            if rx.changed().await.is_err() {
                return Err(self.stopped_error());
            }
        }
    }

    /// Why the elector stopped, if it stopped on its own because it can
    /// never lead (see [`Event::Failed`]).
    pub fn fault(&self) -> Option<&Fault> {
        self.shared.published.fault.get()
    }

    fn stopped_error(&self) -> ElectorError {
        match self.shared.published.fault.get() {
            Some(fault) => ElectorError::Failed(fault.clone()),
            None => ElectorError::Stopped,
        }
    }

    /// Runs `work` for every term this candidate leads, until the elector
    /// stops.
    ///
    /// The work gets the [`Term`]; it should stop when
    /// [`Term::cancelled`] fires, and its future is dropped at
    /// [`Term::ended`] (at the deadline at the latest) if it has not. If the
    /// work returns `Ok(())` while still leading, the term is resigned and
    /// the candidate stands again. If it returns `Err(e)`, the term is
    /// resigned and `Err(e)` returned. Returns `Ok(())` once the elector has
    /// stopped after [`shutdown`](Elector::shutdown), and the
    /// [`ElectorError`] (converted into `E`) if it stopped because it can
    /// never lead ([`ElectorError::Failed`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tenure::{Elector, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let elector = Elector::builder(MemoryStore::new(), "outbox").start()?;
    /// let stopper = elector.clone();
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_millis(50)).await;
    ///     stopper.shutdown().await;
    /// });
    /// elector
    ///     .run_while_leader(|term| async move {
    ///         // e.g. relay the outbox, fencing each write with term.token()
    ///         term.cancelled().await;
    ///         Ok::<(), std::io::Error>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_while_leader<F, Fut, E>(&self, mut work: F) -> Result<(), E>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: From<ElectorError>,
    {
        loop {
            let term = match self.wait_for_leadership().await {
                Ok(term) => term,
                Err(ElectorError::Stopped) => return Ok(()),
                // The backend failed for good: the caller must hear why.
                Err(e) => return Err(e.into()),
            };
            let guard = term.hold();
            let outcome = term.bound(term.ended(), work(term.clone())).await;
            drop(guard);
            match outcome {
                None => {}
                Some(result) => {
                    if !term.is_cancelled() {
                        self.resign();
                    }
                    // Wait for the resignation to take effect (bounded by
                    // the deadline) before returning or looking for the
                    // next term: a caller that retries at once must not be
                    // handed the term it just gave up.
                    tokio::select! {
                        biased;
                        _ = term.cancelled() => {}
                        _ = term.expired() => {}
                    }
                    result?;
                }
            }
        }
    }

    /// Tells the elector the application is alive. Cheap enough for a tight
    /// loop (two atomic operations). Matters only with a liveness timeout.
    pub fn pulse(&self) {
        let p = &self.shared.pulse;
        p.last
            .fetch_max(self.shared.clock.now().mono.as_nanos(), Ordering::AcqRel);
        if p.waiting.swap(false, Ordering::AcqRel) {
            self.shared.link.pulse();
        }
    }

    /// Hands leadership to the candidate `candidate` (for a rolling
    /// upgrade, say): the work is told to stop and drained (bounded by the
    /// deadline), then the lease is released *reserved* for that candidate
    /// for one term, so it takes over at once while any other candidate
    /// waits; if it does not take the lease within the term, anyone may.
    /// Fencing and the stop-first rule hold as for any hand-over: the next
    /// term's token is greater, and this term's work has drained first.
    /// Does nothing if this candidate does not lead.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tenure::{Elector, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let old = Elector::builder(store.clone(), "jobs").candidate_id("v1-host").start()?;
    /// old.wait_for_leadership().await?;
    /// let new = Elector::builder(store, "jobs").candidate_id("v2-host").start()?;
    /// old.transfer_to("v2-host")?;
    /// let term = new.wait_for_leadership().await?;
    /// assert_eq!(term.token(), 2);
    /// # old.shutdown().await; new.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn transfer_to(&self, candidate: impl Into<String>) -> Result<(), ElectorError> {
        let to = candidate.into();
        check_name("candidate id", &to, MAX_CANDIDATE_BYTES)?;
        if self
            .shared
            .link
            .to_engine(|id| ToEngine::TransferTo(id, to))
        {
            Ok(())
        } else {
            Err(ElectorError::Unsupported {
                what: "handing leadership to a named candidate",
            })
        }
    }

    /// Publishes new metadata (a new address, a changed version): a leader
    /// writes it at once rather than at its next renewal, and followers and
    /// observers see it through the store's change feed (or their next
    /// poll). Keys starting with `tenure.` are refused.
    pub fn set_metadata(&self, metadata: Metadata) -> Result<(), ElectorError> {
        metadata.validate_published()?;
        self.update_metadata(|current| {
            // Keep tenure's own entries (a duty's last run).
            let reserved: Vec<(String, String)> = current
                .iter()
                .filter(|(k, _)| k.starts_with(RESERVED_PREFIX))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            *current = metadata;
            for (k, v) in reserved {
                current.insert(k, v);
            }
        })
    }

    /// Changes what this candidate publishes, and tells the backend.
    pub(crate) fn update_metadata(
        &self,
        change: impl FnOnce(&mut Metadata),
    ) -> Result<(), ElectorError> {
        let mut current = self
            .shared
            .metadata
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = current.clone();
        change(&mut next);
        next.validate()?;
        let sent = next.clone();
        if !self
            .shared
            .link
            .to_engine(|id| ToEngine::SetMetadata(id, sent))
        {
            return Err(ElectorError::Unsupported {
                what: "changing published metadata",
            });
        }
        *current = next;
        Ok(())
    }

    /// Gives up the current term, if any: the work is told to stop, and once
    /// it has drained (bounded by the deadline) the lease is released so
    /// another candidate can take over at once. This candidate stands again
    /// after one poll period.
    pub fn resign(&self) {
        self.shared.link.command(Command::Resign);
    }

    /// Stops for good: drains a leader's work (bounded by the term's
    /// deadline), releases the lease so the next candidate takes over at
    /// once, and returns when done.
    ///
    /// The term is not renewed while draining, so the work gets at most what
    /// is left of the current term; work that needs longer to stop should
    /// start stopping before calling this.
    pub async fn shutdown(&self) {
        self.shared.link.command(Command::Shutdown);
        let mut rx = self.shared.role.clone();
        // An error means the driver is gone, which is also stopped.
        let _ = rx.wait_for(|r| matches!(r, Role::Stopped)).await;
    }
}

/// The events of an [`Elector`]; see [`Elector::events`]. Also a
/// [`Stream`](futures_util::Stream) of them, for `StreamExt` combinators
/// and `tokio_stream`-style loops:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tenure::ElectorError> {
/// use futures_util::StreamExt;
/// let elector = tenure::Elector::builder(tenure::MemoryStore::new(), "billing").start()?;
/// let mut elected = elector
///     .events()
///     .filter(|e| std::future::ready(matches!(e, tenure::Event::Elected { .. })));
/// assert!(matches!(elected.next().await, Some(tenure::Event::Elected { token: 1 })));
/// # elector.shutdown().await;
/// # Ok(()) }
/// ```
pub struct EventStream {
    next: ReusableBoxFuture<'static, Received>,
}

/// One receive, and the receiver to receive the next with.
type Received = (
    Result<Event, broadcast::error::RecvError>,
    broadcast::Receiver<Event>,
);

async fn receive(mut rx: broadcast::Receiver<Event>) -> Received {
    let event = rx.recv().await;
    (event, rx)
}

impl EventStream {
    fn new(rx: broadcast::Receiver<Event>) -> Self {
        EventStream {
            next: ReusableBoxFuture::new(receive(rx)),
        }
    }

    /// The next event, or `None` once the elector has stopped and every
    /// event was delivered.
    pub async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| {
            futures_util::Stream::poll_next(std::pin::Pin::new(&mut *self), cx)
        })
        .await
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

/// The events as a stream; a receiver that falls more than 256 events
/// behind skips the oldest, as [`EventStream::next`] does.
impl futures_util::Stream for EventStream {
    type Item = Event;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Event>> {
        loop {
            let (event, rx) = std::task::ready!(self.next.poll(cx));
            self.next.set(receive(rx));
            match event {
                Ok(e) => return std::task::Poll::Ready(Some(e)),
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return std::task::Poll::Ready(None),
            }
        }
    }
}
