//! Connecting to NATS as one of Kandev's services.
//!
//! Each service logs in with its own NATS user (`KANDEV_NATS_USER`,
//! `KANDEV_NATS_PASSWORD`), which `deploy/nats/nats.conf` allows only the
//! subjects that service uses; without credentials the connection is
//! anonymous, for a NATS without authorization (tests, a bare dev setup).
//! A service's reply inboxes are `_INBOX.<name>.>` ([`NatsLogin::inbox_prefix`],
//! e.g. `_INBOX.kandev-orchestrator.>`), so a user can be allowed its own
//! replies (JetStream acknowledgements and pulled messages among them),
//! never another's.
//!
//! [`connect`] refuses at once, with [`BusError::Refused`], when NATS
//! answers and rejects the credentials; a NATS that does not answer yet is
//! waited for in the background, as before.

use std::time::Duration;

use async_nats::{ConnectErrorKind, ConnectOptions, Event, ServerAddr};
use kandev_common::config::ServiceSettings;
pub use kandev_common::config::{NatsPassword, check_nats_credentials as check_credentials};

use crate::BusError;

/// Who a service is to NATS: its name and, when NATS requires them, its
/// user and password.
#[derive(Debug, Clone)]
pub struct NatsLogin {
    /// The connection's name (`kandev-task-service`, ...: NATS monitoring
    /// shows it) and the second token of its inboxes.
    pub name: String,
    pub user: Option<String>,
    pub password: Option<NatsPassword>,
}

impl NatsLogin {
    /// `name` with the configured user and password (both or neither, see
    /// [`check_credentials`]).
    pub fn new(
        name: impl Into<String>,
        user: Option<String>,
        password: Option<NatsPassword>,
    ) -> Self {
        NatsLogin {
            name: name.into(),
            user,
            password,
        }
    }

    /// `name` with the user and password of `settings`.
    pub fn configured(name: impl Into<String>, settings: &ServiceSettings) -> Self {
        NatsLogin::new(
            name,
            settings.nats_user.clone(),
            settings.nats_password.clone(),
        )
    }

    /// `name` without credentials.
    pub fn anonymous(name: impl Into<String>) -> Self {
        NatsLogin::new(name, None, None)
    }

    /// `_INBOX.<name>`: where replies to this connection's requests
    /// (JetStream API answers, publish acknowledgements, pulled messages)
    /// arrive.
    pub fn inbox_prefix(&self) -> String {
        format!("_INBOX.{}", self.name)
    }

    /// Who this is, for messages: `user "task-service"` or `no user`.
    fn who(&self) -> String {
        match &self.user {
            Some(user) => format!("user {user:?}"),
            None => "a connection without credentials".to_string(),
        }
    }

    fn options(&self) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .name(self.name.clone())
            .custom_inbox_prefix(self.inbox_prefix())
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(2));
        if let (Some(user), Some(password)) = (&self.user, &self.password) {
            options = options.user_and_password(user.clone(), password.expose_secret().to_string());
        }
        options
    }
}

/// Connects as `login`. A NATS that answers is connected to at once; one
/// that refuses the credentials (or requires some and got none) is an error,
/// [`BusError::Refused`]; one that does not answer is retried in the
/// background, and the client returned connects when it comes up.
/// `on_event` sees every connection event (after it is logged); a
/// permission violation, the server refusing a subject, is logged as a
/// warning naming the subject.
pub async fn connect<F>(
    url: &str,
    login: &NatsLogin,
    on_event: F,
) -> Result<async_nats::Client, BusError>
where
    F: Fn(&Event) + Clone + Send + Sync + 'static,
{
    let events = |on_event: F, login: NatsLogin| {
        move |event: Event| {
            let on_event = on_event.clone();
            let login = login.clone();
            async move {
                log_event(&login, &event);
                on_event(&event);
            }
        }
    };
    let servers = servers(url).map_err(|reason| BusError::Connect {
        url: url.to_string(),
        reason,
    })?;
    let first = login
        .options()
        .event_callback(events(on_event.clone(), login.clone()))
        .connect(servers.clone())
        .await;
    let err = match first {
        Ok(client) => return Ok(client),
        Err(err) => err,
    };
    match err.kind() {
        ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
            Err(BusError::Refused {
                url: url.to_string(),
                who: login.who(),
                reason: err.to_string(),
            })
        }
        // Not up yet (or not resolvable yet): wait for it in the background.
        ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns => {
            tracing::warn!(%url, %err, "NATS does not answer yet; connecting in the background");
            login
                .options()
                .retry_on_initial_connect()
                .event_callback(events(on_event, login.clone()))
                .connect(servers)
                .await
                .map_err(|e| BusError::Connect {
                    url: url.to_string(),
                    reason: e.to_string(),
                })
        }
        _ => Err(BusError::Connect {
            url: url.to_string(),
            reason: err.to_string(),
        }),
    }
}

/// The servers of `url`: one URL, or several comma-separated (the nodes of
/// a cluster; the client also learns the others from the one it reaches).
pub fn servers(url: &str) -> Result<Vec<ServerAddr>, String> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<ServerAddr>()
                .map_err(|e| format!("{u:?} is not a NATS URL: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|list| {
            if list.is_empty() {
                Err("no NATS URL".into())
            } else {
                Ok(list)
            }
        })
}

fn log_event(login: &NatsLogin, event: &Event) {
    match event {
        Event::ServerError(err) => {
            tracing::warn!(%err, connection = %login.name, "NATS refused an operation");
        }
        Event::ClientError(err) if err.to_string().contains("authorization violation") => {
            tracing::error!(
                %err,
                connection = %login.name,
                "NATS refused {}: check KANDEV_NATS_USER and KANDEV_NATS_PASSWORD",
                login.who()
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_may_list_the_nodes_of_a_cluster() {
        assert_eq!(servers("nats://127.0.0.1:4222").unwrap().len(), 1);
        let nodes = servers("nats://a:4222, nats://b:4223,nats://c:4224").unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[1].port(), 4223);
        assert!(servers("").unwrap_err().contains("no NATS URL"));
        assert!(
            servers("nats://a:4222,nats://b:x")
                .unwrap_err()
                .contains("nats://b:x")
        );
    }

    #[test]
    fn passwords_stay_out_of_debug_output() {
        let login = NatsLogin::new(
            "kandev-task-service",
            Some("task-service".into()),
            Some("hunter2-hunter2".into()),
        );
        let shown = format!("{login:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }

    #[test]
    fn user_and_password_come_together() {
        let pw = Some(NatsPassword::from("pw"));
        assert!(check_credentials(&None, &None).is_ok());
        assert!(check_credentials(&Some("u".into()), &pw).is_ok());
        assert!(check_credentials(&Some("u".into()), &None).is_err());
        assert!(check_credentials(&None, &pw).is_err());
        assert!(check_credentials(&Some(String::new()), &pw).is_err());
    }

    #[test]
    fn each_service_has_its_own_inbox() {
        assert_eq!(
            NatsLogin::anonymous("kandev-gateway").inbox_prefix(),
            "_INBOX.kandev-gateway"
        );
    }
}
