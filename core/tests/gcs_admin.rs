//! The GCS lock's operator tools against the faithful in-process store:
//! preconditions on every write, as Cloud Storage has them.

mod gcs_support;

use std::time::Duration;

use gcs_support::{builder, FaithfulStore};

#[test]
fn object_state_shows_the_holder_and_its_generation() {
    let store = FaithfulStore::new();
    let operator = builder(&store).build().unwrap();
    assert_eq!(operator.object_state().unwrap(), None);

    let lock = builder(&store)
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let guard = lock.acquire(None).unwrap();
    let object = operator.object_state().unwrap().expect("held");
    assert_eq!(object.generation as u64, guard.fencing_token());
    assert_eq!(object.identity.as_deref(), Some(&*lock.identity()));
    let left = object.expires_in.unwrap();
    assert!(
        left > Duration::from_secs(8) && left <= Duration::from_secs(12),
        "{left:?}"
    );
}

#[test]
fn force_release_deletes_the_object_and_the_holder_turns_unhealthy() {
    let store = FaithfulStore::new();
    let ttl = Duration::from_millis(900);
    let lock = builder(&store).ttl(ttl).build().unwrap();
    let guard = lock.acquire(None).unwrap();
    let old_token = guard.fencing_token();

    let operator = builder(&store).build().unwrap();
    assert!(operator.force_release().unwrap());
    assert!(store.object().is_none());
    assert!(!operator.force_release().unwrap(), "nothing left to delete");

    let started = std::time::Instant::now();
    while guard.healthy() {
        assert!(
            started.elapsed() < ttl * 2,
            "still healthy after its object was deleted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let next = builder(&store).build().unwrap();
    let next_guard = next
        .try_acquire()
        .unwrap()
        .expect("free after the forced release");
    assert!(next_guard.fencing_token() > old_token);
}
