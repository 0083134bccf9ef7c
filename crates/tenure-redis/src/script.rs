//! The Lua scripts that make every operation atomic inside Redis, and the
//! parsing of their replies.
//!
//! Every script touches the data-set marker (`KEYS[1]`, the bare prefix)
//! and the records of one or more groups (`KEYS[2..]`): a batch of reads or
//! of compare-and-swaps is one script call, atomic as a whole, with a reply
//! per group. Each key is checked for its type before anything is read or
//! written, so a key that another program owns is reported (for that group
//! alone), never overwritten.

use std::sync::LazyLock;

use redis::Value;

/// Compare-and-swap of many groups, each on its own and in order: a later
/// request for a group sees what an earlier one in the batch wrote.
///
/// `KEYS[1]`: the data-set marker; `KEYS[2..]`: the groups' records.
/// `ARGV`, three per request: the expected version (`""`: no record may
/// exist; `"0"`: no record may exist and the data set is a recovered one,
/// see the crate docs), the encoded record, and a third that depends on
/// the first: for an update (an expected version from 1 up) the version
/// to write, the expected one plus one, computed by the client (`""` if
/// that is past [`MAX_VERSION`]: the update is refused if it would apply);
/// for a creation the quarantine in ms.
///
/// Replies one entry per request: `1` (an update applied at the version
/// the request named, and published), the new version as an integer (a
/// creation applied and published: a time in microseconds, never 1), `0`
/// (conflict), `{"applied", version, publish_error}` (applied, but the
/// publish failed), `{"conflict"}`, `{"last"}` (an update matched but no
/// version follows), `{"quarantine", remaining_ms}` or
/// `{"wrongtype", which, type}`. An applied write is published on the
/// group's channel (its key) as `1:<version>:<record>`.
///
/// The script writes the version it is given, unchecked: tenure's client
/// always names the expected one plus one. (Whoever may run scripts on
/// the data set may as well `HSET` it; fencing against such a writer is
/// not what versions are for.)
///
/// A renewal, the common case by far, costs two or three commands (`HGET`,
/// one `HSET` of both fields, `PUBLISH` if anyone listens), compares its
/// versions as text and replies the integer 1: no number is parsed or
/// formatted in Lua on that path (the server's conversions between doubles
/// and text were a tenth of what a renewal cost it). A key's type is asked
/// only when `HGET` fails or finds no version (a record to create, or a
/// key that is not tenure's).
///
/// The publish is skipped where nobody would hear it: no pattern
/// subscription on the server (`PUBSUB NUMPAT`, once per call) and no
/// subscriber of the group's own channel (`PUBSUB NUMSUB` of every key,
/// once per call). The script runs atomically, so a message skipped would
/// have been delivered to nobody. An engine whose groups all lead drops
/// its feed (nothing to follow), and then building and publishing the
/// message (`1:<version>:<record>`, a new string of the record's size)
/// was a third of what its renewals cost the server. A server that
/// refuses `PUBSUB` (an ACL without it) is published to as before.
///
/// Versions are never reused, even across a loss of data: a record is
/// created with the server's time in microseconds as its version and every
/// write adds one, so a writer holding a version from before the loss
/// cannot match a record created after it (fewer writes than microseconds
/// pass between two losses).
pub(crate) static CAS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local marker = KEYS[1]
local mt = redis.call('TYPE', marker)['ok']
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)

-- Who would hear a publish: everyone, if any pattern is subscribed (or
-- PUBSUB is refused); else the subscribers of each key's own channel.
local numpat = redis.pcall('PUBSUB', 'NUMPAT')
local everyone = type(numpat) ~= 'number' or numpat > 0
local numsub = false
if not everyone then
  numsub = redis.pcall('PUBSUB', 'NUMSUB', unpack(KEYS, 2))
  if type(numsub) ~= 'table' or numsub['err'] then everyone = true end
end

local function heard(i)
  if everyone then return true end
  local n = numsub[2 * (i - 1)]
  return type(n) ~= 'number' or n > 0
end

