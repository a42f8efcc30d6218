//! `fleetwire ca init`: creates the fleet CA ahead of the controller's first start (which
//! would create it too), for an operator who wants to hand its certificate to the nodes first,
//! or checks a CA the operator placed in the directory (docs/security.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::controller::trust::certs::NodeCa;

#[derive(Args, Debug, Clone)]
pub struct CaArgs {
    #[command(subcommand)]
    pub command: CaCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum CaCommand {
    /// Create the fleet CA (ca.pem, ca.key with mode 0600) in DIR, or check the one there,
    /// and print where its certificate is and its SHA-256 fingerprint.
    Init {
        /// The controller's CA directory: its --ca-dir, by default <data-dir>/ca.
        #[arg(
            long,
            env = "FLEETWIRE_CA_DIR",
            default_value = "/var/lib/fleetwire/ca"
        )]
        dir: PathBuf,
    },
}

pub fn run(args: &CaArgs) -> ExitCode {
    match &args.command {
        CaCommand::Init { dir } => {
            let existed = dir.join("ca.pem").exists();
            // The issuing validity does not matter here: nothing is issued.
            match NodeCa::open_or_create(dir, Duration::from_secs(3600)) {
                Ok(ca) => {
                    let verb = if existed { "uses" } else { "created" };
                    println!("{}", dir.join("ca.pem").display());
                    eprintln!(
                        "fleetwire ca init: {verb} the fleet CA in {}\n  certificate: {} (copy it to each node as VM_FLEET_CA_FILE)\n  sha256 fingerprint: {}",
                        dir.display(),
                        dir.join("ca.pem").display(),
                        ca.fingerprint_sha256()
                    );
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("fleetwire ca init: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
