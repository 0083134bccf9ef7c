//! The lease record every store keeps, one per group, and its encoding.
//!
//! A record is never deleted: a released lease is a record with no holder,
//! so the fencing token survives every hand-over and keeps rising.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::WallTime;
use crate::error::{ConfigError, RecordError};

mod json;

/// The record format this build writes. Records with a higher version were
/// written by a newer tenure and are refused rather than overwritten.
pub const FORMAT_VERSION: u32 = 1;

/// Largest encoded metadata, in bytes.
pub const MAX_METADATA_BYTES: usize = 4096;

/// Longest group name, in bytes of UTF-8.
pub const MAX_GROUP_BYTES: usize = 255;

/// Longest candidate id, in bytes of UTF-8.
pub const MAX_CANDIDATE_BYTES: usize = 255;

/// Metadata keys under this prefix are tenure's own (a transfer's
/// successor, a duty's last run); applications may not set them.
pub const RESERVED_PREFIX: &str = "tenure.";

/// Reserved metadata keys under this prefix record periodic duties' last
/// runs; a release carries them forward to the next term.
pub const DUTY_PREFIX: &str = "tenure.duty.";

/// The reserved metadata key naming the candidate a lease is handed to
/// (see [`LeaseRecord::transfer_to`]).
pub const TRANSFER_TO_KEY: &str = "tenure.transfer-to";

/// The metadata key of a candidate's priority, published in its record by
/// an elector built with
/// [`ElectorBuilder::priority`](crate::ElectorBuilder::priority); a record
/// without it is priority 0.
pub const PRIORITY_KEY: &str = "tenure.priority";

/// The metadata key that, beside [`TRANSFER_TO_KEY`] on a held record,
/// makes the transfer request a preemption: the priority of the candidate
/// that asks. The leader hands over only if it is above its own; a request
/// without it is an operator's (`tenure release --to`), always honoured.
pub const TRANSFER_PRIORITY_KEY: &str = "tenure.transfer-priority";

/// The reserved metadata key a member of a sharded set publishes in its
/// membership record (`SET/members/ID`) while it cannot read the set's
/// shard catalog (a store failure of its own, or a catalog torn or
/// hostile for longer than two polls): why, in a line. It stands for no
/// shard it has not read in a catalog; `tenure status --group SET` shows
/// it. Removed once it reads a whole catalog again.
pub const CATALOG_UNREADABLE_KEY: &str = "tenure.catalog-unreadable";

/// The reserved metadata key that a writer other than the holder sets when
/// it rewrites the holder's record keeping holder, token and times (a
/// transfer or preemption request, or its withdrawal): the version of the
/// holder's own write that it rewrote, carried through a chain of such
/// rewrites ([`Versioned::rewrite_base`]). A holder never writes it, so
/// such a write is known to be no renewal, and a candidate that saw the
/// holder's write (or any rewrite of it) keeps counting its takeover wait
/// from then (see [`LeaseRecord::rewrites`]): requests written into a dead
/// leader's record do not delay the takeover.
pub const REWRITTEN_OVER_KEY: &str = "tenure.rewritten-over";

/// The name of a role that exactly one candidate holds at a time.
///
/// Any UTF-8 text of 1 to 255 bytes without control characters.
///
/// ```
/// use tenure::GroupName;
/// assert!(GroupName::new("nightly-billing").is_ok());
/// assert!(GroupName::new("épée/🦀").is_ok());
/// assert!(GroupName::new("").is_err());
/// ```
///
/// Shared, not copied: a clone (one per store operation in the engine) is
/// a reference count, not a string.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupName(std::sync::Arc<str>);