local function cas(key, expected, record, third, i)
  local cur = redis.pcall('HGET', key, 'v')
  local kt = 'hash'
  if type(cur) == 'table' then
    kt = redis.call('TYPE', key)['ok']
    -- Not a type error: fail as a plain call would have.
    if kt == 'none' or kt == 'hash' then redis.call('HGET', key, 'v') end
    return {'wrongtype', 'record', kt}
  end
  if not cur then kt = redis.call('TYPE', key)['ok'] end
  if kt ~= 'none' and kt ~= 'hash' then return {'wrongtype', 'record', kt} end
  if mt ~= 'none' and mt ~= 'hash' then return {'wrongtype', 'marker', mt} end
  local v
  local version = 1
  if kt == 'hash' then
    if expected == '' or expected == '0' then return 0 end
    if cur ~= expected then return 0 end
    -- The client's expected + 1 (none past the last version the store
    -- reads: refused); the reply 1 means 'at the version named'.
    if third == '' then return {'last'} end
    v = third
  else
    if expected ~= '' and expected ~= '0' then return 0 end
    local quarantine = third
    local floor = false
    if mt == 'hash' then floor = redis.call('HGET', marker, 'floor') end
    if not floor then
      -- No marker: the data set is new or lost its data. Mark it, and make
      -- everyone wait out any term granted before the loss.
      redis.call('HSET', marker, 'floor', string.format('%.0f', now_us),
        'since_ms', string.format('%.0f', now_ms))
      mt = 'hash'
      return {'quarantine', quarantine}
    end
    if floor == '0' then
      -- Adopted as new: a missing record was never written.
      if expected ~= '' then return 0 end
    else
      -- Recovered: a missing record may have been lost; it reads as a
      -- release at the token floor, version 0.
      if expected ~= '0' then return 0 end
      local since = tonumber(redis.call('HGET', marker, 'since_ms')) or now_ms
      local left = since + tonumber(quarantine) - now_ms
      if left > 0 then return {'quarantine', string.format('%.0f', left)} end
    end
    version = now_us
    -- Formatted here, not passed as a number: Redis 7.2.0-7.2.4 (and
    -- Valkey 7.2.4-7.2.5) write a number argument in its shortest form,
    -- which for a version ending in eight zeros is '1.7654321e+15'.
    v = string.format('%.0f', version)
  end
  redis.call('HSET', key, 'v', v, 'record', record)
  if not heard(i) then return version end
  -- pcall: a missing channel permission must not turn an applied write into
  -- an error; the write stands and the caller logs the publish error.
  local published = redis.pcall('PUBLISH', key, '1:' .. v .. ':' .. record)
  if type(published) == 'table' and published['err'] then
    return {'applied', v, published['err']}
  end
  return version
end

local out = {}
for i = 2, #KEYS do
  out[i - 1] = cas(KEYS[i], ARGV[3 * i - 5], ARGV[3 * i - 4], ARGV[3 * i - 3], i)
end
return out
",
    )
});

/// Read of many groups. `KEYS[1]`: the data-set marker; `KEYS[2..]`: the
/// groups' records. Replies one entry per group: `{"hash", v, record}`
/// (either may be nil), `{"none", floor, since_ms}` (empty strings without
/// a marker) or `{"wrongtype", which, type}`.
pub(crate) static READ: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local marker = KEYS[1]
local mt = redis.call('TYPE', marker)['ok']
local m = false
local out = {}
for i = 2, #KEYS do
  local key = KEYS[i]
  local kt = redis.call('TYPE', key)['ok']
  if kt == 'hash' then
    local f = redis.call('HMGET', key, 'v', 'record')
    out[i - 1] = {'hash', f[1], f[2]}
  elseif kt ~= 'none' then
    out[i - 1] = {'wrongtype', 'record', kt}
  elseif mt == 'none' then
    out[i - 1] = {'none', '', ''}
  elseif mt ~= 'hash' then
    out[i - 1] = {'wrongtype', 'marker', mt}
  else
    if not m then m = redis.call('HMGET', marker, 'floor', 'since_ms') end
    out[i - 1] = {'none', m[1] or '', m[2] or ''}
  end
end
return out
",
    )
});

/// Marks a data set without a marker as new (`floor` 0): replies 1 if it
/// did, 0 if a marker existed, or `{"wrongtype", "marker", type}`.
pub(crate) static ADOPT: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local mt = redis.call('TYPE', KEYS[1])['ok']
if mt == 'hash' then return 0 end
if mt ~= 'none' then return {'wrongtype', 'marker', mt} end
redis.call('HSET', KEYS[1], 'floor', '0', 'since_ms', '0')
return 1
",
    )
});

