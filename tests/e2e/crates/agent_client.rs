//! The node agent's typed client (`fleetwire_client::agent`, generated from
//! `schemas/agent-api.openapi.json` by the generator of the controller's client, issue 31)
//! against a real `fleetwire agent`: every operation of the agent's document is called through
//! it (the test checks the list against `fleetwire_client::agent::OPERATIONS`, so a route the
//! document names that the agent does not serve fails here), answers come back typed, a
//! refusal as the agent's `ApiError`, and an answer larger than the client reads is refused
//! unread (`ClientBuilder::max_answer_bytes`, which the controller sets for agents).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::agent_harness::AgentProcess;
use crate::support::{free_port, install_crypto_provider, wait_for};
use fleetwire_client::agent::{AgentClient, OPERATIONS};
use fleetwire_client::{Client, Error};
use fleetwire_types::{ApiErrorCode, CreateVmRequest, HealthStatus, LogOffset, VmId, VmState};

fn plain_http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .no_proxy()
        .build()
        .unwrap()
}

fn spawn_request(vm_id: &str) -> CreateVmRequest {
    let body = crate::support::agent_harness::spawn_body(
        vm_id,
        &["sh", "-c", "echo hello from the vm; sleep 600"],
    );
    fleetwire_types::read_value_strict(&body).expect("a CreateVmRequest")
}

#[test]
fn every_agent_operation_is_called_through_the_generated_client() {
    install_crypto_provider();
    // No controller listens there: the agent serves its local API all the same.
    let agent = AgentProcess::start(&format!("http://127.0.0.1:{}", free_port()), &[]);
    let base = agent.url("");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut called = BTreeSet::new();
    runtime.block_on(async {
        let client = AgentClient::new_with_client(&base, plain_http()).unwrap();

        let vm = client.spawn_vm(&spawn_request("vm-typed")).await.unwrap();
        called.insert("spawn_vm");
        assert_eq!(vm.vm_id.as_str(), "vm-typed");
        assert_eq!(vm.state, VmState::Running);

        let listed = client.list_vms().await.unwrap();
        called.insert("list_vms");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].vm_id.as_str(), "vm-typed");

        let id: VmId = "vm-typed".parse().unwrap();
        let mut text = String::new();
        for _ in 0..100 {
            let chunk = client.get_vm_logs(&id, Some(&LogOffset(0))).await.unwrap();
            text = chunk.text.as_str().to_string();
            if text.contains("hello from the vm") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        called.insert("get_vm_logs");
        assert!(text.contains("hello from the vm"), "{text:?}");

        let desired = client.get_desired().await.unwrap().into_inner();
        called.insert("get_desired");
        assert_eq!(desired.instances.len(), 1);
        let put = client.put_desired(&desired).await.unwrap();
        called.insert("put_desired");
        assert_eq!(put.instances, desired.instances);

        let reported = client.get_reported().await.unwrap();
        called.insert("get_reported");
        assert_eq!(reported.host_id.as_str(), desired.host_id.as_str());

        let metrics = client.get_metrics().await.unwrap();
        called.insert("get_metrics");
        assert!(metrics.contains("# TYPE"), "{}", metrics.as_str());

        let health = client.get_healthz().await.unwrap();
        called.insert("get_healthz");
        assert_eq!(health.status, HealthStatus::Ok);

        // A VM id that needs percent-encoding is one path segment.
        client.delete_vm("vm-typed").await.unwrap();
        called.insert("delete_vm");
        match client.delete_vm("no such/vm").await {
            Err(Error::Api { status, error, .. }) => {
                assert_eq!(status.as_u16(), 404);
                assert_eq!(error.code, ApiErrorCode::NotFound);
            }
            other => panic!("deleting an unknown VM: {other:?}"),
        }
        wait_for("the VM to go", Duration::from_secs(20), || {
            let agent_vms: Vec<fleetwire_types::VmRecord> =
                std::thread::scope(|s| s.spawn(|| agent.get("/v1/vms")).join().unwrap());
            agent_vms.is_empty().then_some(())
        });

        // An answer past the limit is refused without being read whole.
        let limited: AgentClient = Client::builder(base.as_str())
            .http_client(plain_http())
            .max_answer_bytes(64)
            .build()
            .unwrap()
            .into();
        match limited.get_metrics().await {
            Err(Error::AnswerTooLarge { limit, status, .. }) => {
                assert_eq!((limit, status.as_u16()), (64, 200));
            }
            other => panic!("a metrics page past 64 bytes: {other:?}"),
        }
        assert!(
            limited.get_healthz().await.is_ok(),
            "a small answer is read"
        );
    });
    let documented: BTreeSet<&str> = OPERATIONS.iter().map(|op| op.id).collect();
    assert_eq!(
        called, documented,
        "every operation of the agent's document is called"
    );
}