impl GroupName {
    /// Checks and wraps a group name.
    pub fn new(name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        check_name("group name", &name, MAX_GROUP_BYTES)?;
        Ok(GroupName(name.into()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for GroupName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for GroupName {
    type Error = ConfigError;
    fn try_from(s: &str) -> Result<Self, ConfigError> {
        // Straight into its shared form, without a `String` on the way (a
        // store's feed names a group per change).
        check_name("group name", s, MAX_GROUP_BYTES)?;
        Ok(GroupName(s.into()))
    }
}

impl TryFrom<String> for GroupName {
    type Error = ConfigError;
    fn try_from(s: String) -> Result<Self, ConfigError> {
        GroupName::new(s)
    }
}

pub(crate) fn check_name(what: &'static str, s: &str, max: usize) -> Result<(), ConfigError> {
    if s.is_empty() {
        return Err(ConfigError::EmptyName { what });
    }
    if s.len() > max {
        return Err(ConfigError::NameTooLong {
            what,
            len: s.len(),
            max,
        });
    }
    if s.chars().any(char::is_control) {
        return Err(ConfigError::ControlCharacter { what });
    }
    Ok(())
}

/// Who holds a lease: the candidate id, and the incarnation (a random number
/// drawn when an elector starts) that tells two processes apart even if they
/// were given the same id by mistake, or one restarted with the same id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Holder {
    /// The candidate id.
    pub id: String,
    /// The elector instance that wrote the record.
    pub incarnation: u64,
}

/// Key-value metadata a leader publishes in its record, such as the address
/// where followers reach it (vimeo's `HostPort` and `ConnectionParams`).
///
/// ```
/// use tenure::Metadata;
/// let md = Metadata::address("10.0.0.7:8080").with("zone", "eu-west-1a");
/// assert_eq!(md.get("address"), Some("10.0.0.7:8080"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Metadata(BTreeMap<String, String>);

impl Metadata {
    /// Empty metadata.
    pub fn new() -> Self {
        Metadata::default()
    }

    /// Metadata holding the leader's address under the key `address`.
    pub fn address(addr: impl Into<String>) -> Self {
        Metadata::new().with("address", addr)
    }

    /// Adds or replaces one entry.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }

    /// Adds or replaces one entry in place.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Iterates over the entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks metadata an application publishes: within
    /// [`MAX_METADATA_BYTES`], and no key under [`RESERVED_PREFIX`].
    pub fn validate_published(&self) -> Result<(), ConfigError> {
        if let Some(key) = self.0.keys().find(|k| k.starts_with(RESERVED_PREFIX)) {
            return Err(ConfigError::ReservedMetadataKey { key: key.clone() });
        }
        self.validate()
    }

    /// The priority these metadata publish ([`PRIORITY_KEY`]); 0 if none,
    /// or if it is no number.
    pub fn priority(&self) -> u32 {
        self.get(PRIORITY_KEY)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Removes an entry, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.0.remove(key)
    }

    /// The encoded size, checked against [`MAX_METADATA_BYTES`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let len = serde_json::to_vec(&self.0).map_or(usize::MAX, |v| v.len());
        if len > MAX_METADATA_BYTES {
            return Err(ConfigError::MetadataTooLarge {
                len,
                max: MAX_METADATA_BYTES,
            });
        }
        Ok(())
    }
}

impl FromIterator<(String, String)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        Metadata(iter.into_iter().collect())
    }
}

/// A store's own version of a record (a row counter, an etcd `mod_revision`,
/// a DynamoDB version attribute). Compare-and-swap compares this, never the
/// record's contents.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Version(pub u64);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// The lease of one group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRecord {
    /// The current holder, or `None` once released.
    pub holder: Option<Holder>,
    /// The fencing token of the holder's term; kept on renewal, raised on
    /// every new term, kept by a release.
    pub token: u64,
    /// The term length the holder promised to respect.
    pub term: Duration,
    /// Wall time at which the holder sent the write.
    pub renewed_at: WallTime,
    /// `renewed_at + term`: for display and the optional early takeover.
    pub expires_at: WallTime,
    /// What the holder publishes about itself.
    pub metadata: Metadata,
}

impl LeaseRecord {
    /// The holder's candidate id, if the lease is held.
    pub fn holder_id(&self) -> Option<&str> {
        self.holder.as_ref().map(|h| h.id.as_str())
    }

    /// The candidate this lease is being handed to, if any. On a held
    /// record it is a request (an operator asks the holder to hand over);
    /// on a released one it reserves the lease for that candidate for one
    /// term, after which anyone may take it.
    pub fn transfer_to(&self) -> Option<&str> {
        self.metadata
            .get(TRANSFER_TO_KEY)
            .filter(|id| !id.is_empty())
    }

