//! How a group and its record are a Lease object: the name, the labels, the
//! annotations and the spec (see the [crate docs](crate#the-lease-object)).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use sha2::Digest as _;
use tenure::error::RecordError;
use tenure::{GroupName, LeaseRecord, StoreError, Version, Versioned, WallTime};

/// The prefix of every annotation tenure writes.
pub const ANNOTATION_PREFIX: &str = "tenure.dev/";
/// The annotation holding the group's name, verbatim.
pub const GROUP_ANNOTATION: &str = "tenure.dev/group";
/// The annotation holding tenure's record (JSON: format version `v`,
/// holder and incarnation, token, term, times, metadata). What tenure
/// reads; the spec mirrors it for people and tools.
pub const RECORD_ANNOTATION: &str = "tenure.dev/record";
/// The annotation holding the fencing token, for people (the record holds
/// it too; the two must agree).
pub const TOKEN_ANNOTATION: &str = "tenure.dev/token";
/// The label every Lease of tenure's carries.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY_VALUE: &str = "tenure";
/// The start of a Lease name that is not the group name itself.
pub const ESCAPED: &str = "t--";
/// The start of a Lease name made from a hash of the group name.
pub const HASHED: &str = "t--h-";

/// Whether `s` is a DNS-1123 subdomain (what a Lease's name must be).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `s` is a DNS-1123 label (a namespace's name).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns1123_subdomain(s)
}

/// Whether `key` is a qualified name (a label or annotation key).
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns1123_subdomain(p)) {
        return false;
    }
    !name.is_empty() && name.len() <= 63 && is_label_value(name)
}

/// Whether `v` is a valid label value.
pub fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

