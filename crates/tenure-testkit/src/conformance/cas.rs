//! Compare-and-swap on one handle: applies and conflicts as the version says,
//! tokens and records survive, names of every kind work, versions change.

use super::*;

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Cases<'a> {
    vec![
        case("describe", describe(h)),
        case("acquire_on_empty", acquire_on_empty(h, r)),
        case("conflict", conflict(h, r)),
        case("renew_keeps_token", renew_keeps_token(h, r)),
        case("takeover_raises_token", takeover_raises_token(h, r)),
        case("release_then_acquire", release_then_acquire(h, r)),
        case("record_round_trip", record_round_trip(h, r)),
        case("odd_group_names", odd_group_names(h, r)),
        case("versions_change", versions_change(h, r)),
    ]
}

/// `describe()` names the store.
async fn describe<H: Harness>(h: &H) -> CaseResult {
    let d = h.store().await.describe();
    ensure!(
        !d.trim().is_empty(),
        "describe() returned an empty string; return something like `sqlite:///path` for logs"
    );
    Ok(Verdict::Pass)
}

/// read → None; CAS(None) → Applied; the record and version read back, from
/// this handle and from another.
async fn acquire_on_empty<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("acquire-on-empty")?;
    let before = s.read(&g).await.ctx("read of a never-written group")?;
    ensure!(
        before.is_none(),
        "read of a never-written group returned {before:?}, expected None"
    );
    let rec = held_by("a", 1);
    let v = write_applies(&s, &g, None, &rec, "CAS(None) on an empty group").await?;
    expect_record(&s, &g, &rec, v, "read after acquiring").await?;
    let other = h.store().await;
    expect_record(
        &other,
        &g,
        &rec,
        v,
        "read from another handle after acquiring",
    )
    .await?;
    Ok(Verdict::Pass)
}

/// CAS(None) over a record, and CAS with any wrong version, conflict and
/// write nothing; so does CAS(Some) on an empty group.
async fn conflict<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let empty = run.group("conflict-empty")?;
    for guess in wrong_versions(None) {
        let what = format!("CAS({guess}) on a never-written group");
        write_conflicts(&s, &empty, Some(guess), &held_by("x", 1), &what).await?;
    }
    let after = s.read(&empty).await.ctx("read after refused writes")?;
    ensure!(
        after.is_none(),
        "refused CAS(Some(..)) writes on an empty group left a record: {after:?}"
    );

    let g = run.group("conflict")?;
    let rec = held_by("a", 1);
    let v = write_applies(&s, &g, None, &rec, "first CAS(None)").await?;
    write_conflicts(
        &s,
        &g,
        None,
        &held_by("b", 2),
        "CAS(None) over an existing record",
    )
    .await?;
    expect_record(&s, &g, &rec, v, "read after a refused CAS(None)").await?;
    for guess in wrong_versions(Some(v)) {
        let what = format!("CAS({guess}) when the version is {v}");
        write_conflicts(&s, &g, Some(guess), &held_by("b", 2), &what).await?;
    }
    expect_record(&s, &g, &rec, v, "read after refused wrong-version writes").await?;
    Ok(Verdict::Pass)
}

/// A renewal (same holder and token, current version) applies with a new
/// version; the old version is stale afterwards.
async fn renew_keeps_token<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("renew")?;
    let first = held_by("a", 7);
    let v1 = write_applies(&s, &g, None, &first, "acquire").await?;
    let mut renewal = first.clone();
    renewal.renewed_at = first.renewed_at + Duration::from_millis(3_000);
    renewal.expires_at = renewal.renewed_at + renewal.term;
    let v2 = write_applies(
        &s,
        &g,
        Some(v1),
        &renewal,
        "renewal with the current version",
    )
    .await?;
    ensure!(
        v2 != v1,
        "the renewal applied but the version stayed {v1}: every applied write must change the version"
    );
    expect_record(&s, &g, &renewal, v2, "read after renewal").await?;
    ensure!(
        read_some(&s, &g, "read after renewal").await?.record.token == 7,
        "the renewal changed the token"
    );
    write_conflicts(
        &s,
        &g,
        Some(v1),
        &renewal,
        "a second renewal with the pre-renewal version",
    )
    .await?;
    Ok(Verdict::Pass)
}

