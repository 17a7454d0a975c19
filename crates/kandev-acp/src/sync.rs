//! A poison-tolerant [`lock`]: a panicking handler does not make every
//! later lock of the client's state panic too.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, going on with its value when a thread panicked holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
