//! The qemu runtime with its guests on a bridge (`VM_BRIDGE`), against the real QEMU and the
//! real kernel: the test makes a bridge with an address of the host on it, a VM placed through
//! the controller boots on it through a tap device of its own, serves HTTP at its own address
//! (no host port forwarded), reported.json shows that address and the guest healthy, and the
//! bytes downloaded from the guest and sent to it are in its `txBytes`/`rxBytes`, from the tap
//! device's counters. DELETE stops QEMU and removes the tap device. An agent told to use a
//! bridge that is not there refuses to start, naming it.

use std::process::Command;
use std::time::Duration;

use crate::support::controller_harness::ControllerProcess;
use crate::support::wait_for;
use fleetwire_types::InstanceState;
use serde_json::json;

use super::qemu_guest::{
    alive, delete_vm, guest_or_skip, instance, post_vm, qemu_agent_refusal, start_qemu_node,
};

/// A bridge this test made, with the host at `.1` of its own /24; removed when dropped.
struct Bridge {
    name: String,
    subnet: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Bridge {
    fn make() -> Bridge {
        let used = String::from_utf8(
            Command::new("ip")
                .args(["-4", "addr"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let third = (100..200)
            .map(|n| (n + std::process::id() % 100) % 100 + 100)
            .find(|n| !used.contains(&format!("10.213.{n}.")))
            .expect("a free 10.213.N.0/24");
        let bridge = Bridge {
            name: format!("br-fw{}", std::process::id() % 100_000),
            subnet: format!("10.213.{third}"),
        };
        ip(&["link", "add", &bridge.name, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", bridge.subnet),
            "dev",
            &bridge.name,
        ]);
        ip(&["link", "set", &bridge.name, "up"]);
        bridge
    }

    /// The devices on the bridge (its ports).
    fn ports(&self) -> Vec<String> {
        std::fs::read_dir(format!("/sys/class/net/{}/brif", self.name))
            .map(|dir| {
                dir.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .status();
    }
}

fn counter(device: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{device}/statistics/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
#[ignore = "boots a real Linux guest under QEMU on a bridge the test makes: needs root, qemu-system-x86 and the guest (bash tests/qemu/build-guest.sh); run as root: cargo test -p fleetwire --test e2e -- agent::qemu_bridge --ignored"]
fn a_guest_on_a_bridge_serves_at_its_own_address_and_its_bytes_are_metered() {
    let Some(guest) = guest_or_skip() else {
        return;
    };
    if !is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "agent::qemu_bridge makes a bridge: it needs root"
        );
        eprintln!("skipped: agent::qemu_bridge makes a bridge, which needs root");
        return;
    }
    let bridge = Bridge::make();
    let images = tempfile::tempdir().unwrap();
    for file in ["vmlinuz", "initrd.img"] {
        std::fs::copy(guest.join(file), images.path().join(file)).unwrap();
    }
    let image_dir = images.path().display().to_string();
    let controller = ControllerProcess::start(&[]);
    let (agent, _reaper) = start_qemu_node(
        &controller,
        "bridge-node",
        &[
            ("VM_IMAGE_DIR", &image_dir),
            ("VM_BRIDGE", &bridge.name),
            ("VM_QEMU_ACCEL", "tcg"),
            ("VM_GUEST_BOOT_TIMEOUT_S", "60"),
            ("VM_STOP_TIMEOUT_MS", "2000"),
        ],
    );

    // The guest takes .2 of the bridge's network (its init reads it from the command line).
    let guest_ip = format!("{}.2", bridge.subnet);
    let cmdline = format!(
        "console=ttyS0 quiet fleetwire.ip={guest_ip}/24 fleetwire.gw={}.1",
        bridge.subnet
    );
    let (status, vm) = post_vm(
        &controller,
        &json!({"vm_type": "web", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 1, "vm_id": "web-br",
                "boot": {"kernel": "vmlinuz", "initrd": "initrd.img", "cmdline": cmdline},
                "guest_ports": [80]}),
    );
    assert_eq!(status, 200, "{vm}");
    // No host port is forwarded on a bridge: the guest is reached at its own address.
    assert!(
        vm["host_ports"].as_array().is_none_or(|p| p.is_empty()),
        "{vm}"
    );
    let ports = bridge.ports();
    assert_eq!(ports.len(), 1, "the bridge's ports: {ports:?}");
    let tap = ports[0].clone();
    assert!(tap.starts_with("fw"), "{tap}");

    let url = |path: &str| format!("http://{guest_ip}{path}");
    let get = |path: &str| -> Option<Vec<u8>> {
        let resp = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .ok()?
            .get(url(path))
            .send()
            .ok()?;
        resp.status()
            .is_success()
            .then(|| resp.bytes().ok().map(|b| b.to_vec()))
            .flatten()
    };
    let page = wait_for(
        "the guest's HTTP server at its address on the bridge",
        Duration::from_secs(90),
        || get("/"),
    );
    assert!(String::from_utf8_lossy(&page).contains("fleetwire guest"));

    let r = agent.wait_reported("web-br running and healthy", Duration::from_secs(20), |r| {
        instance(r, "web-br")
            .filter(|i| i.state == InstanceState::Running && i.last_healthy_at.is_some())
            .cloned()
    });
    assert_eq!(
        r.guest_ipv4.as_ref().map(|a| a.to_string()),
        Some(guest_ip.clone())
    );
    assert_eq!(r.host_port, None);
    let before = r.meters.clone().expect("web-br's meters");

    // 10 downloads of 64 KiB from the guest, 10 requests to it.
    const DOWNLOADS: u64 = 10;
    for _ in 0..DOWNLOADS {
        let body = get("/zero-64k").expect("the guest's 64 KiB file");
        assert_eq!(body.len(), 65536);
    }
    let request_bytes = format!("GET /zero-64k HTTP/1.1\r\nhost: {guest_ip}\r\n\r\n").len() as u64;
    let after = agent.wait_reported(
        "web-br's meters to count the downloads",
        Duration::from_secs(20),
        |r| {
            let m = instance(r, "web-br")?.meters.clone()?;
            (m.tx_bytes >= before.tx_bytes + DOWNLOADS * 65536
                && m.rx_bytes >= before.rx_bytes + DOWNLOADS * request_bytes)
                .then_some(m)
        },
    );
    // From the tap device's counters: never more than the device counted (the host sends into
    // the tap what the guest receives, and receives from it what the guest sends).
    assert!(
        after.tx_bytes <= counter(&tap, "rx_bytes"),
        "{after:?} against {tap}"
    );
    assert!(
        after.rx_bytes <= counter(&tap, "tx_bytes"),
        "{after:?} against {tap}"
    );
    let metrics = agent.get_text("/metrics");
    assert!(
        metrics.contains("fleetwire_app_transmitted_bytes_total{app_id=\"web-br\"}"),
        "{metrics}"
    );

    // DELETE stops QEMU within 10 s and removes the tap device.
    let pid: u32 = std::fs::read_to_string(agent.state_dir.join("qemu/web-br/qemu.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    delete_vm(&controller, "web-br");
    wait_for("web-br's QEMU to stop", Duration::from_secs(10), || {
        (!alive(pid)).then_some(())
    });
    wait_for("web-br's tap device to go", Duration::from_secs(10), || {
        (!std::path::Path::new("/sys/class/net").join(&tap).exists()).then_some(())
    });
    assert!(bridge.ports().is_empty());
}

/// Runs without QEMU's guests: an agent told to put its guests on a bridge that is not there
/// stops at once, naming it.
#[test]
fn a_qemu_agent_whose_bridge_is_missing_says_so() {
    let stderr = qemu_agent_refusal(&[
        // Any program will do: the bridge is checked before a guest is started.
        ("VM_QEMU_BINARY", "/bin/true"),
        ("VM_BRIDGE", "br-fw-none"),
    ]);
    assert!(
        stderr.contains("VM_BRIDGE: br-fw-none is not a bridge on this host"),
        "{stderr}"
    );
}
