//! What a sharded-tier run is made of.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::elector::StoreTroubleRates;
use crate::faults::check_intervals;
use crate::params::{check_range, range_flag, Shared, SimError};
use crate::tier::{FaultPlan, Params, Tier};

use super::plan::Planned;
use super::report::{ShardReport, ShardSummary};

/// How often each membership change and fault strikes in the sharded tier:
/// mean intervals of exponential distributions over the whole set; `None`
/// turns a kind off. Windows of store trouble hit one member's view of the
/// store ([`tenure::Faults`] of that member's process).
#[derive(Clone, Debug, PartialEq)]
pub struct ShardFaultRates {
    /// A new member (an id never seen before) joins, unless the set is at
    /// [`ShardTier::max_members`].
    pub join_every: Option<Duration>,
    /// A member leaves gracefully ([`tenure::Shards::shutdown`]); most come
    /// back later under the same id.
    pub leave_every: Option<Duration>,
    /// A member's process dies: its work stops at once, it never reaches the
    /// store again, and it comes back later under the same id.
    pub crash_every: Option<Duration>,
    /// A member's process stops running for a while (70 % of the time for
    /// longer than a term), its clock still counting.
    pub pause_every: Option<Duration>,
    /// Windows in which a member's view of the store is cut off, slow,
    /// failing or losing replies.
    pub store_trouble: StoreTroubleRates,
}

impl Default for ShardFaultRates {
    fn default() -> Self {
        ShardFaultRates {
            join_every: Some(Duration::from_secs(20)),
            leave_every: Some(Duration::from_secs(20)),
            crash_every: Some(Duration::from_secs(20)),
            pause_every: Some(Duration::from_secs(15)),
            store_trouble: StoreTroubleRates {
                partition_every: Some(Duration::from_secs(20)),
                slow_every: Some(Duration::from_secs(20)),
                failing_every: Some(Duration::from_secs(20)),
                lost_replies_every: Some(Duration::from_secs(12)),
            },
        }
    }
}

impl FaultPlan for ShardFaultRates {
    /// No membership changes and no faults before the tail.
    fn none() -> Self {
        ShardFaultRates {
            join_every: None,
            leave_every: None,
            crash_every: None,
            pause_every: None,
            store_trouble: StoreTroubleRates::none(),
        }
    }

    fn check(&self) -> Result<(), SimError> {
        check_intervals(self.kinds())
    }
}

impl ShardFaultRates {
    /// Every kind of change and fault with its mean interval, in the order
    /// a run's plan draws them in.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = (Planned, Option<Duration>)> {
        let windows = self
            .store_trouble
            .kinds()
            .map(|(w, every)| (Planned::Window(w), every));
        [
            (Planned::Join, self.join_every),
            (Planned::Leave, self.leave_every),
            (Planned::Crash, self.crash_every),
            (Planned::Pause, self.pause_every),
        ]
        .into_iter()
        .chain(windows)
    }
}

/// The parameters of a sharded-tier run; [`ShardParams::default`] is what
/// the test suite and `tenure-sim --shards` run unless told otherwise. Its
/// shared settings hold for every lease (membership and shards); its
/// members do not pulse, notifications are drawn per member, latency per
/// process, and membership changes too happen in the fault phase only.
pub type ShardParams = Params<ShardTier>;

/// The sharded tier's own settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardTier {
    /// How many members start, drawn per seed from this range (2 to 12).
    pub members: RangeInclusive<usize>,
    /// The most members running at once (joins beyond it are skipped).
    pub max_members: usize,
    /// How many shards the set has, drawn per seed from this range (1 to
    /// 64).
    pub shards: RangeInclusive<usize>,
    /// Whether the set follows a changing catalog
    /// ([`tenure::ShardsBuilder::catalog`]): during the fault phase shards
    /// are split (two children after a parent), merged (a child after two
    /// parents), added and removed, and a parent's holder marks it
    /// finished; the checker adds that no child is worked before its
    /// parents were marked finished, and the tail settles over the
    /// catalog's ready shards.
    pub catalog: bool,
    /// A negative control for `catalog`: the source lists children
    /// without their parents, so they are worked at once, and the checker
    /// must report it.
    pub catalog_forgets_parents: bool,
}

impl Default for ShardTier {
    fn default() -> Self {
        ShardTier {
            members: 2..=5,
            max_members: 8,
            shards: 4..=24,
            catalog: false,
            catalog_forgets_parents: false,
        }
    }
}

impl Tier for ShardTier {
    type Faults = ShardFaultRates;
    type Report = ShardReport;
    type Summary = ShardSummary;

    const FLAG: Option<&'static str> = Some("--shards");
    const MIN_LATENCY: Duration = Duration::from_millis(1);
    const REPLAY_WITH: &'static str = "shards::run_seed and the same ShardParams";

    /// The shared settings' defaults without liveness pulses.
    fn default_shared() -> Shared {
        Shared {
            liveness: None,
            ..Shared::default()
        }
    }

    fn check(&self) -> Result<(), SimError> {
        check_range("member count", &self.members, 2, 12)?;
        let most = *self.members.end();
        if self.max_members < most || self.max_members > 16 {
            return Err(SimError::Params(format!(
                "at most {} members at once: give a cap from {most} (the most that start) to 16",
                self.max_members
            )));
        }
        check_range("shard count", &self.shards, 1, 64)
    }

    fn flags(&self, default: &Self) -> String {
        let mut flags = range_flag("nodes", &self.members, &default.members);
        if self.max_members != default.max_members {
            flags += &format!(" --max-members {}", self.max_members);
        }
        flags += &range_flag("shard-count", &self.shards, &default.shards);
        if self.catalog {
            flags += " --catalog";
        }
        if self.catalog_forgets_parents {
            flags += " --catalog-forgets-parents";
        }
        flags
    }

    fn run(params: &ShardParams, seed: u64) -> Result<ShardReport, SimError> {
        super::run_seed(seed, params)
    }
}
