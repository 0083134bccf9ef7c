//! How a leader is shown: the JSON shape shared by `status`, `watch` and
//! `/leader`, and the human wording of times.

use std::borrow::Cow;
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

/// Metadata as `k=v k=v`, or empty, escaped for a terminal ([`escape`]).
pub fn metadata_text(m: &Metadata) -> String {
    m.iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `c` must not reach a terminal raw: control characters (C0, DEL,
/// C1) and Unicode's bidirectional formatting characters.
fn drives_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `value` as one line of JSON whose bytes are all safe on a terminal:
/// besides the C0 controls JSON escapes anyway, DEL, the C1 controls and
/// the bidirectional formatting characters become `\uXXXX` escapes. Those
/// can only occur inside JSON strings, and a JSON reader decodes the
/// escapes back to the exact text.
pub fn json<T: Serialize>(value: &T) -> serde_json::Result<String> {
    let text = serde_json::to_string(value)?;
    if !text.chars().any(drives_terminal) {
        return Ok(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if drives_terminal(c) {
            // All of them are in the Basic Multilingual Plane: one escape.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Text read from a store (holder ids, metadata), as it may be printed for
/// people: control characters (C0, DEL, C1: escape sequences that move the
/// cursor, clear lines or retitle the terminal) and Unicode's bidirectional
/// formatting characters (which reorder what is shown) become `\u{…}`,
/// and `\` becomes `\\`, so the escaped form is unambiguous. Anyone who
/// can write to the store could otherwise forge or hide lines of
/// `status` and `watch` output. JSON output carries the exact text
/// ([`json`]).
pub fn escape(s: &str) -> Cow<'_, str> {
    fn hostile(c: char) -> bool {
        c == '\\' || drives_terminal(c)
    }
    if !s.chars().any(hostile) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if hostile(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
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
        .map_or(0, |d| d.as_millis());
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
    fn store_text_cannot_drive_the_terminal() {
        for (text, shown) in [
            ("host-a", "host-a"),
            ("a\x1b[2Jb", "a\\u{1b}[2Jb"),
            ("x\ny\r\u{9b}z\u{7f}", "x\\u{a}y\\u{d}\\u{9b}z\\u{7f}"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            ("back\\slash", "back\\\\slash"),
        ] {
            assert_eq!(escape(text), shown, "{text:?}");
        }
        let md = Metadata::new().with("k\x07", "v\x1b]0;pwned\x07");
        assert_eq!(metadata_text(&md), "k\\u{7}=v\\u{1b}]0;pwned\\u{7}");
    }

    #[test]
    fn json_is_exact_and_terminal_safe() {
        let text = "a\u{9b}b\u{202e}c\u{7f}\x1b";
        let j = json(&text).unwrap();
        assert_eq!(j, "\"a\\u009bb\\u202ec\\u007f\\u001b\"");
        assert_eq!(serde_json::from_str::<String>(&j).unwrap(), text);
    }

    #[test]
    fn far_future_times_do_not_panic() {
        let far = std::time::UNIX_EPOCH + Duration::from_millis(u64::MAX);
        assert_eq!(rfc3339(far), format!("unix-ms:{}", u64::MAX));
        assert_eq!(rfc3339(std::time::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert!(relative(std::time::UNIX_EPOCH, far).starts_with("in "));
    }
}
