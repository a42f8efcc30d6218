//! What each operator command does: one call of the typed client, its answer printed, its
//! failure turned into a message and an exit code.

use std::io::Read;
use std::process::ExitCode;

use chrono::Utc;
use fleetwire_client::{Client, Error, ResponseValue};
use fleetwire_types::CreateVmRequest;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::args::{
    CommonArgs, CreateArgs, FleetArgs, NodesArgs, NodesCommand, VmsArgs, VmsCommand,
};
use super::exit::Failure;
use super::output::{self, Format};

pub fn nodes(args: NodesArgs) -> ExitCode {
    let common = args.command.common().clone();
    let format = common.format;
    let now = Utc::now();
    run(&common, |client| async move {
        Ok(match args.command {
            NodesCommand::List { status, .. } => {
                let nodes = client.list_nodes(status.as_ref()).await?;
                shown(format, nodes, |n| output::nodes_table(n, now))
            }
            NodesCommand::Get { node_id, .. } => {
                let node = client.get_node(&node_id).await?;
                shown(format, node, |n| output::node_details(n, now))
            }
            NodesCommand::Cordon {
                node_id, reason, ..
            } => {
                let node = client.cordon_node(&node_id, reason.as_ref()).await?;
                shown(format, node, |n| {
                    format!("node {} cordoned\n", n.node_id.as_str())
                })
            }
            NodesCommand::Uncordon { node_id, .. } => {
                let node = client.uncordon_node(&node_id).await?;
                shown(format, node, |n| {
                    format!("node {} uncordoned\n", n.node_id.as_str())
                })
            }
            NodesCommand::Drain { node_id, .. } => {
                let node = client.drain_node(&node_id).await?;
                shown(format, node, |n| {
                    format!("node {} draining\n", n.node_id.as_str())
                })
            }
            NodesCommand::Delete { node_id, .. } => {
                client.delete_node(&node_id).await?;
                gone(format, "node", node_id.as_str())
            }
        })
    })
}

pub fn vms(args: VmsArgs) -> ExitCode {
    let common = args.command.common().clone();
    let format = common.format;
    let now = Utc::now();
    // A request document is read and checked before anything is sent.
    let request = match &args.command {
        VmsCommand::Create(create) => match create_request(create) {
            Ok(request) => Some(request),
            Err(message) => {
                eprintln!("error: {message}");
                return Failure::Usage.into();
            }
        },
        _ => None,
    };
    run(&common, |client| async move {
        Ok(match args.command {
            VmsCommand::List { tenant, .. } => {
                let vms = client.list_vms(tenant.as_ref()).await?;
                shown(format, vms, |v| output::vms_table(v, now))
            }
            VmsCommand::Get { vm_id, .. } => {
                let vm = client.get_vm(&vm_id).await?;
                shown(format, vm, |v| {
                    output::vms_table(std::slice::from_ref(v), now)
                })
            }
            VmsCommand::Create(_) => {
                let request = request.expect("read above");
                let vm = client.create_vm(&request).await?;
                shown(format, vm, |v| {
                    output::vms_table(std::slice::from_ref(v), now)
                })
            }
            VmsCommand::Delete { vm_id, .. } => {
                client.delete_vm(&vm_id).await?;
                gone(format, "vm", vm_id.as_str())
            }
        })
    })
}

pub fn fleet(args: FleetArgs) -> ExitCode {
    let format = args.common.format;
    let now = Utc::now();
    run(&args.common, |client| async move {
        let fleet = client.get_fleet().await?;
        Ok(shown(format, fleet, |f| output::fleet_summary(f, now)))
    })
}

