//! A leader whose duty record is near the metadata limit
//! hands over by transfer: the release it writes (its duties' last runs
//! and the successor) must still be a record tenure can read, or no
//! candidate may ever take the group (a corrupt record is never
//! overwritten).

use std::time::Duration;

use tenure::{Config, Elector, GroupName, LeaseView, MemoryStore, Periodic};

#[tokio::test(start_paused = true)]
async fn a_transfer_from_a_leader_with_a_duty_record_near_the_limit_hands_over() {
    let store = MemoryStore::new();
    let config = Config::new(Duration::from_secs(2));
    let a = Elector::builder(store.clone(), "review-transfer")
        .candidate_id("a")
        .config(config.clone())
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(a.is_leader());
    let b = Elector::builder(store.clone(), "review-transfer")
        .candidate_id("b")
        .config(config)
        .start()
        .unwrap();
    // {"tenure.duty.NAME":"<13 digits>"} is NAME + 32 bytes: 4,090 in all,
    // within the 4,096 bytes of metadata a record may hold.
    let name = "d".repeat(4058);
    let duty = a.clone();
    tokio::spawn(async move {
        let _ = duty
            .run_periodic(
                Periodic::every(Duration::from_secs(3600)).named(name),
                |_| async { Ok::<(), std::io::Error>(()) },
            )
            .await;
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let group = GroupName::new("review-transfer").unwrap();
    let before = store.read(&group).await.unwrap().unwrap();
    assert!(
        before
            .record
            .metadata
            .iter()
            .any(|(k, _)| k.starts_with("tenure.duty.")),
        "the duty's run is recorded: {:?}",
        before
            .record
            .metadata
            .iter()
            .map(|(k, v)| (k.len(), v))
            .collect::<Vec<_>>()
    );
    a.transfer_to("b").unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = store.read(&group).await;
    assert!(after.is_ok(), "the record after the transfer: {after:?}");
    assert!(
        b.is_leader(),
        "b does not lead 10 s after the transfer: {after:?}"
    );
    assert_eq!(
        after
            .unwrap()
            .unwrap()
            .record
            .holder
            .map(|h| h.id)
            .as_deref(),
        Some("b")
    );
}
