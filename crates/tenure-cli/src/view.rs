//! How a leader is shown: the JSON shape shared by `status`, `watch` and
//! `/leader`, and the human wording of times.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tenure::{LeaderInfo, Metadata};

/// A leader as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct LeaderJson {
    /// The leader's candidate id.
    pub candidate: String,
    /// Its fencing token.
    pub token: u64,
    /// What it publishes.
    pub metadata: BTreeMap<String, String>,
    /// When it last renewed, RFC 3339, by its clock.
    pub renewed_at: String,
    /// When its lease expires unless renewed, RFC 3339, by its clock.
    pub expires_at: String,
}

impl LeaderJson {
    /// The JSON view of a leader.
    pub fn new(l: &LeaderInfo) -> Self {
        LeaderJson {
            candidate: l.candidate.clone(),
            token: l.token,
            metadata: metadata_map(&l.metadata),
            renewed_at: rfc3339(l.renewed_at),
            expires_at: rfc3339(l.expires_at),
        }
    }
}

/// Metadata as a JSON object.
pub fn metadata_map(m: &Metadata) -> BTreeMap<String, String> {
    m.iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Metadata as `k=v k=v`, or empty.
pub fn metadata_text(m: &Metadata) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A wall time as RFC 3339 with milliseconds, UTC. Times RFC 3339 cannot
/// express (after the year 9999, which a corrupt or hostile record may
/// hold) are shown as milliseconds since the Unix epoch instead of failing.
pub fn rfc3339(t: SystemTime) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    // humantime's Display errors past 9999-12-31; `to_string` would panic.
    if write!(out, "{}", humantime::format_rfc3339_millis(t)).is_ok() {
        return out;
    }
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("unix-ms:{ms}")
}

/// Signed milliseconds from `now` to `t` (negative: in the past).
pub fn millis_from(now: SystemTime, t: SystemTime) -> i64 {
    match t.duration_since(now) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// "in 3.2s" or "4.1s ago".
pub fn relative(now: SystemTime, t: SystemTime) -> String {
    let ms = millis_from(now, t);
    let d = short(Duration::from_millis(ms.unsigned_abs()));
    if ms >= 0 {
        format!("in {d}")
    } else {
        format!("{d} ago")
    }
}

/// A duration to one decimal of its unit: "850ms", "3.2s", "12m 5s".
pub fn short(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
    }
}

/// Seconds with millisecond precision, "1.234s", for tables.
pub fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_future_times_do_not_panic() {
        let far = std::time::UNIX_EPOCH + Duration::from_millis(u64::MAX);
        assert_eq!(rfc3339(far), format!("unix-ms:{}", u64::MAX));
        assert_eq!(rfc3339(std::time::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert!(relative(std::time::UNIX_EPOCH, far).starts_with("in "));
    }
}
