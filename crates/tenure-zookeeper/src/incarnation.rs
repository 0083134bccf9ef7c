//! A group node deleted and created again (by hand, or by anything else):
//! what tells its incarnations apart, so that a compare-and-swap meant for
//! the old node never applies to the new one, and fencing tokens never go
//! back.
//!
//! ZooKeeper conditions a write only on a node's `dataVersion`, which a
//! node created again starts at 0 again: a handle that remembers
//! `dataVersion` 5 of the old node could overwrite the new one once that
//! reached 5 too. What does tell incarnations apart is the node's `czxid`
//! (the zxid of its creation: never reused), but ZooKeeper cannot condition
//! a write on it. So every group node gets a **guard**: an empty child
//! named after its own `czxid` (`czxid-<decimal>`), and every
//! compare-and-swap is one `multi` of `check` (the guard exists) and
//! `setData` (at the data version): a node created again has other guards
//! (or none), so a write meant for an older incarnation fails as a whole.
//!
//! The guard is made by the first compare-and-swap that finds none (a node
//! just created, one written by an older tenure or by hand): once a read
//! shows the node is the incarnation the guard is for (a guard made under
//! another one might not be deleted again, with no reply or an ACL
//! without DELETE), in one round trip it creates the guard and reads the
//! node, and keeps the guard only if the node is still that incarnation
//! (otherwise it deletes it at once and the write is a conflict).
//!
//! A deleted node reads as "no node"; if that meant "never written", the
//! next term's token would start again at 1. Deletions leave a mark on the
//! prefix node: each creation or deletion of a child raises its `cversion`
//! by one, so `cversion > numChildren` once any child was ever deleted.
//! Under such a prefix node a missing group reads as a record released at
//! the token floor, the prefix node's `pzxid` (the zxid of its last child
//! created or deleted, so at or after the deletion), with that zxid as its
//! version; the next term gets `pzxid + 1`, above every token the deleted
//! node held (a token is stored by a write, and rises by one per term, so
//! it never exceeds the zxid of the write that stored it). A
//! compare-and-swap with that version creates the node, and one expecting
//! no record conflicts. A node created between the read that found it
//! missing and the read of the prefix node has the floor as its own
//! version, so a single read that finds a floor reads the node once more
//! (a batch is one `multiRead`, which ZooKeeper answers between writes).

use std::time::Duration;

use tenure::{LeaseRecord, Metadata, Version, Versioned, WallTime};
use zookeeper_client as zk;

/// The name of a group node's guard: its `czxid`, in decimal.
pub(crate) fn guard_name(czxid: i64) -> String {
    format!("czxid-{czxid}")
}

/// The token floor of a missing group under a prefix node with this stat:
/// `Some(pzxid)` once any child of the prefix node was deleted, `None`
/// while none ever was (a missing group was then never written).
pub(crate) fn token_floor(prefix: &zk::Stat) -> Option<u64> {
    if prefix.cversion > prefix.num_children {
        u64::try_from(prefix.pzxid).ok().filter(|f| *f > 0)
    } else {
        None
    }
}

/// What a missing group reads as under a prefix node whose children were
/// deleted: released at the token floor, versioned by it.
pub(crate) fn released_at(floor: u64) -> Versioned {
    let never = WallTime::from_millis(0);
    Versioned {
        record: LeaseRecord {
            holder: None,
            token: floor,
            term: Duration::ZERO,
            renewed_at: never,
            expires_at: never,
            metadata: Metadata::new(),
        },
        version: Version(floor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(cversion: i32, num_children: i32, pzxid: i64) -> zk::Stat {
        zk::Stat {
            czxid: 1,
            mzxid: 1,
            pzxid,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children,
        }
    }

    #[test]
    fn only_a_prefix_node_that_lost_a_child_has_a_floor() {
        // Three children created, none deleted.
        assert_eq!(token_floor(&prefix(3, 3, 90)), None);
        // Two created, one deleted.
        assert_eq!(token_floor(&prefix(3, 1, 90)), Some(90));
        let floor = released_at(90);
        assert_eq!(floor.version, Version(90));
        assert_eq!(floor.record.token, 90);
        assert_eq!(floor.record.holder, None);
        floor.record.check().unwrap();
    }
}
