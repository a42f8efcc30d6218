//! The real peer programs (smolvm 1.9.2, PPN's `service-vm-fleet` and `service-vm-host`),
//! built from `../shared/peers/` by its `build.sh` into `target/peers`, or into
//! `FLEETWIRE_PEERS_DIR` (`.ci/run` keeps them outside the clone, built once per machine).
//!
//! Tests that need them carry
//! `#[ignore = "needs the real peers (../shared/peers): cargo test -p fleetwire --test e2e -- --ignored"]`,
//! so the README's test command skips them and says how to run them; `.ci/run` runs them with
//! `--ignored` (docs/interop.md).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The folder holding the peers' sources and `build.sh`.
pub fn peers_dir() -> PathBuf {
    crate::support::workspace().join("../shared/peers")
}

/// The built binary of peer `name` (`smolvm`, `service-vm-fleet`, `service-vm-host`). The
/// first call in a test process runs `build.sh` (a no-op once built); a missing `../shared`
/// fails the test with what to do, since only `--ignored` runs reach here.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let script = peers_dir().join("build.sh");
        assert!(
            script.exists(),
            "{} is missing: the real-peer tests need ../shared/peers beside the checkout",
            script.display()
        );
        let out = std::env::var_os("FLEETWIRE_PEERS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::support::workspace().join("target/peers"));
        let output = Command::new("bash")
            .arg(&script)
            .arg(&out)
            .output()
            .expect("running ../shared/peers/build.sh");
        assert!(
            output.status.success(),
            "../shared/peers/build.sh failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_once(' '))
            .map(|(name, path)| (name.to_string(), PathBuf::from(path)))
            .collect()
    });
    let path = built
        .get(name)
        .unwrap_or_else(|| panic!("build.sh printed no binary named {name:?}"));
    assert!(path.exists(), "{} was not built", path.display());
    path.clone()
}