/// Connects, runs one call on a runtime of its own, and prints its output or its failure.
fn run<F, Fut>(common: &CommonArgs, call: F) -> ExitCode
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Result<String, Error>>,
{
    let connection = match common.connection.resolve() {
        Ok(connection) => connection,
        Err(e) => return fail(Failure::from(&e), &e.to_string()),
    };
    let client = match connection.client() {
        Ok(client) => client,
        Err(e) => return fail(Failure::from(&e), &e.to_string()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(call(client)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            // A connection or TLS failure says what to check, the error after it.
            let ca_file = connection.ca_file.as_ref().map(|(path, _)| path.as_path());
            let mut message = super::transport::explain(&error, &connection.url, ca_file)
                .unwrap_or_else(|| error.to_string());
            for v in error
                .api_error()
                .map(|e| e.violations.as_slice())
                .unwrap_or_default()
            {
                let at = if v.instance_path.is_empty() {
                    "/"
                } else {
                    v.instance_path.as_str()
                };
                message.push_str(&format!("\n  {at}: {} ({})", v.message, v.keyword));
            }
            fail(Failure::of_call(&error), &message)
        }
    }
}

/// One line per violation, each after a line break: `  /pointer: message (keyword)`.
fn violation_lines(violations: &[fleetwire_types::Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            let at = if v.instance_path.is_empty() {
                "/"
            } else {
                v.instance_path.as_str()
            };
            format!("\n  {at}: {} ({})", v.message, v.keyword)
        })
        .collect()
}

fn fail(failure: Failure, message: &str) -> ExitCode {
    eprintln!("error: {message}");
    failure.into()
}

/// The answer in the chosen format; what the controller sent that this fleetwire does not know
/// is named on standard error (it is left out of the JSON too: `-o json` prints the typed
/// answer).
fn shown<T: Serialize>(
    format: Format,
    answer: ResponseValue<T>,
    table: impl FnOnce(&T) -> String,
) -> String {
    for field in answer.unknown_fields() {
        eprintln!(
            "warning: the controller's answer has a field this fleetwire does not know: {}",
            field.as_str()
        );
    }
    for warning in answer.warnings() {
        eprintln!("warning: {warning}");
    }
    output::render(format, &answer.into_inner(), table)
}

/// What a delete prints: a line for people, a small document for scripts.
fn gone(format: Format, kind: &str, id: &str) -> String {
    output::render(format, &json!({ "deleted": kind, "id": id }), |_| {
        format!("{kind} {id} deleted\n")
    })
}

/// The `CreateVmRequest` from `-f FILE` or from the flags, checked against its schema; an
/// error names each offending field by its JSON pointer.
fn create_request(args: &CreateArgs) -> Result<CreateVmRequest, String> {
    let (body, source) = match &args.file {
        Some(path) if path.as_os_str() == "-" => {
            let mut body = Vec::new();
            std::io::stdin()
                .read_to_end(&mut body)
                .map_err(|e| format!("reading standard input: {e}"))?;
            (body, "standard input".to_string())
        }
        Some(path) => (
            std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?,
            path.display().to_string(),
        ),
        None => (
            serde_json::to_vec(&request_from_flags(args)).expect("a JSON value serializes"),
            "the flags".to_string(),
        ),
    };
    match fleetwire_types::read::<CreateVmRequest>(&body) {
        Ok(accepted) if accepted.unknown_fields.is_empty() => Ok(accepted.value),
        Ok(accepted) => {
            let fields: Vec<&str> = accepted.unknown_fields.iter().map(|f| f.as_str()).collect();
            Err(format!(
                "{source} is not a CreateVmRequest: unknown fields {}",
                fields.join(", ")
            ))
        }
        Err(rejection) => Err(format!(
            "{source} is not a valid CreateVmRequest:{}",
            violation_lines(rejection.violations())
        )),
    }
}

/// The request's fields, named as the schema names them, so the schema's checks speak of them.
fn request_from_flags(args: &CreateArgs) -> Value {
    let mut body = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.to_string(), value);
        }
    };
    put("vm_type", args.vm_type.clone().map(Value::from));
    put("ram_mb", args.memory_mb.map(Value::from));
    put("vcpu_count", args.vcpus.map(Value::from));
    put("image", args.image.clone().map(Value::from));
    put("disk_gb", args.disk_gb.map(Value::from));
    put("vm_id", args.vm_id.clone().map(Value::from));
    put("tenant_id", args.tenant.clone().map(Value::from));
    put("preferred_node", args.node.clone().map(Value::from));
    put("prefer_kvm", args.prefer_kvm.then_some(Value::Bool(true)));
    put("network", args.network.then_some(Value::Bool(true)));
    put(
        "command",
        (!args.command.is_empty()).then(|| Value::from(args.command.clone())),
    );
    Value::Object(body)
}
