//! The record's JSON, written by hand: the bytes `serde_json` writes for
//! the record's wire form, without its per-key escaping.
//!
//! A leader encodes its record for every renewal, and at 100,000 groups
//! `serde_json` escaping the record's nine constant keys byte by byte was
//! a fourteenth of what a renewal cost the engine. Here the constant parts
//! are copied whole, and only the holder's id and the metadata (text a
//! user chose) are escaped, by `serde_json` itself whenever they hold a
//! byte JSON must escape. The tests compare every byte with `serde_json`'s.

use super::{Holder, Metadata};

/// Appends `n` in decimal.
fn number(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `s` as a JSON string, escaped exactly as `serde_json` escapes
/// it (control characters, `"` and `\`; everything else as it is).
fn string(out: &mut Vec<u8>, s: &str) {
    let plain = s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if plain {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let len = out.len();
        // Writing a string into a Vec cannot fail; were it to, nothing
        // half-written is left behind.
        if serde_json::to_writer(&mut *out, s).is_err() {
            out.truncate(len);
        }
    }
}

/// The fields of a record's wire form, in the order they are written.
pub(super) struct Fields<'a> {
    pub(super) v: u32,
    pub(super) holder: Option<&'a Holder>,
    pub(super) token: u64,
    pub(super) term_ms: u64,
    pub(super) renewed_at_ms: u64,
    pub(super) expires_at_ms: u64,
    pub(super) metadata: &'a Metadata,
}

impl Fields<'_> {
    /// Appends the record's JSON to `out`: the same bytes as
    /// `serde_json::to_writer` of the wire form.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"v\":");
        number(out, u64::from(self.v));
        out.extend_from_slice(b",\"holder\":");
        match self.holder {
            None => out.extend_from_slice(b"null"),
            Some(h) => {
                out.extend_from_slice(b"{\"id\":");
                string(out, &h.id);
                out.extend_from_slice(b",\"incarnation\":");
                number(out, h.incarnation);
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"token\":");
        number(out, self.token);
        out.extend_from_slice(b",\"term_ms\":");
        number(out, self.term_ms);
        out.extend_from_slice(b",\"renewed_at_ms\":");
        number(out, self.renewed_at_ms);
        out.extend_from_slice(b",\"expires_at_ms\":");
        number(out, self.expires_at_ms);
        out.extend_from_slice(b",\"metadata\":{");
        for (i, (key, value)) in self.metadata.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, key);
            out.push(b':');
            string(out, value);
        }
        out.extend_from_slice(b"}}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::Wire;
    use super::*;

    /// What `serde_json` writes for the same fields.
    fn by_serde(f: &Fields<'_>) -> Vec<u8> {
        let wire = Wire {
            v: f.v,
            holder: f.holder.cloned(),
            token: f.token,
            term_ms: f.term_ms,
            renewed_at_ms: f.renewed_at_ms,
            expires_at_ms: f.expires_at_ms,
            metadata: f.metadata.clone(),
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    #[test]
    fn writes_the_bytes_serde_json_writes() {
        let texts = [
            "",
            "node-1",
            "say \"hi\"",
            "back\\slash",
            "tab\there\nnew\rline\u{0}\u{1f}",
            "\u{7f} del, é, 日本, 🦀",
            "</script>&'",
        ];
        let holders: Vec<Option<Holder>> = std::iter::once(None)
            .chain(texts.iter().map(|t| {
                Some(Holder {
                    id: (*t).to_owned(),
                    incarnation: u64::MAX,
                })
            }))
            .collect();
        let mut metadatas = vec![Metadata::new(), Metadata::address("10.0.0.7:8080")];
        let mut all = Metadata::new();
        for (i, t) in texts.iter().enumerate() {
            all.insert(format!("{t}{i}"), *t);
        }
        metadatas.push(all);
        for holder in &holders {
            for metadata in &metadatas {
                for n in [0, 1, 9, 10, 1_796_685_626_950, u64::MAX] {
                    let fields = Fields {
                        v: u32::try_from(n % 7).unwrap_or(1),
                        holder: holder.as_ref(),
                        token: n,
                        term_ms: n / 3,
                        renewed_at_ms: n,
                        expires_at_ms: n.saturating_add(1),
                        metadata,
                    };
                    let mut out = b"kept".to_vec();
                    fields.write(&mut out);
                    let expected = [b"kept".to_vec(), by_serde(&fields)].concat();
                    assert_eq!(
                        String::from_utf8_lossy(&out),
                        String::from_utf8_lossy(&expected)
                    );
                }
            }
        }
    }
}
