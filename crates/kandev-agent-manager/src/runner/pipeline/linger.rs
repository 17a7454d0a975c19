//! Batching in time: a publisher that received an event waits a little
//! (at most one linger period) for more before it publishes, so that an
//! agent writing at a modest rate still sends batches instead of one bus
//! message per event.
//!
//! Every publisher of the process lingers until the same instants: the
//! ticks of one grid (multiples of the period since the process's first
//! linger). The publishers of many agents therefore wake together and
//! their publishes leave in one burst: one wake-up of the bus client, of
//! the bus and of the consumer behind it for all of them, as in a flood.
//! An event waits at most one period (half of one on average); a batch
//! that fills, a sync point (an event that ends its batch) and a closed
//! queue (the turn's end) are sent at once.

use std::{sync::OnceLock, time::Duration};

use tokio::{sync::mpsc, time::Instant};

/// The grid's origin, shared by every publisher of the process.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// How long a publisher waits for more events before it publishes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Linger {
    /// Zero: publish what is queued at once.
    period: Duration,
    epoch: Instant,
}

/// The bounds of one batch being gathered.
pub(super) struct Bounds<W, E> {
    /// The most items.
    pub(super) max_items: usize,
    /// The most bytes, as `weight` counts them.
    pub(super) max_bytes: usize,
    pub(super) weight: W,
    /// An item after which the batch goes at once.
    pub(super) ends: E,
}

impl Linger {
    pub(super) fn new(period: Duration) -> Linger {
        Linger {
            period,
            epoch: epoch(),
        }
    }

    /// A linger on a grid of its own, from `epoch`.
    #[cfg(test)]
    fn at(period: Duration, epoch: Instant) -> Linger {
        Linger { period, epoch }
    }

    /// The grid's first tick after `now`.
    fn deadline(&self, now: Instant) -> Instant {
        let period = self.period.as_nanos().max(1);
        if now < self.epoch {
            // The grid runs backwards from its origin too.
            let to_tick = (self.epoch - now).as_nanos() % period;
            let to_tick = if to_tick == 0 { period } else { to_tick };
            return now + Duration::from_nanos(u64::try_from(to_tick).unwrap_or(u64::MAX));
        }
        let since = (now - self.epoch).as_nanos();
        let ticks = since / period + 1;
        let nanos = u64::try_from(ticks * period).unwrap_or(u64::MAX);
        self.epoch + Duration::from_nanos(nanos)
    }

