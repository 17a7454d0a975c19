//! A small keyed token-bucket rate limiter.
//!
//! Each key (a client address or a user) has a bucket of `burst` tokens,
//! refilled continuously at `per_minute`. The map is bounded: when it grows
//! past `max_keys`, buckets that have refilled completely are dropped, since
//! forgetting them changes nothing.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

const DEFAULT_MAX_KEYS: usize = 100_000;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// Token buckets by key.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    max_keys: usize,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32, burst: u32) -> Self {
        RateLimiter {
            per_second: f64::from(per_minute.max(1)) / 60.0,
            burst: f64::from(burst.max(1)),
            max_keys: DEFAULT_MAX_KEYS,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `key`, or says how long until one is available.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = kandev_common::sync::lock(&self.buckets);
        if buckets.len() >= self.max_keys && !buckets.contains_key(key) {
            let (rate, burst) = (self.per_second, self.burst);
            buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.updated).as_secs_f64() * rate < burst
            });
            if buckets.len() >= self.max_keys {
                // Every bucket is in use: refuse new keys rather than grow.
                return Err(Duration::from_secs(1));
            }
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: self.burst,
            updated: now,
        });
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / self.per_second;
            Err(Duration::from_secs_f64(wait))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let limiter = RateLimiter::new(60, 2);
        let t0 = Instant::now();
        assert!(limiter.check_at("a", t0).is_ok());
        assert!(limiter.check_at("a", t0).is_ok());
        let wait = limiter.check_at("a", t0).unwrap_err();
        assert!(wait <= Duration::from_secs(1) && wait > Duration::ZERO);
        // Other keys have their own bucket.
        assert!(limiter.check_at("b", t0).is_ok());
        assert!(limiter.check_at("a", t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn bounded_number_of_keys() {
        let mut limiter = RateLimiter::new(60, 1);
        limiter.max_keys = 2;
        let t0 = Instant::now();
        assert!(limiter.check_at("a", t0).is_ok());
        assert!(limiter.check_at("b", t0).is_ok());
        assert!(limiter.check_at("c", t0).is_err());
        // Once "a" and "b" have refilled they are forgotten.
        assert!(limiter.check_at("c", t0 + Duration::from_secs(2)).is_ok());
    }
}
