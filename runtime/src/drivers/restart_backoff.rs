//! The wait before an instance's next restart (or start attempt), by its `restartPolicy`:
//! `initialBackoffMs × backoffFactor^(n-1)`, capped at `maxBackoffMs` (docs/agent.md, "Running
//! machines: drivers"). Both drivers follow it.

use fleetwire_types::RestartPolicy;

/// The delay before restart number `attempt` (1-based) of a run.
pub fn backoff_ms(policy: &RestartPolicy, attempt: u64) -> u64 {
    let exponent = attempt.saturating_sub(1).min(64) as i32;
    let delay = policy.initial_backoff_ms as f64 * policy.backoff_factor.powi(exponent);
    delay.min(policy.max_backoff_ms as f64).max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RestartPolicy {
            backoff_factor: fleetwire_types::F64Min1::new(2.0).unwrap(),
            initial_backoff_ms: 100,
            max_backoff_ms: 500,
            max_restarts: 10,
            reset_after_ms: 1000,
        };
        let delays: Vec<u64> = (1..=5).map(|a| backoff_ms(&p, a)).collect();
        assert_eq!(delays, vec![100, 200, 400, 500, 500]);
    }
}
