//! Rates and latency percentiles of one load.

use std::time::Duration;

/// Messages received by one or more readers: when, and how late.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Receipt times (Unix ns) of the first and last message.
    first_ns: Option<u64>,
    last_ns: u64,
    /// Send → receipt latency of each message, in ns.
    latencies: Vec<u64>,
}

impl Stats {
    /// One message sent at `sent_ns`, received at `now_ns`.
    pub fn record(&mut self, sent_ns: u64, now_ns: u64) {
        self.first_ns = Some(self.first_ns.map_or(now_ns, |f| f.min(now_ns)));
        self.last_ns = self.last_ns.max(now_ns);
        self.latencies.push(now_ns.saturating_sub(sent_ns));
    }

    /// Folds another reader's messages in.
    pub fn merge(&mut self, other: Stats) {
        if let Some(first) = other.first_ns {
            self.first_ns = Some(self.first_ns.map_or(first, |f| f.min(first)));
        }
        self.last_ns = self.last_ns.max(other.last_ns);
        self.latencies.extend(other.latencies);
    }

    pub fn count(&self) -> u64 {
        self.latencies.len() as u64
    }

    /// From the first receipt to the last.
    pub fn span(&self) -> Duration {
        Duration::from_nanos(
            self.last_ns
                .saturating_sub(self.first_ns.unwrap_or(self.last_ns)),
        )
    }

    /// Messages per second between the first and the last receipt.
    pub fn rate(&self) -> f64 {
        let secs = self.span().as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        (self.count().saturating_sub(1)) as f64 / secs
    }

    /// The `p`-th percentile latency (0–100).
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        self.latencies.sort_unstable();
        let rank = ((p / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
        Duration::from_nanos(self.latencies[rank.min(self.latencies.len() - 1)])
    }
}

/// A duration in milliseconds with enough digits to compare sub-ms values.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_percentiles() {
        let mut s = Stats::default();
        // Received every ms, each i µs after it was sent.
        for i in 0..=100u64 {
            s.record(i * 1_000_000 - i * 1000, i * 1_000_000);
        }
        assert_eq!(s.count(), 101);
        assert!((s.rate() - 1000.0).abs() < 1e-6);
        assert_eq!(s.percentile(50.0), Duration::from_micros(50));
        assert_eq!(s.percentile(100.0), Duration::from_micros(100));
    }
}
