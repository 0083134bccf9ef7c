//! Listing groups by prefix (what sharded sets read their members from).

use super::*;
use std::collections::BTreeMap;

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Cases<'a> {
    vec![case("list_by_prefix", list_by_prefix(h, r))]
}

/// Listing by prefix returns exactly the groups whose names start with it,
/// byte for byte (wildcard characters of the store's query language are
/// literal), each with its record; an undecodable record fails alone.
async fn list_by_prefix<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let names = [
        "list-p/a",
        "list-p/b",
        "list-p/released",
        "list-pq",
        "list-x/c",
        "list%_*?[\\/a",
        "listX_*?[\\/b",
    ];
    let groups: Vec<GroupName> = names
        .iter()
        .map(|n| run.group(n))
        .collect::<Result<_, _>>()?;
    let mut written = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        let record = if names[i].ends_with("released") {
            released(4)
        } else {
            held_by(&format!("m{i}"), i as u64 + 1)
        };
        let v = applied(
            s.compare_and_swap(g, None, &record)
                .await
                .ctx(&format!("writing {g}"))?,
            "a write to list",
        )?;
        written.insert(g.to_string(), (v, record));
    }
    let bad = run.group("list-p/corrupt")?;
    h.plant_raw(&bad, b"\x00not a tenure record").await;
    let prefix = format!("{}-list-p/", run.id);
    let listed =
        match s.list(&prefix).await {
            Err(StoreError::Unsupported { .. }) => return Ok(Verdict::Skip(
                "the store cannot list groups (list() is unsupported); it cannot host sharded sets"
                    .into(),
            )),
            other => other.ctx("list()")?,
        };
    let mut seen = BTreeMap::new();
    for entry in listed {
        ensure!(
            entry.group.as_str().starts_with(&prefix),
            "list({prefix:?}) returned {}, which does not start with the prefix",
            entry.group
        );
        ensure!(
            seen.insert(entry.group.to_string(), entry.record).is_none(),
            "list returned {} twice",
            entry.group
        );
    }
    let want: Vec<String> = ["list-p/a", "list-p/b", "list-p/corrupt", "list-p/released"]
        .iter()
        .map(|n| format!("{}-{n}", run.id))
        .collect();
    let got: Vec<String> = seen.keys().cloned().collect();
    ensure!(
        got == want,
        "list({prefix:?}) returned {got:?}, expected {want:?}"
    );
    for (name, record) in &seen {
        if name.ends_with("corrupt") {
            ensure!(
                matches!(record, Err(StoreError::Record { .. })),
                "the undecodable record under {name} was listed as {record:?}, expected a Record error for it alone"
            );
            continue;
        }
        let (version, want) = &written[name];
        match record {
            Ok(v) if v.version == *version && &v.record == want => {}
            other => {
                return Err(format!(
                    "list entry {name}: got {other:?}, expected version {version} of {want:?}"
                ))
            }
        }
    }
    // Characters that are wildcards in SQL LIKE, glob and regular
    // expressions are matched literally.
    let literal = format!("{}-list%_*?[\\/", run.id);
    let listed = s
        .list(&literal)
        .await
        .ctx("list() with wildcard characters")?;
    let got: Vec<String> = listed.iter().map(|l| l.group.to_string()).collect();
    ensure!(
        got == [format!("{}-list%_*?[\\/a", run.id)],
        "list({literal:?}) returned {got:?}: wildcard characters in a prefix must match only themselves"
    );
    let none = s
        .list(&format!("{}-nothing-here/", run.id))
        .await
        .ctx("list() of an unused prefix")?;
    ensure!(
        none.is_empty(),
        "list() of an unused prefix returned {} groups",
        none.len()
    );
    Ok(Verdict::Pass)
}
