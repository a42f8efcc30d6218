//! Retrying a call to the controller without hammering it.

use std::time::Duration;

/// Capped exponential backoff with jitter: each delay is drawn from the upper half of a window
/// that doubles up to `cap`, so many nodes coming back at once do not retry in step.
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    window: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, cap: Duration) -> Backoff {
        Backoff {
            initial,
            cap,
            window: initial,
        }
    }

    pub fn reset(&mut self) {
        self.window = self.initial;
    }

    pub fn next_delay(&mut self) -> Duration {
        let window = self.window.as_millis() as u64;
        let delay = rand::random_range(window / 2..=window.max(1));
        self.window = (self.window * 2).min(self.cap);
        Duration::from_millis(delay)
    }
}

/// How long the heartbeat loop waits after each heartbeat: the interval after one taken;
/// after one that could not reach the controller, the first retry within one interval, then
/// one every one to two intervals, each drawn at random (docs/agent.md, "Enrollment and
/// heartbeats"). Random, so that a fleet that heartbeats in step (started together, or cut
/// off together) comes back spread out; capped at two intervals, so a node is back well
/// within the controller's `--stale-after` (30 s against the default 10 s interval).
pub struct HeartbeatPace {
    interval: Duration,
    retry: Backoff,
}

impl HeartbeatPace {
    pub fn new(interval: Duration) -> HeartbeatPace {
        HeartbeatPace {
            interval,
            retry: Backoff::new(interval, interval * 2),
        }
    }

    /// The wait after a heartbeat the controller took.
    pub fn taken(&mut self) -> Duration {
        self.retry.reset();
        self.interval
    }

    /// The wait after a heartbeat that did not reach the controller (or a 5xx answer).
    pub fn unreachable(&mut self) -> Duration {
        self.retry.next_delay()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(800));
        let delays: Vec<u64> = (0..6).map(|_| b.next_delay().as_millis() as u64).collect();
        for (d, window) in delays.iter().zip([100, 200, 400, 800, 800, 800]) {
            assert!(
                (window / 2..=window).contains(d),
                "{d} not in the upper half of {window}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn heartbeat_retries_come_within_one_to_two_intervals_and_are_spread() {
        let mut pace = HeartbeatPace::new(Duration::from_secs(10));
        assert_eq!(pace.taken(), Duration::from_secs(10));
        let first = pace.unreachable().as_millis() as u64;
        assert!((5_000..=10_000).contains(&first), "{first}");
        let later: Vec<u64> = (0..200)
            .map(|_| pace.unreachable().as_millis() as u64)
            .collect();
        assert!(later.iter().all(|d| (10_000..=20_000).contains(d)));
        // Drawn, not fixed: 200 draws over 10 s land in more than a few distinct seconds.
        let mut seconds: Vec<u64> = later.iter().map(|d| d / 1000).collect();
        seconds.sort_unstable();
        seconds.dedup();
        assert!(seconds.len() >= 8, "{seconds:?}");
        // A heartbeat taken starts the retries over.
        assert_eq!(pace.taken(), Duration::from_secs(10));
        assert!(pace.unreachable() <= Duration::from_secs(10));
    }
}
