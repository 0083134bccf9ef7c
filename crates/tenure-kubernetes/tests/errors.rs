//! What goes wrong on Kubernetes: credentials, rights, a missing namespace,
//! Leases tenure did not write, hostile contents, a deleted Lease; and the
//! record as `kubectl get lease -o yaml` shows it.

mod common;

use serde_json::json;
use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, StoreError, Version};
use tenure_kubernetes::{lease_name, KubernetesStore, KubernetesStoreError};
use tenure_testkit::{self as testkit, held_by};

/// Every token of the kubeconfig, which no message may show.
fn tokens(kubeconfig: &str) -> Vec<String> {
    let kc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    kc["users"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["user"]["token"].as_str().map(str::to_owned))
        .collect()
}

fn no_token(kubeconfig: &str, text: &str) {
    for t in tokens(kubeconfig) {
        assert!(!text.contains(&t), "a bearer token in: {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_and_rights_errors_name_the_fix_and_no_token() {
    let Some(kc) = common::kubeconfig() else {
        return;
    };
    let label = common::run_label();
    // A token the server never issued: 401.
    let err = KubernetesStore::connect(&common::url(&kc, &label, Some("wrong-token")))
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        matches!(err, KubernetesStoreError::Unauthorized { .. }),
        "{text}"
    );
    assert!(text.contains("401"), "{text}");
    no_token(&kc, &text);
    let store_error = StoreError::from(err);
    testkit::assert_misconfigured(&store_error, "401");

    // Read-only rights: connects (it may list), and a write names the Role.
    let reader = KubernetesStore::connect(&common::url(&kc, &label, Some("reader")))
        .await
        .unwrap();
    let g = testkit::unique_group("reader");
    let err = reader
        .compare_and_swap(&g, None, &held_by("a", 1))
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    testkit::assert_misconfigured(&err, "403");
    for needed in [
        "kind: Role",
        "leases",
        "\"create\"",
        "\"update\"",
        "\"watch\"",
        "namespace: tenure-test",
    ] {
        assert!(text.contains(needed), "{needed} missing from: {text}");
    }
    no_token(&kc, &text);
    no_token(&kc, &format!("{reader:?} {}", reader.describe()));

    // Rights in another namespace only: refused at connect.
    let err = KubernetesStore::connect(&common::url(&kc, &label, Some("limited")))
        .await
        .unwrap_err();
    let text = format!("{err}");
    assert!(
        matches!(err, KubernetesStoreError::Forbidden { verb: "list", .. }),
        "{text}"
    );
    no_token(&kc, &text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_namespace_says_so() {
    let Some(kc) = common::kubeconfig() else {
        return;
    };
    let url = format!(
        "k8s://no-such-namespace-{:x}?kubeconfig={kc}",
        testkit::unique_suffix() & 0xffff
    );
    let store = KubernetesStore::connect(&url).await.unwrap();
    let err = store
        .compare_and_swap(&testkit::unique_group("ns"), None, &held_by("a", 1))
        .await
        .unwrap_err();
    testkit::assert_misconfigured(&err, "does not exist");
    assert!(
        err.to_string().contains("kubectl create namespace"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_tenure_did_not_write_is_foreign_and_never_overwritten() {
    let Some(kc) = common::kubeconfig() else {
        return;
    };
    let label = common::run_label();
    let store = KubernetesStore::connect(&common::url(&kc, &label, None))
        .await
        .unwrap();
    let raw = common::KubeRaw::new(&kc, &label).await;

    // As client-go's leader election writes it.
    let g = testkit::unique_group("client-go");
    let name = common::name_by_hand(g.as_str());
    let planted = raw
        .put(
            &name,
            json!({"metadata": {}, "spec": {"holderIdentity": "controller-7f9-x", "leaseDurationSeconds": 15,
                "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 3}}),
        )
        .await;
    let rv: u64 = planted
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let err = store.read(&g).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Record { source: tenure::error::RecordError::Foreign { detail }, .. }
            if detail.contains("controller-7f9-x")),
        "{err:?}"
    );
    testkit::conflicts(
        &store,
        &g,
        None,
        &held_by("a", 1),
        "CAS(None) over a foreign Lease",
    )
    .await;
    assert!(matches!(
        store
            .compare_and_swap(&g, Some(Version(rv)), &held_by("a", 1))
            .await,
        Ok(CasOutcome::Conflict)
    ));
    let after = raw.api.get(&name).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        planted.metadata.resource_version
    );

    // A Lease of tenure's that another program took over (its spec
    // changed, tenure's annotations left as they were).
    let g2 = testkit::unique_group("taken-over");
    let v = testkit::applied(&store, &g2, None, &held_by("a", 1)).await;
    let name2 = lease_name(&g2);
    let mut lease = serde_json::to_value(raw.api.get(&name2).await.unwrap()).unwrap();
    lease["spec"]["holderIdentity"] = json!("intruder");
    let taken = raw.put(&name2, lease).await;
    let err = store.read(&g2).await.unwrap_err();
    assert!(err.to_string().contains("intruder"), "{err}");
    assert!(matches!(
        store.compare_and_swap(&g2, Some(v), &held_by("a", 1)).await,
        Ok(CasOutcome::Conflict)
    ));
    let after = raw.api.get(&name2).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        taken.metadata.resource_version
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_contents_are_errors_not_panics() {
    let Some(kc) = common::kubeconfig() else {
        return;
    };
    let label = common::run_label();
    let store = KubernetesStore::connect(&common::url(&kc, &label, None))
        .await
        .unwrap();
    let raw = common::KubeRaw::new(&kc, &label).await;
    let good = String::from_utf8(held_by("a", 7).encode()).unwrap();
    let cases = [
        (
            "token-mismatch",
            json!({"tenure.dev/record": good, "tenure.dev/token": "99999999999999999999999999"}),
        ),
        (
            "huge-json",
            json!({"tenure.dev/record": format!("{{\"v\":1,\"token\":{}}}", "9".repeat(400))}),
        ),
        (
            "nested",
            json!({"tenure.dev/record": format!("{}{}", "[".repeat(5000), "]".repeat(5000))}),
        ),
        (
            "other-group",
            json!({"tenure.dev/record": good, "tenure.dev/group": "someone-else"}),
        ),
    ];
    for (label_, annotations) in cases {
        let g = testkit::unique_group(label_);
        let name = common::name_by_hand(g.as_str());
        let planted = raw
            .put(
                &name,
                json!({"metadata": {"annotations": annotations}, "spec": {"holderIdentity": "a", "leaseTransitions": i32::MAX}}),
            )
            .await;
        match store.read(&g).await {
            Err(StoreError::Record { group, .. }) => assert_eq!(group, g, "{label_}"),
            other => panic!("{label_}: {other:?}"),
        }
        testkit::conflicts(
            &store,
            &g,
            None,
            &held_by("a", 1),
            "CAS(None) over a foreign Lease",
        )
        .await;
        let after = raw.api.get(&name).await.unwrap();
        assert_eq!(
            after.metadata.resource_version, planted.metadata.resource_version,
            "{label_}"
        );
    }
    // leaseTransitions at i32::MAX: a new term saturates, no overflow.
    let g = testkit::unique_group("transitions");
    let v = testkit::applied(&store, &g, None, &held_by("a", 1)).await;
    let name = lease_name(&g);
    let mut lease = serde_json::to_value(raw.api.get(&name).await.unwrap()).unwrap();
    lease["spec"]["leaseTransitions"] = json!(i32::MAX);
    raw.put(&name, lease).await;
    let read = store.read(&g).await.unwrap().unwrap();
    assert_ne!(read.version, v);
    testkit::applied(&store, &g, Some(read.version), &held_by("b", 2)).await;
    let after = raw.api.get(&name).await.unwrap();
    assert_eq!(after.spec.unwrap().lease_transitions, Some(i32::MAX));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_lease_is_not_made_again_by_a_stale_write() {
    let Some(kc) = common::kubeconfig() else {
        return;
    };
    let label = common::run_label();
    let store = KubernetesStore::connect(&common::url(&kc, &label, None))
        .await
        .unwrap();
    let raw = common::KubeRaw::new(&kc, &label).await;
    let g = testkit::unique_group("deleted");
    let v = testkit::applied(&store, &g, None, &held_by("a", 1)).await;
    raw.api
        .delete(&lease_name(&g), &kube::api::DeleteParams::default())
        .await
        .unwrap();
    // The renewal the leader had in flight: the API server would make a
    // missing Lease again on a PUT (create-on-update), but the uid it
    // carries is a precondition no new object meets.
    testkit::conflicts(
        &store,
        &g,
        Some(v),
        &held_by("a", 1),
        "a renewal of a deleted Lease",
    )
    .await;
    assert!(raw.api.get_opt(&lease_name(&g)).await.unwrap().is_none());
    // So is one whose uid the store never saw (another handle).
    let other = KubernetesStore::connect(&common::url(&kc, &label, None))
        .await
        .unwrap();
    testkit::conflicts(
        &other,
        &g,
        Some(v),
        &held_by("a", 1),
        "a renewal of a deleted Lease, from another handle",
    )
    .await;
    assert!(store.read(&g).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lease_reads_as_people_expect() {
    let Some(kc) = common::kubeconfig() else {
        return;
    };
    let label = common::run_label();
    let store = KubernetesStore::connect(&common::url(&kc, &label, None))
        .await
        .unwrap();
    let raw = common::KubeRaw::new(&kc, &label).await;
    let g = GroupName::new(format!("people-{label}")).unwrap();
    let name = lease_name(&g);
    assert_eq!(name, g.as_str(), "a valid name is kept as it is");
    let mut rec = held_by("pod-a", 1);
    rec.term = std::time::Duration::from_millis(9500);
    let v1 = testkit::applied(&store, &g, None, &rec).await;
    let first = raw.api.get(&name).await.unwrap();
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
    assert_eq!(spec.lease_duration_seconds, Some(10));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());
    let ann = first.metadata.annotations.clone().unwrap();
    assert_eq!(ann.get("tenure.dev/token").map(String::as_str), Some("1"));
    assert_eq!(
        ann.get("tenure.dev/group").map(String::as_str),
        Some(g.as_str())
    );
    assert_eq!(
        first
            .metadata
            .labels
            .clone()
            .unwrap()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("tenure")
    );
    // A renewal keeps the term's acquireTime and transitions.
    let mut renewal = rec.clone();
    renewal.renewed_at = rec.renewed_at + std::time::Duration::from_secs(3);
    renewal.expires_at = renewal.renewed_at + renewal.term;
    let v2 = testkit::applied(&store, &g, Some(v1), &renewal).await;
    let second = raw.api.get(&name).await.unwrap().spec.unwrap();
    assert_eq!(second.acquire_time, spec.acquire_time);
    assert_ne!(second.renew_time, spec.renew_time);
    assert_eq!(second.lease_transitions, Some(0));
    // A new term: one more transition, a new acquireTime.
    let mut next = held_by("pod-b", 2);
    next.renewed_at = renewal.renewed_at + std::time::Duration::from_secs(20);
    next.expires_at = next.renewed_at + next.term;
    let v3 = testkit::applied(&store, &g, Some(v2), &next).await;
    let third = raw.api.get(&name).await.unwrap().spec.unwrap();
    assert_eq!(third.holder_identity.as_deref(), Some("pod-b"));
    assert_eq!(third.lease_transitions, Some(1));
    assert_ne!(third.acquire_time, spec.acquire_time);
    // A release: no holder, the token kept.
    testkit::applied(&store, &g, Some(v3), &testkit::released(2)).await;
    let fourth = raw.api.get(&name).await.unwrap();
    assert_eq!(fourth.spec.unwrap().holder_identity, None);
    assert_eq!(
        fourth
            .metadata
            .annotations
            .unwrap()
            .get("tenure.dev/token")
            .map(String::as_str),
        Some("2")
    );
    // kubectl shows the same.
    let out = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            &kc,
            "-n",
            common::NAMESPACE,
            "get",
            "lease",
            &name,
            "-o",
            "yaml",
        ])
        .output()
        .expect("kubectl is installed");
    let yaml = String::from_utf8_lossy(&out.stdout);
    assert!(
        yaml.contains("leaseTransitions: 1") && yaml.contains("tenure.dev/record"),
        "{yaml}"
    );
}
