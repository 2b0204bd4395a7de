//! Start gates: a job deferred at a gate waits without a try, says why, and is released.

use super::*;
use bftp_core::window::{Wait, WaitReason};

fn down(until: Timestamp) -> Wait {
    Wait {
        reason: WaitReason::HostDown,
        host: Some("src.example.org:2121".into()),
        until,
    }
}

fn a_deferred_job_waits_says_why_and_is_released(fx: &Fixture) {
    let store = fx.open();
    let id = store.submit(job(1)).unwrap().job().id;
    // Claimed by `due` (on PostgreSQL), then deferred: the claim goes, the due time moves.
    assert_eq!(store.due(at(60), 10).unwrap().len(), 1);
    let j = store
        .defer(id, at(300), Some(down(at(300))), at(61))
        .unwrap();
    assert_eq!(
        j.state,
        JobState::Queued {
            next_attempt_at: at(300)
        }
    );
    assert_eq!(j.attempts, 0);
    assert_eq!(store.get(id).unwrap().unwrap().waiting, Some(down(at(300))));
    assert_eq!(store.due(at(299), 10).unwrap(), []);
    assert_eq!(store.next_due().unwrap(), Some(at(300)));
    // The next probe: moved again, one history line for the whole wait.
    store
        .defer(id, at(400), Some(down(at(400))), at(300))
        .unwrap();
    assert_eq!(kinds(&*store, id), ["submitted", "waiting"]);
    // The host is back: due at once, no wait shown.
    let j = store.defer(id, at(310), None, at(310)).unwrap();
    assert_eq!(j.waiting, None);
    assert_eq!(store.due(at(310), 10).unwrap(), [(at(310), id)]);
    // A start clears any wait; a start is the first try.
    store
        .defer(id, at(310), Some(down(at(310))), at(310))
        .unwrap();
    let j = store
        .apply(id, JobEvent::Start { attempt: 1 }, at(311), None)
        .unwrap();
    assert_eq!((j.waiting, j.attempts), (None, 1));
    // An attempt that stopped for a closed window: back in the queue, its try not counted.
    let window = Wait {
        reason: WaitReason::Window,
        host: None,
        until: at(900),
    };
    let j = store
        .defer(id, at(900), Some(window.clone()), at(320))
        .unwrap();
    assert_eq!(
        (j.state, j.attempts, j.waiting),
        (
            JobState::Queued {
                next_attempt_at: at(900)
            },
            0,
            Some(window.clone())
        )
    );
    assert_eq!(store.running_jobs().unwrap(), []);
    // A final job is not deferred.
    store.apply(id, JobEvent::Cancel, at(330), None).unwrap();
    assert!(matches!(
        store.defer(id, at(900), Some(window), at(331)),
        Err(StoreError::InvalidTransition { .. })
    ));
    assert_eq!(store.get(id).unwrap().unwrap().waiting, None);
}

both_stores!(a_deferred_job_waits_says_why_and_is_released);
