//! The task state: one typed contract for every service and the web UI.
//!
//! The task service enforces [`TaskState::allowed_next`], the orchestrator
//! moves tasks along it, the gateway serves it as JSON (and to the UI as the
//! generated `/js/states.js`), events carry it by its upper-case name. A name
//! that is not one of these states is an error wherever it is parsed.

use std::fmt;
use std::str::FromStr;

use kandev_proto::v1 as pb;
use serde::{Deserialize, Serialize};

/// Declares [`TaskState`] from one table, in board order: each state's
/// variant, its seed name (as stored, sent and shown in the API) and the
/// column title a person reads. [`TaskState::ALL`], `as_str`, `label` and
/// the gRPC mapping (whose variants bear the same names) follow from it.
macro_rules! task_states {
    ($($state:ident => $name:literal, $label:literal;)+) => {
        /// The state of a task: one kanban column each.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
        )]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum TaskState {
            $($state,)+
        }

        impl TaskState {
            /// In board order.
            pub const ALL: [TaskState; [$($name),+].len()] = [$(TaskState::$state),+];

            /// The seed's upper-case name, as stored, sent and shown in the API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(TaskState::$state => $name,)+
                }
            }

            /// The column title a person reads.
            pub fn label(self) -> &'static str {
                match self {
                    $(TaskState::$state => $label,)+
                }
            }

            /// From the gRPC enum's number; `UNSPECIFIED` and unknown numbers are
            /// errors.
            pub fn from_proto(value: i32) -> Result<TaskState, UnknownTaskState> {
                match pb::TaskState::try_from(value) {
                    $(Ok(pb::TaskState::$state) => Ok(TaskState::$state),)+
                    Ok(pb::TaskState::Unspecified) | Err(_) => {
                        Err(UnknownTaskState(value.to_string()))
                    }
                }
            }

            /// The gRPC enum's variant.
            pub fn to_proto(self) -> pb::TaskState {
                match self {
                    $(TaskState::$state => pb::TaskState::$state,)+
                }
            }
        }
    };
}

task_states! {
    Todo => "TODO", "To do";
    InProgress => "IN_PROGRESS", "In progress";
    Review => "REVIEW", "Review";
    Blocked => "BLOCKED", "Blocked";
    WaitingForInput => "WAITING_FOR_INPUT", "Waiting for input";
    Completed => "COMPLETED", "Completed";
    Failed => "FAILED", "Failed";
    Cancelled => "CANCELLED", "Cancelled";
}

use TaskState::*;

/// Every allowed change of state; anything else is refused. A task whose
/// agent cannot even start fails from TODO. Terminal states reopen to TODO,
/// or straight to IN_PROGRESS when a follow-up puts an agent to work on
/// them again (and FAILED may also be given up as CANCELLED);
/// REVIEW can be sent back to work; an agent waiting for input goes back to
/// work when answered, or its run ends while it waits (a question that timed
/// out).
pub const TRANSITIONS: &[(TaskState, &[TaskState])] = &[
    (Todo, &[InProgress, Blocked, Failed, Cancelled]),
    (
        InProgress,
        &[
            Todo,
            Review,
            Blocked,
            WaitingForInput,
            Completed,
            Failed,
            Cancelled,
        ],
    ),
    (Review, &[Todo, InProgress, Completed, Cancelled]),
    (Blocked, &[Todo, InProgress, Cancelled]),
    (
        WaitingForInput,
        &[Todo, InProgress, Review, Completed, Failed, Cancelled],
    ),
    (Completed, &[Todo, InProgress]),
    (Failed, &[Todo, InProgress, Cancelled]),
    (Cancelled, &[Todo, InProgress]),
];

/// A state name that is not one of [`TaskState::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task state {0:?}")]
pub struct UnknownTaskState(pub String);

impl TaskState {
    /// The states this one may change to.
    pub fn allowed_next(self) -> &'static [TaskState] {
        TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .map(|(_, to)| *to)
            .unwrap_or(&[])
    }

    pub fn can_change_to(self, to: TaskState) -> bool {
        self.allowed_next().contains(&to)
    }

    /// Whether no agent works on a task in this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, Completed | Failed | Cancelled)
    }

    /// The contract as an ES module for the web UI: the states in board
    /// order, their labels and the allowed changes. The gateway serves it as
    /// `/js/states.js`, so the UI never keeps its own copy.
    pub fn es_module() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|s| s.as_str()).collect();
        let labels: serde_json::Map<String, serde_json::Value> = Self::ALL
            .iter()
            .map(|s| (s.as_str().to_owned(), s.label().into()))
            .collect();
        let next: serde_json::Map<String, serde_json::Value> = Self::ALL
            .iter()
            .map(|s| {
                let to: Vec<&str> = s.allowed_next().iter().map(|t| t.as_str()).collect();
                (s.as_str().to_owned(), serde_json::json!(to))
            })
            .collect();
        format!(
            "// Generated by the gateway from kandev_events::TaskState; do not edit.\n\
             export const STATES = Object.freeze({});\n\
             export const STATE_LABELS = Object.freeze({});\n\
             export const TRANSITIONS = Object.freeze({});\n",
            serde_json::json!(names),
            serde_json::Value::Object(labels),
            serde_json::Value::Object(next),
        )
    }
}

impl FromStr for TaskState {
    type Err = UnknownTaskState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownTaskState(s.to_owned()))
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<TaskState> for pb::TaskState {
    fn from(state: TaskState) -> Self {
        state.to_proto()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for state in TaskState::ALL {
            assert_eq!(state.as_str().parse::<TaskState>(), Ok(state));
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
            assert_eq!(serde_json::from_str::<TaskState>(&json).unwrap(), state);
            assert_eq!(TaskState::from_proto(state.to_proto() as i32), Ok(state));
        }
        assert!("DONE".parse::<TaskState>().is_err());
        assert!("todo".parse::<TaskState>().is_err());
        assert!(serde_json::from_str::<TaskState>("\"DONE\"").is_err());
        assert!(TaskState::from_proto(0).is_err());
        assert!(TaskState::from_proto(99).is_err());
    }

    #[test]
    fn every_state_has_its_transitions_and_none_leads_to_itself() {
        for state in TaskState::ALL {
            assert_eq!(
                TRANSITIONS
                    .iter()
                    .filter(|(from, _)| *from == state)
                    .count(),
                1,
                "{state}"
            );
            assert!(!state.can_change_to(state), "{state}");
        }
    }

    #[test]
    fn the_ui_module_lists_every_state_in_board_order() {
        let module = TaskState::es_module();
        assert!(module.contains(
            r#"export const STATES = Object.freeze(["TODO","IN_PROGRESS","REVIEW","BLOCKED","WAITING_FOR_INPUT","COMPLETED","FAILED","CANCELLED"]);"#
        ));
        assert!(module.contains(r#""WAITING_FOR_INPUT":"Waiting for input""#));
        assert!(module.contains(r#""COMPLETED":["TODO","IN_PROGRESS"]"#));
    }
}
