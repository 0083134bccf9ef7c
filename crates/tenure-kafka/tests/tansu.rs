//! NELI against a real Kafka-protocol broker (tansu, started by
//! scripts/servers.sh; private instances for tests that stop the broker).

mod common;

use std::time::{Duration, Instant};

use common::*;
use tenure::{EndReason, Event, Role};
use tenure_kafka::{KafkaObserver, State};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_candidate_acquires_with_a_token_and_observers_see_it() {
    let Some(brokers) = broker() else { return };
    let group = unique("acquire");
    let cfg = config(&brokers);
    let started = Instant::now();
    let (a, status) = candidate(&cfg, &group, "a");
    let rec = Recorder::default();
    rec.watch("a", &a);
    let term = tokio::time::timeout(Duration::from_secs(30), a.wait_for_leadership())
        .await
        .expect("elected within 30 s")
        .unwrap_or_else(|e| panic!("{e}: {:?}", status.fatal_error()));
    eprintln!(
        "acquired in {:?}, token {}",
        started.elapsed(),
        term.token()
    );
    assert!(term.token() >= 1);
    assert!(!term.remaining().is_zero());
    assert_eq!(status.state(), State::Live);

    let mut observer = KafkaObserver::start(cfg.clone(), &group).unwrap();
    let leader = tokio::time::timeout(Duration::from_secs(10), observer.wait_for_leader())
        .await
        .expect("the observer sees the leader")
        .unwrap();
    assert_eq!(leader.candidate, "a");
    assert_eq!(leader.token, term.token());
    assert_eq!(leader.metadata.get("address"), Some("a.example:80"));

    // Renewals keep the term alive well past the heartbeat timeout.
    tokio::time::sleep(H * 2).await;
    assert!(term.is_valid(), "renewed by heartbeats: {term:?}");
    assert!(a.is_leader());

    a.shutdown().await;
    assert!(matches!(a.role(), Role::Stopped));
    assert_eq!(status.state(), State::Closed);
    assert!(term.is_cancelled());
    let events = rec.events();
    assert!(events.iter().any(|(_, _, e)| matches!(
        e,
        Event::Ousted {
            reason: EndReason::Shutdown,
            ..
        }
    )));
    // The observer sees the leader go within a heartbeat timeout.
    let mut w = observer.watch();
    tokio::time::timeout(H * 2, w.wait_for(Option::is_none))
        .await
        .expect("leader lapses")
        .unwrap();
}

/// Not a test of its own: the body of the child candidates that other
/// tests SIGKILL or SIGSTOP (it returns at once unless run as a child).
#[test]
fn child_candidate() {
    child_main();
}

