//! The open-files limit: a connection per simulated node needs a descriptor each.

use anyhow::{bail, Context};

/// Descriptors beyond the connections: the enrolment's and the fleet reads' connections, the
/// runtime's own, stdio.
const SPARE: u64 = 256;

/// Raises the soft open-files limit to the hard one, and fails, saying so, when even the hard
/// limit leaves no room for `connections`.
pub fn raise_for(connections: usize) -> anyhow::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // `None` is no limit.
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    if limit.current.unwrap_or(u64::MAX) < hard {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised)
            .with_context(|| format!("raising the open-files limit to {hard}"))?;
    }
    let needed = connections as u64 + SPARE;
    if hard < needed {
        bail!(
            "{connections} connections need about {needed} open files, but the hard limit is {hard}: \
             raise it (`ulimit -Hn`, as root; LimitNOFILE= for a service) or simulate fewer nodes"
        );
    }
    Ok(hard)
}
