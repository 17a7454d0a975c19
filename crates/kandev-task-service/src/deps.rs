//! Subtasks and "blocked by" links between tasks of one board (issue 41):
//! the pure decisions — why a task is blocked, and whether a set of links
//! makes a cycle. The store keeps the links and the `blocked` flag.
//!
//! A task is blocked while any of its blockers is not COMPLETED; a blocked
//! task is not started by itself (the orchestrator's eligibility reads the
//! flag), and the change that completes its last blocker clears the flag,
//! which starts it as `autostart` does. A FAILED or CANCELLED blocker keeps
//! it blocked, and says so.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::domain::{TaskError, TaskState};

/// At most this many blockers per task.
pub const MAX_BLOCKERS: usize = 100;

pub use crate::domain::Blocker;

/// Why a task with these blockers is blocked, e.g. `waiting for 'build'
/// (IN_PROGRESS); blocker 'lint' FAILED`; empty when it is not.
pub fn blocked_reason(blockers: &[Blocker]) -> String {
    blockers
        .iter()
        .filter(|b| b.holds())
        .map(|b| match b.state {
            TaskState::Failed | TaskState::Cancelled => {
                format!("blocker '{}' {}", b.title, b.state)
            }
            state => format!("waiting for '{}' ({state})", b.title),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Checks the blocker ids asked for `task`: no duplicates, not itself, not
/// too many.
pub fn check_blockers(task: Uuid, blockers: &[Uuid]) -> Result<(), TaskError> {
    if blockers.len() > MAX_BLOCKERS {
        return Err(TaskError::InvalidArgument(format!(
            "a task has at most {MAX_BLOCKERS} blockers"
        )));
    }
    let mut seen = HashSet::new();
    for id in blockers {
        if *id == task {
            return Err(TaskError::InvalidArgument(format!(
                "task {task} cannot be blocked by itself"
            )));
        }
        if !seen.insert(id) {
            return Err(TaskError::InvalidArgument(format!(
                "blocker {id} is listed twice"
            )));
        }
    }
    Ok(())
}

/// The cycle that `task` blocked by `blockers` would close, given the
/// board's other links (`(task, blocker)` pairs, the task's own old ones
/// included or not): the path `task → blocker → … → task`, or `None`.
pub fn find_cycle(task: Uuid, blockers: &[Uuid], links: &[(Uuid, Uuid)]) -> Option<Vec<Uuid>> {
    let mut waits_for: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    for (t, b) in links.iter().filter(|(t, _)| *t != task) {
        waits_for.entry(*t).or_default().push(*b);
    }
    waits_for.insert(task, blockers.to_vec());
    // Depth first from the task, with the path that led here.
    let mut visited = HashSet::new();
    let mut stack = vec![(task, vec![task])];
    while let Some((at, path)) = stack.pop() {
        for next in waits_for.get(&at).into_iter().flatten() {
            if *next == task {
                let mut cycle = path.clone();
                cycle.push(task);
                return Some(cycle);
            }
            if visited.insert(*next) {
                let mut longer = path.clone();
                longer.push(*next);
                stack.push((*next, longer));
            }
        }
    }
    None
}

/// The error of a refused cycle, naming its tasks by title (their ids when
/// `titles` lacks one).
pub fn cycle_error(cycle: &[Uuid], titles: &HashMap<Uuid, String>) -> TaskError {
    let names: Vec<String> = cycle
        .iter()
        .map(|id| match titles.get(id) {
            Some(title) => format!("'{title}' ({id})"),
            None => id.to_string(),
        })
        .collect();
    TaskError::InvalidArgument(format!(
        "these blockers make a cycle: {}",
        names.join(" → ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<Uuid> {
        (0..n).map(|_| Uuid::now_v7()).collect()
    }

    #[test]
    fn a_cycle_is_found_with_its_path() {
        let t = ids(3);
        // t1 waits for t2, t2 for t0; t0 blocked by t1 closes the loop.
        let links = [(t[1], t[2]), (t[2], t[0])];
        assert_eq!(
            find_cycle(t[0], &[t[1]], &links),
            Some(vec![t[0], t[1], t[2], t[0]])
        );
        // The task's own old links do not count: they are replaced.
        assert_eq!(
            find_cycle(t[2], &[t[1]], &[(t[2], t[0]), (t[1], t[0])]),
            None
        );
        // A diamond is no cycle.
        let d = ids(4);
        let links = [(d[1], d[3]), (d[2], d[3])];
        assert_eq!(find_cycle(d[0], &[d[1], d[2]], &links), None);
    }

    #[test]
    fn bad_blocker_lists_are_refused() {
        let t = ids(2);
        assert!(check_blockers(t[0], &[t[0]]).is_err());
        assert!(check_blockers(t[0], &[t[1], t[1]]).is_err());
        assert!(check_blockers(t[0], &[t[1]]).is_ok());
        let many: Vec<Uuid> = ids(MAX_BLOCKERS + 1);
        assert!(check_blockers(t[0], &many).is_err());
    }

    #[test]
    fn the_reason_names_each_blocker_that_holds() {
        let b = |title: &str, state| Blocker {
            id: Uuid::now_v7(),
            title: title.into(),
            state,
        };
        let blockers = [
            b("build", TaskState::InProgress),
            b("docs", TaskState::Completed),
            b("lint", TaskState::Failed),
        ];
        assert_eq!(
            blocked_reason(&blockers),
            "waiting for 'build' (IN_PROGRESS); blocker 'lint' FAILED"
        );
        assert_eq!(blocked_reason(&blockers[1..2]), "");
    }
}
