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
    /// Hostile catalog faults for `catalog` (issue 39), each drawn per seed
    /// (from a generator of its own, so that the rest of the run is drawn
    /// as without them): shard names padded with 100 bytes of `\` and `"`
    /// (escaped twice where the catalog stores them); one more shard
    /// naming 300 parents, which cannot be published and must not stop the
    /// others; a part 0 planted 1 to 3 times in the fault phase claiming
    /// 65,536 parts (every member's reads of catalog parts in the half term
    /// after must stay under [`HOSTILE_READS_PER_MEMBER`] each); and, at the
    /// tail's start, the source of the member that listed it last failing
    /// on that member only, with a shard added: the set must still settle
    /// (a member whose source works must take over the duty).
    pub catalog_hostile: bool,
    /// A negative control for `catalog_hostile`: the source fails on every
    /// member at the tail's start, so the shard added is never published,
    /// and the checker must report the set unsettled.
    pub catalog_source_fails_everywhere: bool,
    /// A negative control for `catalog_hostile`: the checker expects the
    /// shard naming 300 parents to be held, and must report it held by
    /// nobody.
    pub catalog_expects_left_out: bool,
    /// A negative control for `catalog_hostile`: the part 0 planted comes
    /// with every part it claims (a whole catalog of 4,096 empty parts,
    /// the most a reader follows), so that readers do read them all, and
    /// the cost check must report it.
    pub catalog_plants_whole: bool,
}

/// The most catalog part reads per running member in the half term after
/// a hostile part 0 is planted (`catalog_hostile`): a member reads part 0
/// and one batch of 16 at each poll or feed delivery, the leader writes
/// the catalog again. Following the 65,536 parts it claims costs 65,535
/// reads at each.
pub const HOSTILE_READS_PER_MEMBER: usize = 1_000;

impl Default for ShardTier {
    fn default() -> Self {
        ShardTier {
            members: 2..=5,
            max_members: 8,
            shards: 4..=24,
            catalog: false,
            catalog_forgets_parents: false,
            catalog_hostile: false,
            catalog_source_fails_everywhere: false,
            catalog_expects_left_out: false,
            catalog_plants_whole: false,
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
        if self.catalog_hostile && !self.catalog {
            return Err(SimError::Params(
                "hostile catalog faults need a catalog: give --catalog with --catalog-hostile"
                    .into(),
            ));
        }
        let controls = self.catalog_source_fails_everywhere
            || self.catalog_expects_left_out
            || self.catalog_plants_whole;
        if controls && !self.catalog_hostile {
            return Err(SimError::Params(
                "the hostile catalog's negative controls need --catalog-hostile".into(),
            ));
        }
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
        for (on, flag) in [
            (self.catalog_hostile, " --catalog-hostile"),
            (
                self.catalog_source_fails_everywhere,
                " --catalog-source-fails-everywhere",
            ),
            (self.catalog_expects_left_out, " --catalog-expects-left-out"),
            (self.catalog_plants_whole, " --catalog-plants-whole"),
        ] {
            if on {
                flags += flag;
            }
        }
        flags
    }

    fn run(params: &ShardParams, seed: u64) -> Result<ShardReport, SimError> {
        super::run_seed(seed, params)
    }
}
