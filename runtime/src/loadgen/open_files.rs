//! The open-files limit: a connection per simulated node needs a descriptor each.

use anyhow::bail;

/// Descriptors beyond the connections: the enrolment's and the fleet reads' connections, the
/// runtime's own, stdio.
const SPARE: u64 = 256;

/// Raises the soft open-files limit to the hard one, and fails, saying so, when even the hard
/// limit leaves no room for `connections`.
pub fn raise_for(connections: usize) -> anyhow::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        bail!(
            "reading the open-files limit: {}",
            std::io::Error::last_os_error()
        );
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given, nothing else.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            bail!(
                "raising the open-files limit to {}: {}",
                limit.rlim_max,
                std::io::Error::last_os_error()
            );
        }
    }
    let needed = connections as u64 + SPARE;
    if limit.rlim_max < needed {
        bail!(
            "{connections} connections need about {needed} open files, but the hard limit is {}: \
             raise it (`ulimit -Hn`, as root; LimitNOFILE= for a service) or simulate fewer nodes",
            limit.rlim_max
        );
    }
    Ok(limit.rlim_max)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_too_many_is_refused() {
        let hard = super::raise_for(1).unwrap();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(limit.rlim_cur, hard);
        if hard < u64::MAX / 2 {
            let error = super::raise_for(hard as usize).unwrap_err();
            assert!(error.to_string().contains("the hard limit is"), "{error}");
        }
    }
}