/// A reply of [`CAS`].
#[derive(Debug, PartialEq)]
pub(crate) enum CasReply {
    /// An update applied at the version its request named (the expected
    /// one plus one; see [`next_version`]), and published.
    AppliedAsNamed,
    /// An update that matched a record at a version no other follows
    /// (past [`MAX_VERSION`]): not applied.
    Last,
    Applied {
        version: u64,
        publish_error: Option<String>,
    },
    Conflict,
    Quarantine {
        remaining_ms: u64,
    },
    WrongType {
        marker: bool,
        found: String,
    },
}

/// A reply of [`READ`].
#[derive(Debug, PartialEq)]
pub(crate) enum ReadReply {
    Hash {
        version: Option<Vec<u8>>,
        record: Option<Vec<u8>>,
    },
    /// No record. `floor`: the marker's token floor (`None` without a
    /// marker); `since_ms`: when the marker was written.
    None {
        floor: Option<u64>,
        since_ms: u64,
    },
    WrongType {
        marker: bool,
        found: String,
    },
}

fn items(v: &Value) -> Result<&[Value], String> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(format!("expected an array, got {other:?}")),
    }
}

fn bytes(v: Option<&Value>) -> Option<Vec<u8>> {
    match v? {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> String {
    bytes(v)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn number(v: Option<&Value>, what: &str) -> Result<u64, String> {
    let t = text(v);
    t.parse()
        .map_err(|_| format!("{what} {t:?} is not a whole number"))
}

/// The largest version this store reads: earlier builds' scripts add one
/// to a version in Lua's doubles, exact only below 2^53, so a version at
/// or above this (never issued: it is 2255 in microseconds) could be
/// issued twice by a process of such a build sharing the data set.
pub(crate) const MAX_VERSION: u64 = (1 << 53) - 2;

/// A stored version: the plain decimal digits the script writes (no sign,
/// no leading zero), from 1 to [`MAX_VERSION`]. Anything else is not a
/// version this store wrote: the script compares versions as text, so a
/// `+5` or `007` would conflict with every write instead of being
/// reported, `0` is refused as an expected version wherever a record
/// exists (it means a lost record), and one past [`MAX_VERSION`] would
/// make two writers match. Reads, replies and the feed all go through
/// this, so no writer ever holds a version there is no next one to.
pub(crate) fn version(text: &[u8]) -> Option<u64> {
    let canonical = !text.is_empty() && text.iter().all(u8::is_ascii_digit) && text[0] != b'0';
    if !canonical {
        return None;
    }
    std::str::from_utf8(text)
        .ok()?
        .parse::<u64>()
        .ok()
        .and_then(in_range)
}

/// `v` if it is a version this store may hold: from 1 to [`MAX_VERSION`].
fn in_range(v: u64) -> Option<u64> {
    (1..=MAX_VERSION).contains(&v).then_some(v)
}

/// The version an update over `expected` writes: one more, if that is a
/// version this store may hold (`None` for a record at [`MAX_VERSION`],
/// which no update may write over).
pub(crate) fn next_version(expected: u64) -> Option<u64> {
    expected.checked_add(1).and_then(in_range)
}

/// Why a write reply's version `shown` is refused.
fn not_a_version(shown: impl std::fmt::Debug) -> String {
    format!("version {shown:?} is not a whole number from 1 to {MAX_VERSION}")
}

/// The version a write reply reports, read as [`version`] reads a stored one.
fn applied_version(text: &str) -> Result<u64, String> {
    version(text.as_bytes()).ok_or_else(|| not_a_version(text))
}

fn wrong_type(items: &[Value]) -> (bool, String) {
    (text(items.get(1)) == "marker", text(items.get(2)))
}

/// The entries of a batch reply, `n` of them, each parsed on its own.
pub(crate) fn each<T>(
    v: &Value,
    n: usize,
    parse: impl Fn(&Value) -> Result<T, String>,
) -> Result<Vec<Result<T, String>>, String> {
    let items = items(v)?;
    if items.len() != n {
        return Err(format!("{} entries for {n} requests", items.len()));
    }
    Ok(items.iter().map(parse).collect())
}

impl CasReply {
    pub(crate) fn parse(v: &Value) -> Result<Self, String> {
        match v {
            Value::Int(0) => return Ok(CasReply::Conflict),
            Value::Int(1) => return Ok(CasReply::AppliedAsNamed),
            Value::Int(version) => {
                // An integer reply is canonical digits by construction:
                // only its range is checked (no text made per renewal).
                let version = u64::try_from(*version)
                    .ok()
                    .and_then(in_range)
                    .ok_or_else(|| not_a_version(version))?;
                return Ok(CasReply::Applied {
                    version,
                    publish_error: None,
                });
            }
            _ => {}
        }
        let items = items(v)?;
        match text(items.first()).as_str() {
            "applied" => {
                let note = text(items.get(2));
                Ok(CasReply::Applied {
                    version: applied_version(&text(items.get(1)))?,
                    publish_error: (!note.is_empty()).then_some(note),
                })
            }
            "conflict" => Ok(CasReply::Conflict),
            "last" => Ok(CasReply::Last),
            "quarantine" => Ok(CasReply::Quarantine {
                remaining_ms: number(items.get(1), "quarantine")?,
            }),
            "wrongtype" => {
                let (marker, found) = wrong_type(items);
                Ok(CasReply::WrongType { marker, found })
            }
            other => Err(format!("unknown reply {other:?}")),
        }
    }
}

impl ReadReply {
    pub(crate) fn parse(v: &Value) -> Result<Self, String> {
        let items = items(v)?;
        match text(items.first()).as_str() {
            "hash" => Ok(ReadReply::Hash {
                version: bytes(items.get(1)),
                record: bytes(items.get(2)),
            }),
            "none" => {
                let floor = text(items.get(1));
                let floor = if floor.is_empty() {
                    None
                } else {
                    Some(floor.parse().map_err(|_| {
                        format!("the data-set marker's floor {floor:?} is not a whole number")
                    })?)
                };
                let since_ms = text(items.get(2)).parse().unwrap_or(0);
                Ok(ReadReply::None { floor, since_ms })
            }
            "wrongtype" => {
                let (marker, found) = wrong_type(items);
                Ok(ReadReply::WrongType { marker, found })
            }
            other => Err(format!("unknown reply {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_versions_below_two_to_the_53_are_read() {
        assert_eq!(version(b"1765432100000000"), Some(1_765_432_100_000_000));
        assert_eq!(version(b"9007199254740990"), Some(MAX_VERSION));
        for bad in [
            &b""[..],
            b"0",
            b"+5",
            b"-5",
            b"007",
            b" 7",
            b"1.7654321e+15",
            b"9007199254740991",
            b"9007199254740992",
            b"18446744073709551615",
            b"18446744073709551616",
        ] {
            assert_eq!(version(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_replies_and_rejects_nonsense() {
        let applied = Value::Array(vec![bulk("applied"), bulk("1700000000000001"), bulk("")]);
        assert_eq!(
            CasReply::parse(&applied),
            Ok(CasReply::Applied {
                version: 1_700_000_000_000_001,
                publish_error: None
            })
        );
        let none = Value::Array(vec![bulk("none"), bulk(""), bulk("")]);
        assert_eq!(
            ReadReply::parse(&none),
            Ok(ReadReply::None {
                floor: None,
                since_ms: 0
            })
        );
        let hash = Value::Array(vec![bulk("hash"), Value::Nil, bulk("x")]);
        assert_eq!(
            ReadReply::parse(&hash),
            Ok(ReadReply::Hash {
                version: None,
                record: Some(b"x".to_vec())
            })
        );
        assert_eq!(
            CasReply::parse(&Value::Int(1_700_000_000_000_002)),
            Ok(CasReply::Applied {
                version: 1_700_000_000_000_002,
                publish_error: None
            })
        );
        assert_eq!(CasReply::parse(&Value::Int(0)), Ok(CasReply::Conflict));
        // 1: an update applied at the version it named, never version 1.
        assert_eq!(
            CasReply::parse(&Value::Int(1)),
            Ok(CasReply::AppliedAsNamed)
        );
        assert_eq!(
            CasReply::parse(&Value::Array(vec![bulk("last")])),
            Ok(CasReply::Last)
        );
        assert!(CasReply::parse(&Value::Int(-3)).is_err());
        // One past the largest version the store reads.
        let past = i64::try_from(MAX_VERSION + 1).unwrap_or(i64::MAX);
        assert!(CasReply::parse(&Value::Int(past)).is_err());
        assert!(CasReply::parse(&Value::Nil).is_err());
        assert!(CasReply::parse(&Value::Array(vec![bulk("applied"), bulk("x")])).is_err());
        assert!(ReadReply::parse(&Value::Array(vec![bulk("what")])).is_err());
    }
}
