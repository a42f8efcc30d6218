//! Placing VMs through the real controller and an in-test node agent stand-in: the PPN rules,
//! the disk ledger under concurrent placement, the disk cordon with hysteresis, boot-id
//! pruning, engine-version placement for checkpoints, and the PPN error answers.

use std::time::Duration;

use crate::support::controller_harness::*;
use fleetwire_client::{Error, ResponseValue};
use fleetwire_types::{CreateVmRequest, VmRecord};
use serde_json::{json, Value};

async fn enroll(
    client: &reqwest::Client,
    controller: &ControllerProcess,
    id: &str,
    agent_port: u16,
    disk_gb: u64,
) {
    register_ok(client, controller, &registration(id, agent_port, disk_gb)).await;
    heartbeat_ok(
        client,
        controller,
        &ppn_heartbeat(id, "127.0.0.1", agent_port),
    )
    .await;
}

/// `POST /v1/vms` through the typed client, with a well-formed `CreateVmRequest`: the status,
/// and the `VmRecord` or the `ApiError` as JSON.
async fn create_vm(
    client: &reqwest::Client,
    controller: &ControllerProcess,
    body: &Value,
) -> (u16, Value) {
    let request: CreateVmRequest = typed(body);
    vm_answer(api_on(client, controller).create_vm(&request).await)
}

/// A `create_vm` answer as the status and the `VmRecord` or `ApiError` as JSON.
fn vm_answer(answer: Result<ResponseValue<VmRecord>, Error>) -> (u16, Value) {
    match answer {
        Ok(vm) => (
            vm.status().as_u16(),
            serde_json::to_value(vm.into_inner()).unwrap(),
        ),
        Err(Error::Api { status, error, .. }) => {
            (status.as_u16(), serde_json::to_value(*error).unwrap())
        }
        Err(e) => panic!("POST /v1/vms: {e}"),
    }
}

