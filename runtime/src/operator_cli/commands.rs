//! What each operator command does: calls of the typed client, their answers printed (again
//! on each change with `--watch`), their failure turned into a message and an exit code.

use std::io::{Read, Write};
use std::process::ExitCode;

use chrono::Utc;
use fleetwire_client::{Client, Error, ResponseValue};
use fleetwire_types::{CreateVmRequest, LogOffset, NodeRecord, NodeStatusFilter, VmRecord};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::args::{
    AbsentArgs, CommonArgs, CompletionArgs, CreateArgs, FleetArgs, NodesArgs, NodesCommand,
    VmsArgs, VmsCommand, WatchArgs,
};
use super::exit::Failure;
use super::output::{self, Format, View};
use super::print::{fail, out, shown, violation_lines, Done, POLL};

pub fn nodes(args: NodesArgs) -> ExitCode {
    let common = args.command.common().clone();
    let format = common.format;
    run(&common, |client| async move {
        match args.command {
            NodesCommand::List { status, watch, .. } => {
                watching(
                    watch,
                    format,
                    || client.list_nodes(status.as_ref()),
                    nodes_view(),
                )
                .await
            }
            NodesCommand::Get {
                node_id,
                watch,
                absent,
                ..
            } => {
                let view = View {
                    table: &|n, _| output::node_details(n, Utc::now()),
                    names: &|n| vec![output::node_name(n)],
                };
                absent_ok(
                    absent,
                    watching(watch, format, || client.get_node(&node_id), view).await,
                )
            }
            NodesCommand::Cordon {
                node_id, reason, ..
            } => {
                let node = client.cordon_node(&node_id, reason.as_ref()).await?;
                said(format, node, "cordoned")
            }
            NodesCommand::Uncordon { node_id, .. } => {
                let node = client.uncordon_node(&node_id).await?;
                said(format, node, "uncordoned")
            }
            NodesCommand::Drain(drain) => super::drain::drain(&client, drain).await,
            NodesCommand::Delete {
                node_id, absent, ..
            } => {
                let deleted = client.delete_node(&node_id).await.map(|_| {
                    out(&gone(format, "node", node_id.as_str()));
                    ExitCode::SUCCESS
                });
                absent_ok(absent, deleted)
            }
        }
    })
}

pub fn vms(args: VmsArgs) -> ExitCode {
    let common = args.command.common().clone();
    let format = common.format;
    // A request document is read and checked before anything is sent.
    let request = match &args.command {
        VmsCommand::Create(create) => match create_request(create) {
            Ok(request) => Some(request),
            Err(message) => return fail(Failure::Usage, &message),
        },
        _ => None,
    };
    run(&common, |client| async move {
        match args.command {
            VmsCommand::List { tenant, watch, .. } => {
                watching(
                    watch,
                    format,
                    || client.list_vms(tenant.as_ref()),
                    vms_view(),
                )
                .await
            }
            VmsCommand::Get {
                vm_id,
                watch,
                absent,
                ..
            } => {
                let view = View {
                    table: &|v, _| output::vm_details(v, Utc::now()),
                    names: &|v| vec![output::vm_name(v)],
                };
                absent_ok(
                    absent,
                    watching(watch, format, || client.get_vm(&vm_id), view).await,
                )
            }
            VmsCommand::Logs { vm_id, follow, .. } => logs(&client, &vm_id, follow).await,
            VmsCommand::Create(create) => {
                let request = request.expect("read above");
                super::create::create(&client, request, &create).await
            }
            VmsCommand::Delete { vm_id, absent, .. } => {
                let deleted = client.delete_vm(&vm_id).await.map(|_| {
                    out(&gone(format, "vm", vm_id.as_str()));
                    ExitCode::SUCCESS
                });
                absent_ok(absent, deleted)
            }
        }
    })
}