/// Waits until exactly one of `electors` has led for a while, unchanged.
async fn settle(electors: &[&tenure::Elector]) {
    let start = Instant::now();
    let mut stable_since: Option<(Instant, Option<u64>)> = None;
    loop {
        let leaders: Vec<u64> = electors
            .iter()
            .filter_map(|e| e.current_term().map(|t| t.token()))
            .collect();
        let now = Instant::now();
        let current = (leaders.len() == 1).then(|| leaders[0]);
        match stable_since {
            Some((since, token)) if token == current && current.is_some() => {
                if now - since > Duration::from_secs(6) {
                    return;
                }
            }
            _ => stable_since = Some((now, current)),
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the group did not settle"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `who` leads and returns the time and token.
async fn elected(rec: &Recorder, who: &str, after: Instant, limit: Duration) -> (Instant, u64) {
    let mut found = None;
    eventually(limit, &format!("{who} elected"), || {
        found = rec
            .elections()
            .into_iter()
            .find(|(t, w, _)| w == who && *t >= after)
            .map(|(t, _, token)| (t, token));
        found.is_some()
    })
    .await;
    found.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_hand_over_takes_one_rebalance_and_tokens_rise() {
    let Some(brokers) = broker() else { return };
    let group = unique("graceful");
    let cfg = config(&brokers);
    let rec = Recorder::default();
    let (a, _) = candidate(&cfg, &group, "a");
    rec.watch("a", &a);
    let ta = tokio::time::timeout(Duration::from_secs(30), a.wait_for_leadership())
        .await
        .expect("a elected")
        .unwrap();
    let (b, _) = candidate(&cfg, &group, "b");
    rec.watch("b", &b);
    let observer = KafkaObserver::start(cfg.clone(), &group).unwrap();
    // b's join makes the group rebalance (eager: partition 0 is revoked
    // from a and assigned again, to a or b). Let it settle.
    settle(&[&a, &b]).await;
    let (first, second) = if a.is_leader() {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    };
    let Role::Follower { leader } = second.role() else {
        panic!("the other candidate follows: {:?}", second.role());
    };
    assert_eq!(leader.candidate, first.candidate_id());
    assert_eq!(
        leader.metadata.get("address").map(str::to_owned),
        Some(format!("{}.example:80", first.candidate_id()))
    );
    let first_token = first.current_term().unwrap().token();
    assert!(first_token >= ta.token());
    let second_id = second.candidate_id().to_owned();

    let stop = Instant::now();
    first.shutdown().await;
    let shut = stop.elapsed();
    let (when, token) = elected(&rec, &second_id, stop, Duration::from_secs(30)).await;
    let took = when - stop;
    eprintln!(
        "MEASURE graceful hand-over: {took:?} (shutdown returned after {shut:?}; session timeout {:?})",
        cfg.session_timeout()
    );
    assert!(
        token > first_token,
        "tokens rise: {first_token} then {token}"
    );
    assert!(
        took < cfg.session_timeout(),
        "a graceful hand-over does not wait for the session timeout: {took:?}"
    );
    let mut w = observer.watch();
    let seen = tokio::time::timeout(
        Duration::from_secs(10),
        w.wait_for(|l| l.as_ref().is_some_and(|l| l.candidate == second_id)),
    )
    .await
    .expect("the observer sees the new leader")
    .unwrap()
    .clone()
    .unwrap();
    assert_eq!(seen.token, token);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_after_the_session_timeout() {
    let Some(brokers) = broker() else { return };
    let group = unique("crash");
    let cfg = config(&brokers);
    // Two candidates in child processes, so whichever leads can be killed.
    let mut kids = [
        ChildCandidate::spawn("child_candidate", &brokers, &group, "a"),
        ChildCandidate::spawn("child_candidate", &brokers, &group, "b"),
    ];
    let observer = KafkaObserver::start(cfg.clone(), &group).unwrap();
    // Settled: one leader, no election or ousting for 6 s.
    let mut leading: [Option<u64>; 2] = [None, None];
    let mut quiet_since = Instant::now();
    let start = Instant::now();
    loop {
        for (i, kid) in kids.iter_mut().enumerate() {
            while let Ok(line) = kid.lines.try_recv() {
                if let Some(t) = line.strip_prefix("ELECTED ") {
                    leading[i] = Some(t.trim().parse().unwrap());
                    quiet_since = Instant::now();
                } else if line.starts_with("OUSTED") {
                    leading[i] = None;
                    quiet_since = Instant::now();
                }
            }
        }
        let leaders = leading.iter().flatten().count();
        if leaders == 1 && quiet_since.elapsed() > Duration::from_secs(6) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no stable leader: {leading:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead = leading.iter().position(Option::is_some).unwrap();
    let old_token = leading[dead].unwrap();
    let survivor = 1 - dead;
    let name = ["a", "b"];
    assert_eq!(
        observer.leader().map(|l| (l.candidate, l.token)),
        Some((name[dead].to_owned(), old_token)),
        "the observer knows the leader"
    );

    let kill = Instant::now();
    kids[dead].signal(libc::SIGKILL);
    let line = kids[survivor]
        .expect("ELECTED", Duration::from_secs(60))
        .await;
    let took = kill.elapsed();
    let token: u64 = line[8..].trim().parse().unwrap();
    eprintln!(
        "MEASURE crash takeover: {took:?} (session timeout {:?})",
        cfg.session_timeout()
    );
    assert!(token > old_token, "tokens rise: {old_token} then {token}");
    assert!(
        took >= cfg.session_timeout() - Duration::from_secs(1),
        "nobody takes over before the dead leader's session expires: {took:?}"
    );
    let mut w = observer.watch();
    tokio::time::timeout(
        Duration::from_secs(10),
        w.wait_for(|l| {
            l.as_ref()
                .is_some_and(|l| l.candidate == name[survivor] && l.token == token)
        }),
    )
    .await
    .expect("the observer sees the new leader")
    .unwrap();
    // Closing stdin shuts the survivor down gracefully.
    drop(kids[survivor].child.stdin.take());
    kids[survivor]
        .expect("STOPPED", Duration::from_secs(20))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_broker_fences_the_leader_before_its_session_can_expire_and_it_resumes() {
    let Some(tansu) = Tansu::start().await else {
        return;
    };
    let group = unique("fence");
    let cfg = config(&tansu.addr);
    let rec = Recorder::default();
    let (a, _) = candidate(&cfg, &group, "a");
    rec.watch("a", &a);
    let term = tokio::time::timeout(Duration::from_secs(30), a.wait_for_leadership())
        .await
        .expect("a elected")
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let pause = Instant::now();
    tansu.signal(libc::SIGSTOP);
    tokio::time::timeout(H * 2, term.cancelled())
        .await
        .expect("fenced within the heartbeat timeout (and some)");
    let fenced = pause.elapsed();
    let ousted = || {
        rec.events().into_iter().find_map(|(_, _, e)| match e {
            Event::Ousted { reason, .. } => Some(reason),
            _ => None,
        })
    };
    eventually(Duration::from_secs(1), "the ousted event", || {
        ousted().is_some()
    })
    .await;
    assert_eq!(ousted(), Some(EndReason::Fenced));
    assert!(
        fenced < cfg.session_timeout(),
        "fenced before the session can expire"
    );
    assert!(!a.is_leader());
    // Stay stopped past the heartbeat timeout, not past the session timeout.
    tokio::time::sleep((H + Duration::from_secs(2)).saturating_sub(pause.elapsed())).await;
    let resume = Instant::now();
    tansu.signal(libc::SIGCONT);
    let (when, token) = elected(&rec, "a", resume, Duration::from_secs(20)).await;
    eprintln!(
        "MEASURE fence: fenced {fenced:?} after the broker stopped (heartbeat timeout {H:?}); \
         resumed {:?} after it continued",
        when - resume
    );
    assert!(token > term.token(), "resumed with a higher token");
    a.shutdown().await;
}