fn vm(ram_mb: u64, disk_gb: u64) -> Value {
    json!({"vm_type": "small", "ram_mb": ram_mb, "vcpu_count": 1, "disk_gb": disk_gb})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_placements_never_overbook_the_disk_ledger() {
    let controller = ControllerProcess::start(&["--disk-overcommit-ratio", "1.5"]);
    let client = client();
    let agent = AgentStandIn::start().await;
    // Two nodes of 100 GB at ratio 1.5: 150 GB of reservations each, so 15 VMs of 10 GB.
    enroll(&client, &controller, "disk-a", agent.port, 100).await;
    enroll(&client, &controller, "disk-b", agent.port, 100).await;

    let attempts = 40;
    let mut tasks = tokio::task::JoinSet::new();
    let api = api_on(&client, &controller);
    let request: CreateVmRequest = typed(&vm(256, 10));
    for _ in 0..attempts {
        let (api, request) = (api.clone(), request.clone());
        tasks.spawn(async move { vm_answer(api.create_vm(&request).await) });
    }
    let (mut placed, mut refused) = (0, 0);
    while let Some(result) = tasks.join_next().await {
        let (status, body) = result.unwrap();
        match status {
            200 => placed += 1,
            503 => {
                assert_eq!(body["code"], "no_capacity", "{body}");
                refused += 1
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(placed, 30, "exactly the ledger's room is placed");
    assert_eq!(refused, attempts - 30);
    for id in ["disk-a", "disk-b"] {
        let node = node_record(&client, &controller, id).await;
        assert_eq!(node["reserved_disk_gb"], 150, "{node}");
        assert_eq!(node["vm_count"], 15);
    }
    assert_eq!(agent.spawned().len(), 30);

    // Deleting releases the reservation, and the room is usable again.
    let (_, vms) = get_json(&client, &controller.url("/v1/vms")).await;
    let first = vms[0]["vm_id"].as_str().unwrap().to_string();
    let owner = vms[0]["node_id"].as_str().unwrap().to_string();
    let (status, _) = delete_url(&client, &controller.url(&format!("/v1/vms/{first}"))).await;
    assert_eq!(status, 204);
    assert_eq!(
        node_record(&client, &controller, &owner).await["reserved_disk_gb"],
        140
    );
    let (status, placed) = create_vm(&client, &controller, &vm(256, 10)).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["node_id"], owner.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ppn_placement_rules_and_error_answers() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let agent = AgentStandIn::start().await;
    // big: 12 GB free; reserved: last resort with more memory; no KVM on small.
    enroll(&client, &controller, "big", agent.port, 1000).await;
    let mut reserved = ppn_heartbeat("spare", "127.0.0.1", agent.port);
    reserved["reserved"] = true.into();
    reserved["ram_used_mb"] = 0.into();
    heartbeat_ok(&client, &controller, &reserved).await;
    let mut small = ppn_heartbeat("small", "127.0.0.1", agent.port);
    small["kvm_available"] = false.into();
    small["ram_used_mb"] = 14336.into();
    heartbeat_ok(&client, &controller, &small).await;

    // The most available memory among unreserved nodes wins; tenant_id is copied.
    let (status, placed) = create_vm(&client, &controller, &json!({"vm_type": "web", "ram_mb": 1024, "vcpu_count": 2, "tenant_id": "acme", "vm_id": "web-1"}),
    )
    .await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["node_id"], "big");
    assert_eq!(placed["vm_id"], "web-1");
    assert_eq!(placed["tenant_id"], "acme");
    assert_eq!(placed["disk_gb"], 30, "the default footprint");
    assert!(placed["created_at"].is_string());
    assert_eq!(
        agent.spawned()[0]["vm_id"],
        "web-1",
        "the agent gets the id"
    );
    let (status, got) = get_json(&client, &controller.url("/v1/vms/web-1")).await;
    assert_eq!((status, &got), (200, &placed));
    let (_, acme) = get_json(&client, &controller.url("/v1/vms?tenant_id=acme")).await;
    assert_eq!(acme.as_array().unwrap().len(), 1);
    let (_, other) = get_json(&client, &controller.url("/v1/vms?tenant_id=other")).await;
    assert_eq!(other, json!([]));

    // The same id again: 409.
    let (status, body) = create_vm(
        &client,
        &controller,
        &json!({"vm_type": "web", "ram_mb": 1, "vcpu_count": 1, "vm_id": "web-1"}),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("conflict")));

    // Too big for every unreserved node: the reserved node is the last resort.
    let (status, placed) = create_vm(&client, &controller, &vm(14000, 10)).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["node_id"], "spare");

    // Preferred node: unknown, or too small → 422.
    let mut request = vm(4096, 10);
    request["preferred_node"] = "nowhere".into();
    let (status, body) = create_vm(&client, &controller, &request).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("preferred_node_unsuitable"))
    );
    request["preferred_node"] = "small".into();
    let (status, body) = create_vm(&client, &controller, &request).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("preferred_node_unsuitable"))
    );
    assert!(
        body["message"].as_str().unwrap().contains("memory"),
        "{body}"
    );

    // Cordoned nodes take nothing; uncordon reopens them.
    for id in ["big", "spare", "small"] {
        let (status, record) = post_json(
            &client,
            &controller.url(&format!("/v1/nodes/{id}/cordon")),
            &json!({}),
        )
        .await;
        assert_eq!(status, 200);
        assert!(record["cordoned_at"].is_string());
    }
    let (status, body) = create_vm(&client, &controller, &vm(128, 1)).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("no_capacity")));
    let (status, _) = post_json(
        &client,
        &controller.url("/v1/nodes/small/uncordon"),
        &json!({}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, placed) = create_vm(
        &client,
        &controller,
        &json!({"vm_type": "t", "ram_mb": 128, "vcpu_count": 1, "prefer_kvm": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(placed["node_id"], "small");

    // Draining: status draining, no placements.
    let (status, record) = post_json(
        &client,
        &controller.url("/v1/nodes/small/drain"),
        &json!({}),
    )
    .await;
    assert_eq!((status, record["status"].as_str()), (200, Some("draining")));
    let (status, _) = create_vm(&client, &controller, &vm(128, 1)).await;
    assert_eq!(status, 503);
    let (status, record) = post_json(
        &client,
        &controller.url("/v1/nodes/small/uncordon"),
        &json!({}),
    )
    .await;
    assert_eq!((status, record["status"].as_str()), (200, Some("ready")));

    // The agent fails: 502, and nothing stays reserved.
    let before = node_record(&client, &controller, "small").await["reserved_disk_gb"].clone();
    agent.set_mode(SpawnMode::Fail);
    let (status, body) = create_vm(
        &client,
        &controller,
        &json!({"vm_type": "t", "ram_mb": 128, "vcpu_count": 1, "vm_id": "doomed"}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (502, Some("agent_failed")),
        "{body}"
    );
    assert_eq!(
        node_record(&client, &controller, "small").await["reserved_disk_gb"],
        before
    );
    let (status, _) = get_json(&client, &controller.url("/v1/vms/doomed")).await;
    assert_eq!(status, 404);
    agent.set_mode(SpawnMode::Succeed);
    let (status, _) = create_vm(
        &client,
        &controller,
        &json!({"vm_type": "t", "ram_mb": 128, "vcpu_count": 1, "vm_id": "doomed"}),
    )
    .await;
    assert_eq!(status, 200, "a failed id is free again");

    // Deleting an unknown VM: 404.
    let (status, body) = delete_url(&client, &controller.url("/v1/vms/nope")).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_cordon_sets_below_and_clears_only_above_the_higher_threshold() {
    let controller =
        ControllerProcess::start(&["--disk-cordon-below", "50", "--disk-uncordon-above", "80"]);
    let client = client();
    let agent = AgentStandIn::start().await;
    enroll(&client, &controller, "d1", agent.port, 1000).await;
    let beat = |free: u64| {
        let mut body = ppn_heartbeat("d1", "127.0.0.1", agent.port);
        body["disk_free_gb"] = free.into();
        body["disk_total_gb"] = 1000.into();
        body
    };
    heartbeat_ok(&client, &controller, &beat(60)).await;
    assert!(node_record(&client, &controller, "d1")
        .await
        .get("disk_cordoned_at")
        .is_none());
    heartbeat_ok(&client, &controller, &beat(49)).await;
    let cordoned = node_record(&client, &controller, "d1").await;
    assert!(cordoned["disk_cordoned_at"].is_string(), "{cordoned}");
    assert_eq!(
        cordoned["status"], "ready",
        "a disk cordon leaves the node ready"
    );
    assert_eq!(cordoned["available_disk_gb"], 49);
    let (status, body) = create_vm(&client, &controller, &vm(128, 1)).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("no_capacity")));
    // Between the thresholds: still cordoned (no flapping).
    heartbeat_ok(&client, &controller, &beat(79)).await;
    assert_eq!(
        node_record(&client, &controller, "d1").await["disk_cordoned_at"],
        cordoned["disk_cordoned_at"]
    );
    // Past the higher threshold: cleared, placements resume.
    heartbeat_ok(&client, &controller, &beat(80)).await;
    assert!(node_record(&client, &controller, "d1")
        .await
        .get("disk_cordoned_at")
        .is_none());
    let (status, _) = create_vm(&client, &controller, &vm(128, 1)).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_runtime_boot_id_prunes_what_the_node_no_longer_reports() {
    let controller = ControllerProcess::start(&["--self-heal-interval", "300ms"]);
    let client = client();
    let agent = AgentStandIn::start().await;
    enroll(&client, &controller, "b1", agent.port, 1000).await;
    let beat = |runtime_boot_id: &str, vms: Value| {
        let mut body = ppn_heartbeat("b1", "127.0.0.1", agent.port);
        body["runtime_boot_id"] = runtime_boot_id.into();
        body["vms"] = vms;
        body
    };
    heartbeat_ok(&client, &controller, &beat("boot-1", json!([]))).await;
    let (status, kept) = create_vm(&client, &controller, &json!({"vm_type": "t", "ram_mb": 128, "vcpu_count": 1, "vm_id": "kept", "tenant_id": "t1", "disk_gb": 20})).await;
    assert_eq!(status, 200, "{kept}");
    let (status, _) = create_vm(
        &client,
        &controller,
        &json!({"vm_type": "t", "ram_mb": 128, "vcpu_count": 1, "vm_id": "lost", "disk_gb": 30}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        node_record(&client, &controller, "b1").await["reserved_disk_gb"],
        50
    );

    // Same boot id, VMs not reported yet: both kept (the spawn may postdate the heartbeat).
    heartbeat_ok(&client, &controller, &beat("boot-1", json!([]))).await;
    assert_eq!(node_record(&client, &controller, "b1").await["vm_count"], 2);

    // The runtime restarted: only "kept" is still reported; "lost" is pruned.
    let reported = json!([{"vm_id": "kept", "vm_type": "t", "state": "Running", "ram_alloc_mb": 128, "vcpu_count": 1}]);
    heartbeat_ok(&client, &controller, &beat("boot-2", reported)).await;
    let record = node_record(&client, &controller, "b1").await;
    assert_eq!(record["vm_count"], 1);
    assert_eq!(record["boot_id"], "boot-2");
    let (status, _) = get_json(&client, &controller.url("/v1/vms/lost")).await;
    assert_eq!(status, 404);
    let (_, kept) = get_json(&client, &controller.url("/v1/vms/kept")).await;
    assert_eq!(
        kept["tenant_id"], "t1",
        "what the controller knows survives the report"
    );
    // The ledger self-heal releases the pruned VM's 30 GB.
    eventually(
        "the self-heal to correct the ledger",
        Duration::from_secs(5),
        || async {
            (node_record(&client, &controller, "b1").await["reserved_disk_gb"] == 20).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_restored_only_on_the_capturing_engine_version_or_newer() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let agent = AgentStandIn::start().await;
    let old_engine = SmolvmStandIn::start("0.5.2").await;
    let new_engine = SmolvmStandIn::start("0.6.0").await;
    for (id, engine, used) in [("old", &old_engine, 0), ("new", &new_engine, 8192)] {
        let mut body = registration(id, agent.port, 1000);
        body["smolvm_address"] = engine.address().into();
        let (status, answer) =
            post_json(&client, &controller.url("/v1/nodes/register"), &body).await;
        assert_eq!(status, 200, "{answer}");
        let mut beat = ppn_heartbeat(id, "127.0.0.1", agent.port);
        beat["ram_used_mb"] = used.into();
        heartbeat_ok(&client, &controller, &beat).await;
    }
    // The controller probes each runtime's /health and records its version.
    for (id, version) in [("old", "0.5.2"), ("new", "0.6.0")] {
        eventually(
            "the engine version to be probed",
            Duration::from_secs(5),
            || async {
                (node_record(&client, &controller, id).await["engine_version"] == version)
                    .then_some(())
            },
        )
        .await;
    }
    let restore = |engine: &str| {
        json!({"vm_type": "t", "ram_mb": 512, "vcpu_count": 1,
               "restore_checkpoint": {"checkpoint_id": "ckpt-1", "engine_version": engine}})
    };
    // "old" has more memory, but only "new" runs 0.6.0 or newer.
    let (status, placed) = create_vm(&client, &controller, &restore("0.6.0")).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["node_id"], "new");
    assert_eq!(placed["restore_checkpoint"]["checkpoint_id"], "ckpt-1");
    // Semantic, not textual, comparison: 0.10.0 > 0.6.0.
    let (status, body) = create_vm(&client, &controller, &restore("0.10.0")).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("no_capacity")));
    let (status, placed) = create_vm(&client, &controller, &restore("0.5.0")).await;
    assert_eq!(status, 200);
    assert_eq!(placed["node_id"], "old");
    // What the schema's pattern lets through but is no SemVer (found by the API fuzzing: the
    // placement used to panic on it and drop the connection): 422, naming its pointer.
    for not_semver in [
        "0.846991291003.0-NnYXCF+.kpQz6n",
        "1.2.3-a..b",
        "99999999999999999999.0.0",
    ] {
        let (status, body) = create_vm(&client, &controller, &restore(not_semver)).await;
        assert_eq!(status, 422, "{not_semver}: {body}");
        assert_eq!(body["code"], "invalid_document", "{body}");
        assert!(
            body.to_string()
                .contains("/restore_checkpoint/engine_version"),
            "{body}"
        );
    }
    // More than one boot source: the schema lets it through, the placement cannot take it
    // (found by the API fuzzing as a 400 its document did not list): 422, naming the second.
    let (status, body) = create_vm(
        &client,
        &controller,
        &json!({"vm_type": "small", "ram_mb": 256, "vcpu_count": 1, "network": true,
                "image": "docker.io/library/alpine:3", "disk_image": "base.qcow2"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "invalid_document", "{body}");
    assert!(body.to_string().contains("/disk_image"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_goes_only_to_a_node_whose_runtime_can_run_it() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let agent = AgentStandIn::start().await;
    for (id, runtime) in [("proc-1", "process"), ("vm-1", "smolvm")] {
        let mut body = registration(id, agent.port, 100);
        body["runtime"] = runtime.into();
        let (status, answer) =
            post_json(&client, &controller.url("/v1/nodes/register"), &body).await;
        assert_eq!(status, 200, "{answer}");
        heartbeat_ok(
            &client,
            &controller,
            &ppn_heartbeat(id, "127.0.0.1", agent.port),
        )
        .await;
    }
    // Equal nodes: "proc-1" would win every tie, so only the runtime sends images elsewhere.
    let image = json!({"vm_type": "small", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 1,
                       "image": "alpine:3.20", "network": true});
    let command = json!({"vm_type": "small", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 1,
                         "command": ["/bin/sleep", "60"]});
    for _ in 0..3 {
        let (status, vm) = create_vm(&client, &controller, &image).await;
        assert_eq!(status, 200, "{vm}");
        assert_eq!(vm["node_id"], "vm-1", "an image only on smolvm: {vm}");
        assert_eq!(vm["image"], "alpine:3.20");
        let (status, vm) = create_vm(&client, &controller, &command).await;
        assert_eq!(status, 200, "{vm}");
        assert_eq!(
            vm["node_id"], "proc-1",
            "a command alone only on process: {vm}"
        );
    }

    // Asked for the wrong node by name: refused, saying why.
    let mut pinned = image.clone();
    pinned["preferred_node"] = "proc-1".into();
    let (status, body) = create_vm(&client, &controller, &pinned).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["code"], "preferred_node_unsuitable");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("runs commands, not images"),
        "{body}"
    );

    // An image without network can never be pulled: refused at intake, at its pointer.
    let mut offline = image.clone();
    offline["network"] = false.into();
    let (status, body) = create_vm(&client, &controller, &offline).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_document");
    assert_eq!(body["violations"][0]["instance_path"], "/network", "{body}");
    // Not an image reference: the schema refuses it (raw: the typed client cannot send it).
    let mut path = image.clone();
    path["image"] = "./local/rootfs.tar".into();
    let (status, body) = post_json(&client, &controller.url("/v1/vms"), &path).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["violations"][0]["instance_path"], "/image", "{body}");
    assert_eq!(agent.spawned().len(), 6);
}

/// A heartbeat the node built before a `DELETE` reaches the controller after it: the deleted
/// VM stays deleted (the drain of issue 30 saw it come back). Once a heartbeat leaves it out,
/// the node's word holds again: a VM it lists later is taken as any VM it reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_built_before_a_delete_does_not_bring_the_vm_back() {
    let controller = ControllerProcess::start(&[]);
    let client = client();
    let agent = AgentStandIn::start().await;
    enroll(&client, &controller, "late-1", agent.port, 100).await;
    let (status, placed) = create_vm(&client, &controller, &vm(256, 1)).await;
    assert_eq!(status, 200, "{placed}");
    let vm_id = placed["vm_id"].as_str().unwrap().to_string();
    let url = controller.url(&format!("/v1/vms/{vm_id}"));
    let mut listing = ppn_heartbeat("late-1", "127.0.0.1", agent.port);
    listing["vms"] = json!([{"vm_id": vm_id, "vm_type": "small", "state": "Running",
                             "ram_alloc_mb": 256, "vcpu_count": 1}]);
    heartbeat_ok(&client, &controller, &listing).await;

    let (status, _) = delete_url(&client, &url).await;
    assert_eq!(status, 204);
    assert_eq!(agent.deleted(), [vm_id.as_str()]);
    // Built before the delete, arriving after it, twice.
    for _ in 0..2 {
        heartbeat_ok(&client, &controller, &listing).await;
        assert_eq!(get_json(&client, &url).await.0, 404);
        let node = node_record(&client, &controller, "late-1").await;
        assert_eq!(node["vm_count"], 0, "{node}");
        assert_eq!(node["reserved_disk_gb"], 0, "{node}");
    }
    let (_, vms) = get_json(&client, &controller.url("/v1/vms")).await;
    assert_eq!(vms, json!([]));

    // The node has caught up; a VM it reports afterwards under that id is believed.
    heartbeat_ok(
        &client,
        &controller,
        &ppn_heartbeat("late-1", "127.0.0.1", agent.port),
    )
    .await;
    heartbeat_ok(&client, &controller, &listing).await;
    let (status, reported) = get_json(&client, &url).await;
    assert_eq!((status, &reported["node_id"]), (200, &json!("late-1")));
}
