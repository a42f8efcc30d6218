//! Counting nodes by status ([`NodeCounts`]), for the liveness board and `GET /v1/fleet`.

use fleetwire_types::{HostState, NodeCounts};

/// Counts a node of `status`.
pub fn count(counts: &mut NodeCounts, status: HostState) {
    match status {
        HostState::Registering => counts.registering += 1,
        HostState::Ready => counts.ready += 1,
        HostState::Draining => counts.draining += 1,
        HostState::Unreachable => counts.unreachable += 1,
    }
}

/// No nodes of any status.
pub fn zero_counts() -> NodeCounts {
    NodeCounts {
        registering: 0,
        ready: 0,
        draining: 0,
        unreachable: 0,
    }
}
