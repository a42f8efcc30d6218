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
}
