//! What a long backend call is waiting for, by instance name: the Node not yet Ready, the pods
//! left to evict and the budget that refuses, the container stopping. Backends note it as the
//! wait goes on; the executor's progress lines read it while the step runs, so that a long step
//! says what it waits for. Only a note: nothing decides on it. So is the tally of the
//! evictions a drain made, which the executor reports when the step ends.

use std::collections::BTreeMap;
use std::sync::Mutex;

static WAITING: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// How each eviction of a step's drain ended (`evicted`, `refused`, `failed`), by instance.
static EVICTIONS: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>> = Mutex::new(BTreeMap::new());

fn tallies() -> std::sync::MutexGuard<'static, BTreeMap<String, BTreeMap<&'static str, u64>>> {
    crate::locked(&EVICTIONS)
}

/// Count one eviction of the drain of `instance`, ended as `result`.
pub fn evicted(instance: &str, result: &'static str) {
    *tallies().entry(instance.to_owned()).or_default().entry(result).or_default() += 1;
}

/// The evictions of the step on `instance` so far, by result, now forgotten.
pub fn take_evictions(instance: &str) -> BTreeMap<&'static str, u64> {
    tallies().remove(instance).unwrap_or_default()
}

fn notes() -> std::sync::MutexGuard<'static, BTreeMap<String, String>> {
    crate::locked(&WAITING)
}

/// Note what the step on `instance` waits for now.
pub fn note(instance: &str, what: impl Into<String>) {
    notes().insert(instance.to_owned(), what.into());
}

/// What the step on `instance` waits for, as last noted.
pub fn of(instance: &str) -> Option<String> {
    notes().get(instance).cloned()
}

/// Forget the note on `instance` (its step ended).
pub fn clear(instance: &str) {
    notes().remove(instance);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_note_is_what_a_step_waits_for_until_it_ends() {
        note("waiting-test-a", "the Node has not registered yet");
        note("waiting-test-a", "the Node is NotReady");
        assert_eq!(of("waiting-test-a").as_deref(), Some("the Node is NotReady"));
        clear("waiting-test-a");
        assert_eq!(of("waiting-test-a"), None);
    }

    #[test]
    fn a_drains_evictions_are_tallied_by_result_until_taken() {
        evicted("waiting-test-b", "refused");
        evicted("waiting-test-b", "refused");
        evicted("waiting-test-b", "evicted");
        assert_eq!(take_evictions("waiting-test-b"), BTreeMap::from([("evicted", 1), ("refused", 2)]));
        assert!(take_evictions("waiting-test-b").is_empty());
    }
}
