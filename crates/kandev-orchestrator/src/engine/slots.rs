//! The queue's admission rules, apart from storage and I/O: how many runs
//! may be active at once, overall and per agent type.

use std::collections::{BTreeMap, HashMap};

/// The launch slots of one dispatch: the active runs per type, against the
/// global and per-type limits.
#[derive(Debug)]
pub(super) struct Slots<'a> {
    max_concurrent: u32,
    per_type: &'a BTreeMap<String, u32>,
    total: u32,
    running: HashMap<String, u32>,
}

impl<'a> Slots<'a> {
    /// From the active runs per agent type (launching or running).
    pub(super) fn new(
        max_concurrent: u32,
        per_type: &'a BTreeMap<String, u32>,
        active: impl IntoIterator<Item = (String, i64)>,
    ) -> Self {
        let mut running = HashMap::new();
        let mut total = 0u32;
        for (agent_type, n) in active {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            total = total.saturating_add(n);
            *running.entry(agent_type).or_default() += n;
        }
        Slots {
            max_concurrent,
            per_type,
            total,
            running,
        }
    }

    /// No run of any type may start.
    pub(super) fn full(&self) -> bool {
        self.total >= self.max_concurrent
    }

    /// A run of `agent_type` may start (the global limit and its type's).
    pub(super) fn admits(&self, agent_type: &str) -> bool {
        let of_type = self.running.get(agent_type).copied().unwrap_or(0);
        !self.full()
            && self
                .per_type
                .get(agent_type)
                .is_none_or(|limit| of_type < *limit)
    }

    /// A run of `agent_type` started.
    pub(super) fn take(&mut self, agent_type: &str) {
        self.total += 1;
        *self.running.entry(agent_type.to_string()).or_default() += 1;
    }

    /// Active runs per type.
    pub(super) fn running(&self) -> &HashMap<String, u32> {
        &self.running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_global_and_per_type_limits_both_hold() {
        let limits = BTreeMap::from([("claude".to_string(), 1)]);
        let mut slots = Slots::new(3, &limits, [("mock".to_string(), 1)]);
        assert!(slots.admits("claude"));
        slots.take("claude");
        assert!(!slots.admits("claude"), "claude's own limit");
        assert!(slots.admits("mock"), "other types still start");
        slots.take("mock");
        assert!(slots.full());
        assert!(!slots.admits("mock"), "the global limit");
        assert_eq!(slots.running()["mock"], 2);
    }

    #[test]
    fn a_limit_of_zero_admits_nothing_and_more_active_than_allowed_is_full() {
        let limits = BTreeMap::from([("off".to_string(), 0)]);
        let slots = Slots::new(2, &limits, [("x".to_string(), 5)]);
        assert!(slots.full());
        let slots = Slots::new(2, &limits, []);
        assert!(!slots.admits("off"));
        assert!(slots.admits("x"));
    }
}