pub fn fleet(args: FleetArgs) -> ExitCode {
    let format = args.common.format;
    let watch = args.watch.watch;
    run(&args.common, |client| async move {
        // GET /v1/fleet leaves unreachable nodes out (as PPN's does); the table shows them too.
        let fetch = || async {
            let fleet = client.get_fleet().await?;
            let every = match format {
                Format::Table | Format::Wide => client
                    .list_nodes(Some(&NodeStatusFilter::All))
                    .await?
                    .into_inner(),
                _ => Vec::new(),
            };
            Ok::<_, Error>((fleet, every))
        };
        let mut last = None;
        loop {
            let (fleet, every) = fetch().await?;
            let wide = format == Format::Wide;
            let view = View {
                table: &|f, _| output::fleet_summary(f, &every, wide, Utc::now()),
                names: &|f: &fleetwire_types::FleetStatus| {
                    f.nodes.iter().map(output::node_name).collect()
                },
            };
            let text = shown(format, fleet, view);
            if last.as_ref() != Some(&text) {
                out(&text);
                last = Some(text);
            }
            if !watch {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

/// `fleetwire completion SHELL`: clap's own completion script for the whole command line.
pub fn completion(args: &CompletionArgs, mut command: clap::Command) -> ExitCode {
    clap_complete::generate(
        args.shell,
        &mut command,
        "fleetwire",
        &mut std::io::stdout(),
    );
    ExitCode::SUCCESS
}

// The views take the answer as it comes (`Vec`): `-o json` prints that very value.
#[allow(clippy::ptr_arg)]
fn nodes_view() -> View<'static, Vec<NodeRecord>> {
    fn table(nodes: &Vec<NodeRecord>, wide: bool) -> String {
        output::nodes_table(nodes, wide, Utc::now())
    }
    fn names(nodes: &Vec<NodeRecord>) -> Vec<String> {
        nodes.iter().map(output::node_name).collect()
    }
    View {
        table: &table,
        names: &names,
    }
}

#[allow(clippy::ptr_arg)]
fn vms_view() -> View<'static, Vec<VmRecord>> {
    fn table(vms: &Vec<VmRecord>, wide: bool) -> String {
        output::vms_table(vms, wide, Utc::now())
    }
    fn names(vms: &Vec<VmRecord>) -> Vec<String> {
        vms.iter().map(output::vm_name).collect()
    }
    View {
        table: &table,
        names: &names,
    }
}

/// Prints what `fetch` answers; with `--watch`, asks again every [`POLL`] and prints the
/// answer again whenever it changed, until interrupted.
async fn watching<T, F, Fut>(watch: WatchArgs, format: Format, fetch: F, view: View<'_, T>) -> Done
where
    T: Serialize,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<ResponseValue<T>, Error>>,
{
    let mut last: Option<String> = None;
    loop {
        let answer = fetch().await?;
        let document = serde_json::to_string(&*answer).unwrap_or_default();
        if last.as_ref() != Some(&document) {
            out(&shown(format, answer, view));
            last = Some(document);
        }
        if !watch.watch {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `--ignore-not-found`: a 404 is success, with nothing printed.
fn absent_ok(absent: AbsentArgs, done: Done) -> Done {
    match done {
        Err(error) if absent.ignore_not_found && Failure::of_call(&error) == Failure::NotFound => {
            Ok(ExitCode::SUCCESS)
        }
        other => other,
    }
}

/// A node action's line for people (`node N cordoned`), or the record.
fn said(format: Format, node: ResponseValue<fleetwire_types::NodeRecord>, what: &str) -> Done {
    let view = View {
        table: &|n: &fleetwire_types::NodeRecord, _| {
            format!("node {} {what}\n", n.node_id.as_str())
        },
        names: &|n| vec![output::node_name(n)],
    };
    out(&shown(format, node, view));
    Ok(ExitCode::SUCCESS)
}

/// `vms logs [-f]`: the VM's output from its node, read piece by piece from where the last
/// piece ended; with `-f`, asked again every [`POLL`] until interrupted.
async fn logs(client: &Client, vm_id: &fleetwire_types::VmId, follow: bool) -> Done {
    let mut offset = 0u64;
    loop {
        let chunk = client
            .get_vm_logs(vm_id, Some(&LogOffset(offset)))
            .await?
            .into_inner();
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(chunk.text.as_bytes());
        let _ = stdout.flush();
        let caught_up = chunk.next_offset >= chunk.size;
        offset = chunk.next_offset;
        if caught_up {
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Connects, runs the command on a runtime of its own, and turns its failure into a message
/// and an exit code.
fn run<F, Fut>(common: &CommonArgs, call: F) -> ExitCode
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = Done>,
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
        Ok(code) => code,
        Err(error) => {
            // A connection or TLS failure says what to check, the error after it.
            let ca_file = connection.ca_file.as_ref().map(|(path, _)| path.as_path());
            let mut message = super::transport::explain(&error, &connection.url, ca_file)
                .unwrap_or_else(|| error.to_string());
            message.push_str(&violation_lines(
                error
                    .api_error()
                    .map(|e| e.violations.as_slice())
                    .unwrap_or_default(),
            ));
            fail(Failure::of_call(&error), &message)
        }
    }
}

/// What a delete prints: a line for people, a small document for scripts.
fn gone(format: Format, kind: &str, id: &str) -> String {
    let line = format!("{kind} {id} deleted\n");
    let name = format!("{kind}/{id}");
    let view = View {
        table: &|_: &Value, _| line.clone(),
        names: &|_| vec![name.clone()],
    };
    output::render(format, &json!({ "deleted": kind, "id": id }), view)
}

/// The `CreateVmRequest` from `-f FILE` or from the flags, checked against its schema; an
/// error names each offending field by its JSON pointer.
pub fn create_request(args: &CreateArgs) -> Result<CreateVmRequest, String> {
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
