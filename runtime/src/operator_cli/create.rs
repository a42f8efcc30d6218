//! `fleetwire vms create`: the request sent, then (unless `--no-wait`) the VM watched until it
//! has run for [`SETTLE`] without a restart, or failed, with progress; the VM's message
//! printed, and exit 6 when it ended in `Error` or did not run before `--timeout`
//! (docs/operator-cli.md, "Creating a VM").

use std::process::ExitCode;
use std::time::{Duration, Instant};

use chrono::Utc;
use fleetwire_client::{Client, Error};
use fleetwire_types::{CreateVmRequest, VmRecord, VmState};

use super::args::CreateArgs;
use super::exit::Failure;
use super::output::{self, View};
use super::paint;
use super::print::{err_line, fail, out, warn_of, Done, POLL};
use super::progress::Progress;

/// How long a VM must run without a restart before the wait ends: a command that exits at
/// once runs for a moment, then restarts, then fails (its node's restart policy), and is no
/// success. The controller learns of restarts from the node's heartbeats.
const SETTLE: Duration = Duration::from_secs(3);

pub async fn create(client: &Client, request: CreateVmRequest, args: &CreateArgs) -> Done {
    let what = match &request.vm_id {
        Some(id) => format!("VM {}", id.as_str()),
        None => "the VM".to_string(),
    };
    let mut progress = Progress::start(&format!("creating {what}: placing it on a node"));
    let vm = match placed_and_waited(client, &request, args, &mut progress).await {
        Ok(vm) => vm,
        Err(error) => {
            progress.finish();
            return Err(error);
        }
    };
    progress.finish();
    let view = View {
        table: &|v: &VmRecord, wide| output::vms_table(std::slice::from_ref(v), wide, Utc::now()),
        names: &|v| vec![output::vm_name(v)],
    };
    out(&output::render(args.common.format, &vm, view));
    Ok(outcome(&vm, args))
}

/// The VM as the controller answered it and, when waiting, as it is once it left
/// `Provisioning` (or when `--timeout` passed).
async fn placed_and_waited(
    client: &Client,
    request: &CreateVmRequest,
    args: &CreateArgs,
    progress: &mut Progress,
) -> Result<VmRecord, Error> {
    let answer = client.create_vm(request).await?;
    warn_of(&answer);
    let mut vm = answer.into_inner();
    let deadline = Instant::now() + args.timeout;
    // Since when the VM has been running without a restart.
    let mut running_since: Option<(Instant, Option<u64>)> = None;
    loop {
        progress.say(&state_line(&vm));
        if !args.waits() || Instant::now() >= deadline {
            return Ok(vm);
        }
        match vm.state {
            VmState::Error | VmState::Stopped => return Ok(vm),
            VmState::Provisioning => running_since = None,
            VmState::Running => match running_since {
                Some((since, restarts)) if restarts == vm.restart_count => {
                    if since.elapsed() >= SETTLE {
                        return Ok(vm);
                    }
                }
                _ => running_since = Some((Instant::now(), vm.restart_count)),
            },
        }
        tokio::time::sleep(POLL).await;
        vm = client.get_vm(&vm.vm_id).await?.into_inner();
    }
}

/// `VM v1 on node n1`.
pub fn which(vm: &VmRecord) -> String {
    match &vm.node_id {
        Some(node) => format!("VM {} on node {}", vm.vm_id.as_str(), node.as_str()),
        None => format!("VM {}", vm.vm_id.as_str()),
    }
}

/// `VM v1 on node n1: Provisioning (message)`.
pub fn state_line(vm: &VmRecord) -> String {
    let mut line = format!("{}: {}", which(vm), vm.state);
    if let Some(message) = &vm.message {
        line.push_str(&format!(" ({})", message.as_str()));
    }
    line
}

/// The exit code, with the VM's message on standard error: 6 when it failed, or still had
/// not run when the wait ended.
fn outcome(vm: &VmRecord, args: &CreateArgs) -> ExitCode {
    let message = vm.message.as_ref().map(|m| m.as_str());
    match vm.state {
        VmState::Error => fail(
            Failure::Unavailable,
            &format!(
                "{} is {}: {}",
                which(vm),
                vm.state,
                message.unwrap_or("its node gave no reason")
            ),
        ),
        VmState::Provisioning if args.waits() => fail(
            Failure::Unavailable,
            &format!(
                "{} is {} after {} (--timeout); `fleetwire vms get {}` shows how it goes on",
                which(vm),
                vm.state,
                humantime::format_duration(args.timeout),
                vm.vm_id.as_str()
            ),
        ),
        _ => {
            if let Some(message) = message {
                err_line(&format!("{} {message}", paint::word(&vm.state.to_string())));
            }
            ExitCode::SUCCESS
        }
    }
}