/// Another holder writes token + 1 over the current version; the old leader
/// is fenced out.
async fn takeover_raises_token<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let a = h.store().await;
    let b = h.store().await;
    let g = run.group("takeover")?;
    let v1 = write_applies(&a, &g, None, &held_by("a", 1), "a acquires").await?;
    let seen = read_some(&b, &g, "b reads a's record").await?;
    ensure!(
        seen.version == v1,
        "b read version {} right after a wrote {v1}",
        seen.version
    );
    let takeover = held_by("b", seen.record.token + 1);
    let v2 = write_applies(
        &b,
        &g,
        Some(seen.version),
        &takeover,
        "b takes over with token + 1",
    )
    .await?;
    expect_record(&a, &g, &takeover, v2, "a reads after b's takeover").await?;
    write_conflicts(
        &a,
        &g,
        Some(v1),
        &held_by("a", 1),
        "a renews with its stale version after b took over",
    )
    .await?;
    expect_record(&b, &g, &takeover, v2, "read after a's refused renewal").await?;
    Ok(Verdict::Pass)
}

/// A release is a write without a holder that keeps the token; the record
/// is never deleted, so the next holder continues from the token.
async fn release_then_acquire<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let a = h.store().await;
    let b = h.store().await;
    let g = run.group("release")?;
    let v1 = write_applies(&a, &g, None, &held_by("a", 3), "a acquires").await?;
    let rel = released(3);
    let v2 = write_applies(&a, &g, Some(v1), &rel, "a releases").await?;
    ensure!(v2 != v1, "the release applied but the version stayed {v1}");
    expect_record(
        &b,
        &g,
        &rel,
        v2,
        "b reads the released record (it must not be deleted)",
    )
    .await?;
    write_conflicts(&b, &g, None, &held_by("b", 1), "CAS(None) over a released record (a release must not delete the record, or tokens restart)").await?;
    let next = held_by("b", 4);
    let v3 = write_applies(
        &b,
        &g,
        Some(v2),
        &next,
        "b acquires the released lease with token + 1",
    )
    .await?;
    expect_record(&a, &g, &next, v3, "a reads b's record").await?;
    Ok(Verdict::Pass)
}

/// Metadata with several keys, unicode and characters that need escaping,
/// filled to exactly the 4 KiB limit, plus extreme numbers, round trip
/// unchanged.
async fn record_round_trip<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("round-trip")?;
    let mut md = Metadata::address("10.0.0.7:8080")
        .with("zone", "eu-west-1a")
        .with("ключ", "значение")
        .with("emoji 🦀", "🔒🗝️ 👨‍👩‍👧")
        .with("quotes", r#"he said "hi" \ 'bye' `tick`"#)
        .with("newline and tab", "line one\nline two\tand a NUL \0 too")
        .with("", "empty key")
        .with("empty value", "");
    md.insert("pad", "");
    let base = serde_json::to_vec(&md)
        .map_err(|e| format!("test bug: {e}"))?
        .len();
    ensure!(
        base < MAX_METADATA_BYTES,
        "test bug: base metadata already {base} bytes"
    );
    md.insert("pad", "x".repeat(MAX_METADATA_BYTES - base));
    ensure!(
        md.validate().is_ok(),
        "test bug: metadata of exactly {MAX_METADATA_BYTES} bytes does not validate"
    );

    let mut rec = held_by("a", (1 << 53) + 1);
    rec.holder = Some(Holder {
        id: "ünïcödé holder 🦀".into(),
        incarnation: u64::MAX,
    });
    rec.metadata = md;
    let v = write_applies(
        &s,
        &g,
        None,
        &rec,
        "write of a record with 4 KiB of metadata",
    )
    .await?;
    expect_record(&s, &g, &rec, v, "read of a record with 4 KiB of metadata").await?;

    // Tokens near the top of the range survive too (2^53 + 1 above is the
    // first integer a float-based JSON reader gets wrong).
    let mut top = held_by("b", u64::MAX - 1);
    top.renewed_at = WallTime::from_millis(u64::MAX / 2);
    top.expires_at = top.renewed_at + top.term;
    let v2 = write_applies(
        &s,
        &g,
        Some(v),
        &top,
        "write of a record with token u64::MAX - 1",
    )
    .await?;
    let other = h.store().await;
    expect_record(
        &other,
        &g,
        &top,
        v2,
        "read of a record with token u64::MAX - 1",
    )
    .await?;
    Ok(Verdict::Pass)
}