    /// The priority its holder published ([`PRIORITY_KEY`]); 0 if none, or
    /// if it is no number.
    pub fn priority(&self) -> u32 {
        self.metadata.priority()
    }

    /// The priority a transfer request in this record names
    /// ([`TRANSFER_PRIORITY_KEY`]): `None` where it names none (an
    /// operator's request, always honoured), `Some(None)` where it is no
    /// number (a leader honours it not, and no candidate asks over it).
    pub(crate) fn request_priority(&self) -> Option<Option<u32>> {
        self.metadata
            .get(TRANSFER_PRIORITY_KEY)
            .map(|p| p.parse::<u32>().ok())
    }

    /// This held record with a request to hand over to `to` written into
    /// it (holder, token and times kept): a preemption request naming the
    /// asker's `priority`, or an operator's request (`None`, always
    /// honoured). Marked with [`REWRITTEN_OVER_KEY`] as a rewrite of the
    /// holder's write `base` (the [`rewrite_base`](Versioned::rewrite_base)
    /// of the version read), so that it counts as no renewal.
    pub fn with_request(&self, base: Version, to: &str, priority: Option<u32>) -> LeaseRecord {
        let mut asked = self.clone();
        asked.metadata.insert(TRANSFER_TO_KEY, to);
        match priority {
            Some(p) => asked.metadata.insert(TRANSFER_PRIORITY_KEY, p.to_string()),
            None => {
                asked.metadata.remove(TRANSFER_PRIORITY_KEY);
            }
        }
        asked
            .metadata
            .insert(REWRITTEN_OVER_KEY, base.0.to_string());
        asked
    }

    /// This held record with its request taken out: a withdrawal, marked
    /// as a rewrite of `base` as [`with_request`](Self::with_request) marks
    /// a request.
    pub fn without_request(&self, base: Version) -> LeaseRecord {
        let mut withdrawn = self.clone();
        withdrawn.metadata.remove(TRANSFER_TO_KEY);
        withdrawn.metadata.remove(TRANSFER_PRIORITY_KEY);
        withdrawn
            .metadata
            .insert(REWRITTEN_OVER_KEY, base.0.to_string());
        withdrawn
    }

    /// Whether this record is `earlier` rewritten by others than its
    /// holder, with no write of the holder's between: held by the same
    /// holder with the same token, term and times, the same metadata but
    /// for a request, and marked ([`REWRITTEN_OVER_KEY`]) as a rewrite of
    /// the holder's write that `earlier` is or rewrites
    /// ([`Versioned::rewrite_base`]). Every rewrite is a compare-and-swap
    /// over the version its writer read, and a holder's own writes never
    /// carry the mark, so such a record is no renewal: the holder's term is
    /// still bounded by the write `earlier` stems from.
    pub fn rewrites(&self, earlier: &Versioned) -> bool {
        let prior = &earlier.record;
        let strip = |m: &Metadata| {
            let mut m = m.clone();
            for key in [TRANSFER_TO_KEY, TRANSFER_PRIORITY_KEY, REWRITTEN_OVER_KEY] {
                m.remove(key);
            }
            m
        };
        let over = self.metadata.get(REWRITTEN_OVER_KEY);
        self.holder.is_some()
            && over.and_then(|v| v.parse::<u64>().ok()) == Some(earlier.rewrite_base().0)
            && self.holder == prior.holder
            && self.token == prior.token
            && self.term == prior.term
            && self.renewed_at == prior.renewed_at
            && self.expires_at == prior.expires_at
            && strip(&self.metadata) == strip(&prior.metadata)
    }

