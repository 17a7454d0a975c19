//! The pool of agent managers: each announces itself on core NATS
//! (`managers.<manager_id>`, not stored) every `every_ms`; orchestrators
//! keep the announcements they heard recently and place runs among them. A
//! manager not heard from for a few periods is gone; one that stops says so
//! (`leaving`).

use serde::{Deserialize, Serialize};

/// The prefix of announcement subjects.
pub const MANAGERS_PREFIX: &str = "managers.";

/// `managers.>`: every announcement.
pub const MANAGERS_ALL: &str = "managers.>";

/// `managers.<manager_id>`.
pub fn manager_subject(manager_id: &str) -> String {
    format!("{MANAGERS_PREFIX}{manager_id}")
}

/// Whether `id` can name a manager: one NATS subject token (no `.`, `*`,
/// `>` or whitespace), 1 to 64 bytes.
pub fn manager_id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What a manager says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerAnnouncement {
    /// Its `KANDEV_MANAGER_ID`, also the `kandev.manager` label of its
    /// containers.
    pub id: String,
    /// Where its gRPC API answers (`KANDEV_ADVERTISE_URL`).
    pub url: String,
    /// At most this many active instances at once; 0 is no limit.
    pub capacity: u32,
    /// Its active instances now (pending, starting or running).
    pub active: u32,
    /// The enabled agent types whose image its Docker engine has.
    pub agent_types: Vec<String>,
    /// How often it announces itself, in ms.
    pub every_ms: u64,
    /// It is stopping: place nothing more on it.
    #[serde(default)]
    pub leaving: bool,
}

impl ManagerAnnouncement {
    /// Room for one more run.
    pub fn has_room(&self, placed_since: u32) -> bool {
        self.capacity == 0 || self.active + placed_since < self.capacity
    }

    /// Active runs per unit of capacity (a manager without a limit counts
    /// as one of capacity 16), for least-loaded-first placement.
    pub fn load(&self, placed_since: u32) -> f64 {
        let capacity = if self.capacity == 0 {
            16
        } else {
            self.capacity
        };
        f64::from(self.active + placed_since) / f64::from(capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(capacity: u32, active: u32) -> ManagerAnnouncement {
        ManagerAnnouncement {
            id: "m1".into(),
            url: "http://127.0.0.1:8083".into(),
            capacity,
            active,
            agent_types: vec!["mock-agent".into()],
            every_ms: 2000,
            leaving: false,
        }
    }

    #[test]
    fn room_and_load_count_runs_placed_since_the_announcement() {
        assert!(ann(2, 1).has_room(0));
        assert!(!ann(2, 1).has_room(1));
        assert!(ann(0, 100).has_room(5));
        assert!(ann(4, 1).load(0) < ann(2, 1).load(0));
        assert!(ann(4, 1).load(2) > ann(4, 1).load(0));
    }

    #[test]
    fn ids_are_one_subject_token() {
        assert!(manager_id_ok("kandev-agent-manager_2"));
        for bad in ["", "a.b", "a*", "a>", "a b", &"x".repeat(65)] {
            assert!(!manager_id_ok(bad), "{bad:?}");
        }
    }

    #[test]
    fn announcements_read_back_and_leaving_defaults_to_false() {
        let a = ann(2, 1);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(
            serde_json::from_str::<ManagerAnnouncement>(&json).unwrap(),
            a
        );
        let old = json.replace(",\"leaving\":false", "");
        assert!(
            !serde_json::from_str::<ManagerAnnouncement>(&old)
                .unwrap()
                .leaving
        );
    }
}