/// Group names a store might mangle: each is its own group, byte for byte.
async fn odd_group_names<H: Harness>(h: &H, run: &Run) -> CaseResult {
    for bad in ["", "a\nb", "tab\there", "nul\0"] {
        ensure!(
            GroupName::new(bad).is_err(),
            "GroupName::new({bad:?}) was accepted; it must be rejected"
        );
    }
    ensure!(
        GroupName::new("x".repeat(MAX_GROUP_BYTES + 1)).is_err(),
        "a group name of {} bytes was accepted",
        MAX_GROUP_BYTES + 1
    );

    // Pairs that differ only in case, trailing space, unicode normalisation
    // or a pattern character must stay distinct groups.
    let labels = [
        "épée/🦀",
        "名前 with spaces",
        "family 👨‍👩‍👧 and keycap 1️⃣",
        "slash/and\\backslash",
        "../../etc/passwd",
        "quotes ' \" `",
        "percent % and underscore _",
        "star * ? [a-z] {x} ^$ .+",
        "'); DROP TABLE tenure_leases; --",
        "\" OR \"1\"=\"1",
        "redis:key:{hashtag} KEYS *",
        "CamelCase",
        "camelcase",
        "trailing space ",
        "trailing space",
        "nfc \u{e9}",
        "nfd e\u{301}",
        "a",
        "a%",
        "a_",
        "a*",
        "NULL",
        "0",
        "-1",
        "zero\u{200b}width",
    ];
    let mut names = Vec::new();
    for label in labels {
        names.push(run.group(label)?);
    }
    // Exactly at the length limit, in 1-, 2- and 4-byte characters.
    for fill in ['x', 'ü', '🦀'] {
        let mut name = format!("{}-max-", run.id);
        while name.len() + fill.len_utf8() <= MAX_GROUP_BYTES {
            name.push(fill);
        }
        while name.len() < MAX_GROUP_BYTES {
            name.push('.');
        }
        names.push(
            GroupName::new(name)
                .map_err(|e| format!("a name of exactly {MAX_GROUP_BYTES} bytes: {e}"))?,
        );
    }

    let s = h.store().await;
    let mut versions = Vec::new();
    for (i, g) in names.iter().enumerate() {
        let rec = held_by("a", i as u64 + 1);
        let what = format!("CAS(None) on group {:?}", g.as_str());
        versions.push(write_applies(&s, g, None, &rec, &what).await?);
    }
    // Read everything back after all writes, so a collision shows as a
    // wrong token.
    let other = h.store().await;
    for (i, (g, v)) in names.iter().zip(&versions).enumerate() {
        let got = read_some(&other, g, &format!("read of group {:?}", g.as_str())).await?;
        ensure!(
            got.record.token == i as u64 + 1 && got.version == *v,
            "group {:?} reads token {} at {}, expected token {} at {v}: \
             the store mapped two distinct group names to one key",
            g.as_str(),
            got.record.token,
            got.version,
            i + 1
        );
        let what = format!("renewal on group {:?}", g.as_str());
        write_applies(&other, g, Some(*v), &held_by("a", i as u64 + 1), &what).await?;
    }
    Ok(Verdict::Pass)
}

/// Every applied write changes the version to one never seen before in
/// the group, and every earlier version is refused afterwards.
async fn versions_change<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("versions")?;
    let mut seen = Vec::new();
    let mut token = 1;
    let mut current = write_applies(&s, &g, None, &held_by("a", token), "acquire").await?;
    seen.push(current);
    for i in 0..24 {
        // Renew, release, take over: every kind of write.
        let rec = match i % 3 {
            0 => held_by("a", token),
            1 => released(token),
            _ => {
                token += 1;
                held_by("a", token)
            }
        };
        let what = format!("write {} (token {token})", i + 2);
        let next = write_applies(&s, &g, Some(current), &rec, &what).await?;
        ensure!(
            !seen.contains(&next),
            "{what} returned {next}, a version the group already had ({seen:?}): \
             a reused version lets a stale writer succeed (ABA)"
        );
        expect_record(&s, &g, &rec, next, &format!("read after {what}")).await?;
        seen.push(next);
        current = next;
    }
    let unique: HashSet<_> = seen.iter().collect();
    ensure!(unique.len() == seen.len(), "versions repeated: {seen:?}");
    for stale in &seen[..seen.len() - 1] {
        let what = format!("CAS with the stale version {stale}");
        write_conflicts(&s, &g, Some(*stale), &held_by("late", token + 1), &what).await?;
    }
    Ok(Verdict::Pass)
}