    /// Encodes the record as JSON, the format stores keep in one column.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.encode_into(&mut out);
        out
    }

    /// Appends [`encode`](LeaseRecord::encode)'s bytes to `out`: a store
    /// that encodes thousands of records per batch reuses one buffer.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        json::Fields {
            v: FORMAT_VERSION,
            holder: self.holder.as_ref(),
            token: self.token,
            // Rounded up: a challenger must never wait less than the holder's term.
            term_ms: ceil_millis(self.term),
            renewed_at_ms: self.renewed_at.as_millis(),
            expires_at_ms: self.expires_at.as_millis(),
            metadata: &self.metadata,
        }
        .write(out);
    }

    /// Decodes a record written by [`encode`](LeaseRecord::encode).
    ///
    /// Text that is not a tenure record, a record from a newer format, or one
    /// whose fields contradict each other is a [`RecordError`]; the caller
    /// must not overwrite such a record.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        // One pass for a record of a format this build reads (every record
        // a store holds, nearly always); anything else takes the two
        // passes below, which tell a foreign value from a newer format
        // from a corrupt record.
        if let Ok(w) = serde_json::from_slice::<Wire>(bytes) {
            if w.v <= FORMAT_VERSION {
                return LeaseRecord::from_wire(w);
            }
        }
        let probe: Probe = serde_json::from_slice(bytes).map_err(|e| RecordError::Foreign {
            detail: e.to_string(),
        })?;
        match probe.v {
            None => {
                return Err(RecordError::Foreign {
                    detail: "no format version field `v`".into(),
                })
            }
            Some(v) if v > FORMAT_VERSION => {
                return Err(RecordError::TooNew {
                    found: v,
                    supported: FORMAT_VERSION,
                })
            }
            Some(_) => {}
        }
        let w: Wire = serde_json::from_slice(bytes).map_err(|e| RecordError::Corrupt {
            detail: e.to_string(),
        })?;
        LeaseRecord::from_wire(w)
    }

    /// The record a decoded [`Wire`] describes, checked.
    fn from_wire(w: Wire) -> Result<Self, RecordError> {
        let rec = LeaseRecord {
            holder: w.holder,
            token: w.token,
            term: Duration::from_millis(w.term_ms),
            renewed_at: WallTime::from_millis(w.renewed_at_ms),
            expires_at: WallTime::from_millis(w.expires_at_ms),
            metadata: w.metadata,
        };
        rec.check()?;
        Ok(rec)
    }

    /// Checks the invariants every record meets.
    pub fn check(&self) -> Result<(), RecordError> {
        // A term tenure would refuse to configure: waiting one out would
        // take (nearly) forever.
        if self.term > crate::config::MAX_TERM {
            return Err(RecordError::Corrupt {
                detail: format!(
                    "a term of {:?}, longer than the longest tenure writes ({:?})",
                    self.term,
                    crate::config::MAX_TERM
                ),
            });
        }
        if let Some(h) = &self.holder {
            if h.id.is_empty() || h.id.len() > MAX_CANDIDATE_BYTES {
                return Err(RecordError::Corrupt {
                    detail: format!("holder id of {} bytes", h.id.len()),
                });
            }
            if self.token == 0 {
                return Err(RecordError::Corrupt {
                    detail: "a held lease with token 0".into(),
                });
            }
            if self.term.is_zero() {
                return Err(RecordError::Corrupt {
                    detail: "a held lease with a zero term".into(),
                });
            }
        }
        if self.metadata.validate().is_err() {
            return Err(RecordError::Corrupt {
                detail: "metadata larger than 4 KiB".into(),
            });
        }
        Ok(())
    }
}

/// A record together with the store's version of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Versioned {
    /// The record as read (or as written, by a feed that carries it).
    pub record: LeaseRecord,
    /// The store's version, to pass back to compare-and-swap.
    pub version: Version,
}

impl Versioned {
    /// The version of the holder's own write this record stems from: its
    /// own version, or, for a held record that others rewrote (a request,
    /// a withdrawal), the version its [`REWRITTEN_OVER_KEY`] names.
    pub fn rewrite_base(&self) -> Version {
        self.record
            .holder
            .as_ref()
            .and_then(|_| self.record.metadata.get(REWRITTEN_OVER_KEY))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(self.version, Version)
    }
}

fn ceil_millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// The encoded form (written by hand in `json.rs`, the same bytes as
/// this struct's `Serialize`; the tests compare them). Unknown fields are ignored, so a later build may add
/// optional fields without raising [`FORMAT_VERSION`]; it rises only for
/// changes older builds must not misread.
#[derive(Serialize, Deserialize)]
struct Wire {
    v: u32,
    holder: Option<Holder>,
    token: u64,
    term_ms: u64,
    renewed_at_ms: u64,
    expires_at_ms: u64,
    #[serde(default)]
    metadata: Metadata,
}

#[derive(Deserialize)]
struct Probe {
    v: Option<u32>,
}
