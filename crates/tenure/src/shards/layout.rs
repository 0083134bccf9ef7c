//! Where a sharded set named `SET` keeps its records in the store: one
//! group per record, under the set's name. `tenure status --group SET`
//! reads them through these functions, so that the set and the tools that
//! show it cannot disagree about a name.
//!
//! | group | what |
//! |---|---|
//! | `SET/members/ID` | member `ID`'s membership lease |
//! | `SET/shards/SHARD` | the lease of shard `SHARD` |
//! | `SET/leader` | the catalog leader's lease (a set with a [`ShardSource`](super::ShardSource)) |
//! | `SET/catalog/N` | part `N` of the published catalog |
//! | `SET/finished/SHARD` | the permanent mark that `SHARD` was read to its end |
//!
//! ```
//! use tenure::shards::layout;
//! assert_eq!(layout::shard_group("orders", "7"), "orders/shards/7");
//! assert!(layout::member_group("orders", "m1").starts_with(&layout::member_prefix("orders")));
//! ```

/// The prefix of every membership record of `set`.
pub fn member_prefix(set: &str) -> String {
    format!("{set}/members/")
}

/// The membership record of `member` in `set`.
pub fn member_group(set: &str, member: &str) -> String {
    format!("{}{member}", member_prefix(set))
}

/// The prefix of every shard lease of `set`.
pub fn shard_prefix(set: &str) -> String {
    format!("{set}/shards/")
}

/// The lease of `shard` in `set`.
pub fn shard_group(set: &str, shard: &str) -> String {
    format!("{}{shard}", shard_prefix(set))
}

/// The prefix of the catalog's parts of `set`.
pub fn catalog_prefix(set: &str) -> String {
    format!("{set}/catalog/")
}

/// Part `part` of the catalog of `set`.
pub fn catalog_group(set: &str, part: u64) -> String {
    format!("{}{part}", catalog_prefix(set))
}

/// The prefix of the finished marks of `set`.
pub fn finished_prefix(set: &str) -> String {
    format!("{set}/finished/")
}

/// The finished mark of `shard` in `set`.
pub fn finished_group(set: &str, shard: &str) -> String {
    format!("{}{shard}", finished_prefix(set))
}

/// The catalog leader's lease of `set`.
pub fn leader_group(set: &str) -> String {
    format!("{set}/leader")
}