    /// Waits for at least one item of `rx` into `out`, then for more until
    /// the next tick, unless the items reach a bound, one of them ends the
    /// batch or the queue closes. The number of items received: 0 when the
    /// queue is closed and empty.
    pub(super) async fn gather<T>(
        &self,
        rx: &mut mpsc::Receiver<T>,
        out: &mut Vec<T>,
        bounds: &Bounds<impl Fn(&T) -> usize, impl Fn(&T) -> bool>,
    ) -> usize {
        let start = out.len();
        if rx.recv_many(out, bounds.max_items.max(1)).await == 0 {
            return 0;
        }
        if self.period.is_zero() {
            return out.len() - start;
        }
        let deadline = self.deadline(Instant::now());
        let mut checked = start;
        let mut bytes = 0;
        loop {
            for item in &out[checked..] {
                if (bounds.ends)(item) {
                    return out.len() - start;
                }
                bytes += (bounds.weight)(item);
            }
            checked = out.len();
            let room = bounds.max_items.saturating_sub(out.len() - start);
            if room == 0 || bytes >= bounds.max_bytes {
                return out.len() - start;
            }
            match tokio::time::timeout_at(deadline, rx.recv_many(out, room)).await {
                Ok(0) | Err(_) => return out.len() - start,
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items are (bytes, ends the batch).
    type Item = (usize, bool);

    fn bounds() -> Bounds<impl Fn(&Item) -> usize, impl Fn(&Item) -> bool> {
        Bounds {
            max_items: 100,
            max_bytes: 1000,
            weight: |i: &Item| i.0,
            ends: |i: &Item| i.1,
        }
    }

    /// Gathers on a task of its own; what it got and when.
    fn spawn_gather(
        linger: Linger,
        mut rx: mpsc::Receiver<Item>,
    ) -> tokio::task::JoinHandle<(Vec<Item>, Instant)> {
        tokio::spawn(async move {
            let mut out = Vec::new();
            linger.gather(&mut rx, &mut out, &bounds()).await;
            (out, Instant::now())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_goes_at_the_next_tick_with_what_came_meanwhile() {
        let linger = Linger::at(Duration::from_millis(5), Instant::now());
        let (tx, rx) = mpsc::channel(16);
        let task = spawn_gather(linger, rx);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let sent = Instant::now();
        tx.send((10, false)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        tx.send((10, false)).await.unwrap();
        let (got, at) = task.await.unwrap();
        assert_eq!(got.len(), 2, "both events in one batch");
        assert_eq!(at - sent, Duration::from_millis(4), "at the grid's tick");
        assert_eq!(at, linger.deadline(sent));
    }

    #[tokio::test(start_paused = true)]
    async fn publishers_of_one_process_flush_at_the_same_instant() {
        let period = Duration::from_millis(5);
        assert_eq!(Linger::new(period).epoch, Linger::new(period).epoch);
        let epoch = Instant::now();
        let (tx1, rx1) = mpsc::channel(16);
        let (tx2, rx2) = mpsc::channel(16);
        let a = spawn_gather(Linger::at(period, epoch), rx1);
        let b = spawn_gather(Linger::at(period, epoch), rx2);
        tokio::time::sleep(Duration::from_micros(700)).await;
        tx1.send((1, false)).await.unwrap();
        tokio::time::sleep(Duration::from_micros(1900)).await;
        tx2.send((1, false)).await.unwrap();
        let (at_a, at_b) = (a.await.unwrap().1, b.await.unwrap().1);
        assert_eq!(at_a, at_b);
        assert_eq!(at_a, epoch + period);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_goes_at_once() {
        let linger = Linger::at(Duration::from_millis(5), Instant::now());
        let (tx, rx) = mpsc::channel(16);
        let task = spawn_gather(linger, rx);
        let sent = Instant::now();
        tx.send((600, false)).await.unwrap();
        tx.send((600, false)).await.unwrap();
        let (got, at) = task.await.unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(at, sent, "bytes bound reached: no waiting");

        let (tx, mut rx) = mpsc::channel(16);
        for _ in 0..5 {
            tx.send((1, false)).await.unwrap();
        }
        let few = Bounds {
            max_items: 3,
            ..bounds()
        };
        let mut out = Vec::new();
        let before = Instant::now();
        assert_eq!(linger.gather(&mut rx, &mut out, &few).await, 3);
        assert_eq!(Instant::now(), before, "items bound reached: no waiting");
    }

    #[tokio::test(start_paused = true)]
    async fn the_turn_end_and_a_closed_queue_go_at_once() {
        let linger = Linger::new(Duration::from_millis(5));
        let (tx, rx) = mpsc::channel(16);
        let task = spawn_gather(linger, rx);
        let sent = Instant::now();
        tx.send((1, false)).await.unwrap();
        tx.send((1, true)).await.unwrap();
        let (got, at) = task.await.unwrap();
        assert_eq!((got.len(), at), (2, sent));

        let (tx, rx) = mpsc::channel(16);
        let task = spawn_gather(linger, rx);
        let sent = Instant::now();
        tx.send((1, false)).await.unwrap();
        drop(tx);
        let (got, at) = task.await.unwrap();
        assert_eq!((got.len(), at), (1, sent));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_period_what_is_queued_goes_at_once() {
        let linger = Linger::new(Duration::ZERO);
        let (tx, rx) = mpsc::channel(16);
        let task = spawn_gather(linger, rx);
        let sent = Instant::now();
        tx.send((1, false)).await.unwrap();
        let (got, at) = task.await.unwrap();
        assert_eq!((got.len(), at), (1, sent));
    }
}
