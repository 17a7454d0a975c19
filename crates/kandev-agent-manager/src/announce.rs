//! Announcing this manager to the pool (see `kandev_events::managers`):
//! every `announce_ms` on `managers.<manager_id>`, and once more with
//! `leaving` when it stops, so orchestrators place nothing more on it.

use std::{net::SocketAddr, time::Duration};

use kandev_common::CancellationToken;
use kandev_events::managers::{ManagerAnnouncement, manager_subject};

use crate::manager::AgentManager;

/// The URL others reach this manager at: the configured one, or the
/// listen address (127.0.0.1 when it is unspecified).
pub fn advertised_url(configured: &str, local: SocketAddr) -> String {
    if !configured.is_empty() {
        return configured.trim_end_matches('/').to_string();
    }
    let ip = if local.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        local.ip()
    };
    format!("http://{}", SocketAddr::new(ip, local.port()))
}

/// Announces `manager` until `stop` fires, then says it is leaving.
pub async fn run(
    manager: AgentManager,
    client: async_nats::Client,
    url: String,
    stop: CancellationToken,
) {
    let subject = manager_subject(&manager.settings().manager_id);
    let every = Duration::from_millis(manager.settings().announce_ms);
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<ManagerAnnouncement> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = interval.tick() => {}
        }
        match manager.announcement(&url).await {
            Ok(announcement) => {
                publish(&client, &subject, &announcement).await;
                metrics::gauge!(crate::metric_names::ACTIVE_INSTANCES)
                    .set(f64::from(announcement.active));
                last = Some(announcement);
            }
            Err(err) => tracing::warn!(%err, "cannot tell the pool this manager's load"),
        }
    }
    if let Some(mut leaving) = last {
        leaving.leaving = true;
        publish(&client, &subject, &leaving).await;
        let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
    }
}

async fn publish(client: &async_nats::Client, subject: &str, announcement: &ManagerAnnouncement) {
    let payload = match serde_json::to_vec(announcement) {
        Ok(p) => p,
        Err(err) => {
            tracing::error!(%err, "cannot encode the announcement");
            return;
        }
    };
    if let Err(err) = client.publish(subject.to_string(), payload.into()).await {
        tracing::debug!(%err, "announcement not sent");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_url_defaults_to_the_listen_address() {
        let any: SocketAddr = "0.0.0.0:8083".parse().unwrap();
        assert_eq!(advertised_url("", any), "http://127.0.0.1:8083");
        let lo: SocketAddr = "127.0.0.2:9000".parse().unwrap();
        assert_eq!(advertised_url("", lo), "http://127.0.0.2:9000");
        assert_eq!(
            advertised_url("http://am-2.internal:8083/", any),
            "http://am-2.internal:8083"
        );
    }
}