fn base32(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(BASE32[((acc >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(BASE32[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

fn unbase32(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 5 / 8);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = u32::try_from(BASE32.iter().position(|&x| x == c)?).ok()?;
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
        acc &= (1 << bits) - 1;
    }
    Some(out)
}

/// The name of the group's Lease:
///
/// * the group name itself, if it is a valid Lease name (a DNS-1123
///   subdomain: lowercase letters, digits, `-` and `.`, at most 253) that
///   does not start with `t--`;
/// * else `t--` and the lowercase base32 (RFC 4648, no padding) of its
///   UTF-8 bytes, if that fits in 253 characters (names up to 156 bytes);
/// * else `t--h-` and the hex SHA-256 of its UTF-8 bytes.
///
/// Every Lease also holds the group name verbatim in the annotation
/// [`GROUP_ANNOTATION`], which a read checks, so even two names whose
/// hashes collided could not be mistaken for each other.
///
/// ```
/// use tenure::GroupName;
/// use tenure_kubernetes::lease_name;
/// assert_eq!(lease_name(&GroupName::new("nightly-billing").unwrap()), "nightly-billing");
/// assert_eq!(lease_name(&GroupName::new("Billing").unwrap()), "t--ijuwy3djnztq");
/// assert!(lease_name(&GroupName::new("X".repeat(200)).unwrap()).starts_with("t--h-"));
/// ```
pub fn lease_name(group: &GroupName) -> String {
    let g = group.as_str();
    if is_dns1123_subdomain(g) && !g.starts_with(ESCAPED) {
        return g.to_owned();
    }
    let encoded = base32(g.as_bytes());
    if ESCAPED.len() + encoded.len() <= 253 {
        return format!("{ESCAPED}{encoded}");
    }
    let digest = sha2::Sha256::digest(g.as_bytes());
    let hex: String = digest.iter().fold(String::with_capacity(64), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    });
    format!("{HASHED}{hex}")
}

/// The group a Lease name stands for, where the name alone says it (not
/// for hashed names: the annotation does).
pub fn group_of_name(name: &str) -> Option<String> {
    if name.starts_with(HASHED) {
        return None;
    }
    match name.strip_prefix(ESCAPED) {
        Some(encoded) => String::from_utf8(unbase32(encoded)?).ok(),
        None => Some(name.to_owned()),
    }
}

/// What a store remembers of a Lease it read or wrote, to write the next
/// one: its uid (the precondition that keeps a PUT from re-creating a
/// deleted Lease), the term's start and the transitions so far, and the
/// labels and annotations others added (kept, not dropped).
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// The resourceVersion this is about.
    pub version: u64,
    /// `metadata.uid`.
    pub uid: String,
    /// The token of the record it held.
    pub token: u64,
    /// `spec.acquireTime`.
    pub acquire: Option<MicroTime>,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// Labels not tenure's.
    pub labels: BTreeMap<String, String>,
    /// Annotations not tenure's.
    pub annotations: BTreeMap<String, String>,
}

/// A wall time as a `MicroTime`; `None` beyond what one holds.
fn micro(t: WallTime) -> Option<MicroTime> {
    let ms = i64::try_from(t.as_millis()).ok()?;
    chrono::DateTime::from_timestamp_millis(ms).map(MicroTime)
}

/// `spec.leaseDurationSeconds`: the term in whole seconds, rounded up,
/// at least 1 (the API server refuses 0) and at most `i32::MAX`.
fn duration_seconds(term: Duration) -> i32 {
    let secs = term
        .as_secs()
        .saturating_add(u64::from(term.subsec_nanos() > 0));
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// The Lease that holds `record` for `group`, after `prev` (the Lease it
/// replaces; `None` for a create). Its `resourceVersion` and `uid` are
/// `prev`'s: the PUT's preconditions.
pub fn lease_for(
    group: &GroupName,
    record: &LeaseRecord,
    prev: Option<&Known>,
    label: Option<&(String, String)>,
) -> Lease {
    let holder = record.holder_id().map(str::to_owned);
    let new_term = prev.is_none_or(|p| p.token != record.token);
    let acquire = match (prev, new_term, &holder) {
        (_, true, Some(_)) | (None, _, Some(_)) => micro(record.renewed_at),
        (Some(p), _, _) => p.acquire.clone(),
        (None, _, None) => None,
    };
    let transitions = match prev {
        None => 0,
        Some(p) if new_term && holder.is_some() => p.transitions.saturating_add(1),
        Some(p) => p.transitions,
    };
    let mut labels = prev.map(|p| p.labels.clone()).unwrap_or_default();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    if let Some((k, v)) = label {
        labels.insert(k.clone(), v.clone());
    }
    let mut annotations = prev.map(|p| p.annotations.clone()).unwrap_or_default();
    annotations.insert(GROUP_ANNOTATION.into(), group.as_str().to_owned());
    annotations.insert(
        RECORD_ANNOTATION.into(),
        String::from_utf8_lossy(&record.encode()).into_owned(),
    );
    annotations.insert(TOKEN_ANNOTATION.into(), record.token.to_string());
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(group)),
            resource_version: prev.map(|p| p.version.to_string()),
            uid: prev.map(|p| p.uid.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        #[allow(
            clippy::needless_update,
            reason = "Kubernetes 1.31 and later add fields (strategy, preferredHolder): the binary chooses the version"
        )]
        spec: Some(LeaseSpec {
            holder_identity: holder,
            lease_duration_seconds: Some(duration_seconds(record.term)),
            acquire_time: acquire,
            renew_time: micro(record.renewed_at),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

fn foreign(group: &GroupName, detail: String) -> StoreError {
    StoreError::Record {
        group: group.clone(),
        source: RecordError::Foreign { detail },
    }
}

/// The holder a Lease's spec names, for messages.
pub fn spec_holder(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
        .map_or_else(|| "nobody".to_owned(), |h| format!("{h:?}"))
}

/// The record and version a Lease holds for `group`, and what to remember
/// of it. A Lease tenure did not write (no record annotation: client-go's
/// leader election, say), one that names another group, or one whose spec
/// another program changed, is a foreign record naming its holder.
pub fn record_of(group: &GroupName, lease: &Lease) -> Result<(Versioned, Known), StoreError> {
    let name = lease.metadata.name.as_deref().unwrap_or("");
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    let Some(raw) = annotations.get(RECORD_ANNOTATION) else {
        return Err(foreign(
            group,
            format!(
                "Lease {name:?} was not written by tenure (it has no {RECORD_ANNOTATION} annotation) and is held by {}; another program (client-go's leader election?) uses it: choose another group name, or delete the Lease if nothing uses it",
                spec_holder(lease)
            ),
        ));
    };
    if let Some(other) = annotations.get(GROUP_ANNOTATION) {
        if other != group.as_str() {
            return Err(foreign(
                group,
                format!("Lease {name:?} holds group {other:?}, not this one"),
            ));
        }
    }
    let record = LeaseRecord::decode(raw.as_bytes()).map_err(|source| StoreError::Record {
        group: group.clone(),
        source,
    })?;
    if let Some(token) = annotations.get(TOKEN_ANNOTATION) {
        if token.parse::<u64>().ok() != Some(record.token) {
            return Err(StoreError::Record {
                group: group.clone(),
                source: RecordError::Corrupt {
                    detail: format!(
                        "Lease {name:?}: annotation {TOKEN_ANNOTATION} is {token:?} but the record's token is {}: edited by hand?",
                        record.token
                    ),
                },
            });
        }
    }
    let spec = lease.spec.clone().unwrap_or_default();
    let spec_holder_id = spec.holder_identity.clone().filter(|h| !h.is_empty());
    if spec_holder_id.as_deref() != record.holder_id() {
        return Err(foreign(
            group,
            format!(
                "Lease {name:?} names holder {} in spec.holderIdentity but tenure's record names {}: another program (client-go's leader election?) took it over; stop that program or choose another group name",
                spec_holder(lease),
                record.holder_id().map_or_else(|| "nobody".to_owned(), |h| format!("{h:?}"))
            ),
        ));
    }
    let rv = lease.metadata.resource_version.as_deref().unwrap_or("");
    let version = rv.parse::<u64>().ok().filter(|v| *v > 0).ok_or_else(|| {
        StoreError::Unavailable {
            message: format!(
                "the API server returned Lease {name:?} with resourceVersion {rv:?}, not a positive integer"
            ),
            source: None,
        }
    })?;
    let known = Known {
        version,
        uid: lease.metadata.uid.clone().unwrap_or_default(),
        token: record.token,
        acquire: spec.acquire_time,
        transitions: spec.lease_transitions.unwrap_or(0).max(0),
        labels: lease
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k != MANAGED_BY_LABEL)
            .collect(),
        annotations: annotations
            .into_iter()
            .filter(|(k, _)| !k.starts_with(ANNOTATION_PREFIX))
            .collect(),
    };
    Ok((
        Versioned {
            record,
            version: Version(version),
        },
        known,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_reversibly() {
        for g in [
            "a",
            "nightly-billing",
            "Billing",
            "t--x",
            "épée/🦀",
            "trailing space ",
            "a.b",
            ".a",
            &"ü".repeat(78),
            &"x".repeat(255),
        ] {
            let group = GroupName::new(g).unwrap();
            let name = lease_name(&group);
            assert!(is_dns1123_subdomain(&name), "{g:?} → {name:?}");
            match group_of_name(&name) {
                Some(back) => assert_eq!(back, g),
                None => assert!(name.starts_with(HASHED), "{g:?}"),
            }
        }
        assert_ne!(
            lease_name(&GroupName::new("CamelCase").unwrap()),
            lease_name(&GroupName::new("camelcase").unwrap())
        );
        assert_eq!(unbase32("!"), None);
    }

    #[test]
    fn spec_values_stay_in_range() {
        assert_eq!(duration_seconds(Duration::from_millis(1)), 1);
        assert_eq!(duration_seconds(Duration::from_millis(10_001)), 11);
        assert_eq!(duration_seconds(Duration::MAX), i32::MAX);
        assert!(micro(WallTime::from_millis(u64::MAX)).is_none());
    }
}
