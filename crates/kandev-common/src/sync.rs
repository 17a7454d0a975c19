//! A poison-tolerant [`lock`]: the one way Kandev's services take a
//! `std::sync::Mutex`.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, going on with its value when a thread panicked while
/// holding it: every state these mutexes guard is valid between any two
/// of its statements (a map, a set, a counter), so one panicking request
/// does not make every later one panic too.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_poisoned_mutex_still_locks_with_its_value() {
        let m = Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("poisons the mutex");
        })
        .join();
        assert!(m.is_poisoned());
        *super::lock(&m) += 1;
        assert_eq!(*super::lock(&m), 2);
    }
}
