//! What a long backend call is waiting for, by instance name: the Node not yet Ready, the pods
//! left to evict and the budget that refuses, the container stopping. Backends note it as the
//! wait goes on; the executor's progress lines read it while the step runs, so that a long step
//! says what it waits for. Only a note: nothing decides on it.

use std::collections::BTreeMap;
use std::sync::Mutex;

static WAITING: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

fn notes() -> std::sync::MutexGuard<'static, BTreeMap<String, String>> {
    WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
}
