//! The qemu runtime against the real QEMU, booting a real Linux guest (Debian's cloud kernel
//! and a busybox initramfs, built by `tests/qemu/build-guest.sh` from Debian's packages): a VM
//! placed through the controller serves HTTP through its assigned host port; reported.json
//! shows it running with its guest address and host port, then healthy; a PPN spawn naming no
//! boot source boots a qcow2 overlay of the node's base image with a cloud-init seed and port
//! 22 forwarded; a node out of host ports is passed over as full; a missing kernel, an escaping
//! file name and a guest that never answers each get their answer; `kill -9` of QEMU is a cold
//! boot under the restart policy; a restarted agent finds its running QEMU again; DELETE stops
//! QEMU within 10 s, frees the port and removes the overlay.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::agent_harness::AgentProcess;
use crate::support::controller_harness::ControllerProcess;
use crate::support::{wait_for, workspace};
use fleetwire_types::{HostReportedState, InstanceState, ReportedInstance};
use serde_json::{json, Value};

const HOW_TO_RUN: &str = "needs qemu-system-x86 and the guest: apt-get install qemu-system-x86 \
    qemu-utils genisoimage busybox-static cpio grub-pc-bin xorriso mtools; bash \
    tests/qemu/build-guest.sh; cargo test -p fleetwire --test e2e -- agent::qemu_guest \
    --ignored";

/// The guest's files (`OUT` of build-guest.sh), or why the test cannot run.
fn guest() -> Result<PathBuf, String> {
    let dir = std::env::var_os("FLEETWIRE_QEMU_GUEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/qemu-guest"));
    for tool in ["qemu-system-x86_64", "qemu-img", "genisoimage"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Err(format!("{tool} is not installed"));
        }
    }
    for file in ["vmlinuz", "initrd.img", "disk.img"] {
        if !dir.join(file).is_file() {
            return Err(format!("{} is missing", dir.join(file).display()));
        }
    }
    Ok(dir)
}

/// The guest's files; `None` (the test is skipped, saying how to run it) when they or QEMU are
/// missing, except under `CI=true`, where that fails the test.
pub(super) fn guest_or_skip() -> Option<PathBuf> {
    match guest() {
        Ok(dir) => Some(dir),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{why}: {HOW_TO_RUN}")
        }
        Err(why) => {
            eprintln!("skipped: {why}; {HOW_TO_RUN}");
            None
        }
    }
}

/// A qemu agent named `node_id` with `env`, enrolled in `controller` and waited for until
/// the controller has it ready as a qemu node; the QEMUs it leaves are ended with the reaper.
pub(super) fn start_qemu_node(
    controller: &ControllerProcess,
    node_id: &str,
    env: &[(&str, &str)],
) -> (AgentProcess, Reaper) {
    let env: Vec<(&str, &str)> = [("VM_NODE_ID", node_id), ("VM_RUNTIME", "qemu")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    let agent = AgentProcess::start(&controller.url(""), &env);
    let reaper = Reaper(agent.state_dir.clone());
    wait_for(
        "the node to be ready at the controller",
        Duration::from_secs(30),
        || {
            let node: Value = http()
                .get(controller.url(&format!("/v1/nodes/{node_id}")))
                .send()
                .ok()?
                .json()
                .ok()?;
            (node["status"] == "ready" && node["runtime"] == "qemu").then_some(())
        },
    );
    (agent, reaper)
}

/// Ends every QEMU whose command line names `dir` when dropped: QEMU outlives a killed agent
/// by design, so a failing test must not leave guests behind.
pub(super) struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in qemu_pids(&self.0) {
            crate::support::send_signal(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The QEMU processes whose command line mentions `needle`.
pub(super) fn qemu_pids(needle: &Path) -> Vec<u32> {
    let needle = needle.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c).replace('\0', " ");
                c.starts_with(&format!("{}", which_qemu().display())) && c.contains(&needle)
            })
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .collect()
}

fn which_qemu() -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "command -v qemu-system-x86_64"])
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `n` consecutive ports nothing listens on, for VM_HOST_PORT_RANGE: the first and the last.
/// `n` ports in a row that nothing listens on, for `VM_HOST_PORT_RANGE`: below the kernel's
/// ephemeral ports (32768 and up by default), as the agent's own default is. Inside them, an
/// outgoing connection of the test's could hold one of the ports when a VM is placed, and the
/// placement would be refused for want of a free host port.
pub(super) fn free_ports(n: u16) -> (u16, u16) {
    let mut p = 22000 + (std::process::id() % 1000) as u16 * 8;
    loop {
        if (p..p + n).all(|q| std::net::TcpListener::bind(("0.0.0.0", q)).is_ok()) {
            return (p, p + n - 1);
        }
        p += n;
    }
}

pub(super) fn http() -> reqwest::blocking::Client {
    crate::support::install_crypto_provider();
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

pub(super) fn post_vm(controller: &ControllerProcess, body: &Value) -> (u16, Value) {
    let resp = http()
        .post(controller.url("/v1/vms"))
        .json(body)
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().unwrap_or(Value::Null))
}

pub(super) fn delete_vm(controller: &ControllerProcess, vm_id: &str) {
    let resp = http()
        .delete(controller.url(&format!("/v1/vms/{vm_id}")))
        .send()
        .unwrap();
    assert!(
        resp.status().is_success(),
        "DELETE {vm_id}: {}",
        resp.status()
    );
}

/// The guest's web page through the host port, if it answers.
pub(super) fn page(port: u16) -> Option<String> {
    let resp = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .ok()?;
    resp.status()
        .is_success()
        .then(|| resp.text().ok())
        .flatten()
}

pub(super) fn instance<'a>(r: &'a HostReportedState, app: &str) -> Option<&'a ReportedInstance> {
    r.instances.iter().find(|i| i.app_id.as_str() == app)
}

fn qemu_pid(agent: &AgentProcess, app: &str) -> Option<u32> {
    std::fs::read_to_string(agent.state_dir.join(format!("qemu/{app}/qemu.pid")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
#[ignore = "boots a real Linux guest under QEMU: needs qemu-system-x86 and the guest (bash tests/qemu/build-guest.sh); run: cargo test -p fleetwire --test e2e -- agent::qemu_guest --ignored"]
fn a_placed_vm_boots_a_real_guest_that_serves_through_its_host_port() {
    let Some(guest) = guest_or_skip() else {
        return;
    };
    // The node's image directory: the guest's kernel, initrd and bootable disk (the base
    // image), and a blank disk image (nothing boots from it: the guest that never answers).
    let images = tempfile::tempdir().unwrap();
    for file in ["vmlinuz", "initrd.img", "disk.img"] {
        std::fs::copy(guest.join(file), images.path().join(file)).unwrap();
    }
    let status = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(images.path().join("blank.qcow2"))
        .arg("64M")
        .status()
        .unwrap();
    assert!(status.success());

    let controller = ControllerProcess::start(&[]);
    let (first_port, last_port) = free_ports(3);
    let range = format!("{first_port}-{last_port}");
    let image_dir = images.path().display().to_string();
    let (mut agent, _reaper) = start_qemu_node(
        &controller,
        "qemu-node",
        &[
            ("VM_IMAGE_DIR", &image_dir),
            ("VM_BASE_IMAGE", "disk.img"),
            (
                "VM_SSH_PUBKEY",
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAtest fleetwire@test",
            ),
            ("VM_HOST_PORT_RANGE", &range),
            ("VM_QEMU_ACCEL", "auto"),
            ("VM_QEMU_PROBE_KERNEL", "vmlinuz"),
            ("VM_GUEST_BOOT_TIMEOUT_S", "60"),
            // VM_STOP_TIMEOUT_MS as by default (10 s): DELETE must stop QEMU within 10 s with
            // it, and the guest's busybox init ignores the power button.
        ],
    );

    // The heartbeat's kvm_available is what the probe guest showed, not whether /dev/kvm
    // exists (here it opens, but a KVM guest hangs). Waited for before placing, so that the
    // probe's spinning guest does not slow the boot measured below.
    wait_for(
        "the node's kvm_available from the probe",
        Duration::from_secs(60),
        || {
            let node: Value = http()
                .get(controller.url("/v1/nodes/qemu-node"))
                .send()
                .ok()?
                .json()
                .ok()?;
            let probe = std::fs::read_to_string(agent.state_dir.join("logs/kvm-probe.log")).ok();
            let kvm_booted = probe.is_some_and(|t| t.contains("Kernel command line:"));
            (node["kvm_available"] == kvm_booted).then_some(())
        },
    );

    // Placed through the controller: a kernel boot, port 80 forwarded.
    let placed_at = Instant::now();
    let (status, web) = post_vm(
        &controller,
        &json!({"vm_type": "web", "ram_mb": 256, "vcpu_count": 1, "disk_gb": 1, "vm_id": "web-1",
                "boot": {"kernel": "vmlinuz", "initrd": "initrd.img", "cmdline": "console=ttyS0 quiet"},
                "guest_ports": [80]}),
    );
    assert_eq!(status, 200, "{web}");
    assert_eq!(web["node_id"], "qemu-node", "{web}");
    let host_port = web["host_ports"][0]["host_port"]
        .as_u64()
        .expect("a host port") as u16;
    assert_eq!(
        web["host_ports"],
        json!([{"host_port": host_port, "guest_port": 80, "protocol": "tcp"}])
    );
    assert!((first_port..=last_port).contains(&host_port), "{web}");
    let body = wait_for(
        "the guest's HTTP server through the host port",
        Duration::from_secs(60),
        || page(host_port),
    );
    let serving = placed_at.elapsed();
    eprintln!("placement to the guest serving HTTP: {serving:?}");
    assert!(body.contains("fleetwire guest"), "{body}");

    // reported.json: running with the guest's address and host port, then healthy.
    let r = agent.wait_reported("web-1 running", Duration::from_secs(10), |r| {
        instance(r, "web-1")
            .filter(|i| i.state == InstanceState::Running)
            .map(|_| r.clone())
    });
    let web_1 = instance(&r, "web-1").unwrap();
    assert_eq!(
        web_1.guest_ipv4.as_ref().map(|a| a.to_string()).as_deref(),
        Some("10.0.2.15")
    );
    assert_eq!(web_1.host_port.as_ref().map(|p| p.0.get()), Some(host_port));
    assert!(web_1.started_at.is_some());
    assert_eq!(web_1.restart_count, 0);
    let healthy = agent.wait_reported("web-1 healthy", Duration::from_secs(10), |r| {
        instance(r, "web-1")?.last_healthy_at
    });
    assert_eq!(r.versions.guest_image, "vmlinuz+initrd.img");
    assert!(
        r.versions
            .vmm
            .as_ref()
            .is_some_and(|v| v.starts_with("QEMU ")),
        "{:?}",
        r.versions.vmm
    );
    let web_pid = qemu_pid(&agent, "web-1").expect("web-1's pid file");
    assert_eq!(
        qemu_pids(&agent.state_dir.join("qemu/web-1")),
        vec![web_pid]
    );

    // A PPN spawn names no boot source: the base image boots from its overlay, with a seed,
    // and its port 22 (the guest's SSH banner) answers through the forward.
    let (status, ppn) = post_vm(
        &controller,
        &json!({"vm_type": "ssh", "ram_mb": 128, "vcpu_count": 1, "disk_gb": 1, "vm_id": "ppn-1"}),
    );
    assert_eq!(status, 200, "{ppn}");
    assert_eq!(ppn["host_ports"][0]["guest_port"], 22, "{ppn}");
    let ppn_port = ppn["host_ports"][0]["host_port"].as_u64().unwrap() as u16;
    assert_ne!(ppn_port, host_port);
    let ppn_dir = agent.state_dir.join("qemu/ppn-1");
    // -U: the running QEMU holds the image's write lock.
    let info = Command::new("qemu-img")
        .args(["info", "-U", "--output=json"])
        .arg(ppn_dir.join("disk.qcow2"))
        .output()
        .unwrap();
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["format"], "qcow2");
    assert_eq!(
        info["backing-filename"],
        images
            .path()
            .join("disk.img")
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
    let seed = std::fs::read(ppn_dir.join("seed.iso")).unwrap();
    assert_eq!(&seed[32808..32814], b"cidata");
    // A disk named by the request: a blank one, which boots nothing.
    let (status, blank) = post_vm(
        &controller,
        &json!({"vm_type": "ssh", "ram_mb": 128, "vcpu_count": 1, "disk_gb": 1, "vm_id": "blank-1",
                "disk_image": "blank.qcow2"}),
    );
    assert_eq!(status, 200, "{blank}");
    assert_eq!(blank["host_ports"][0]["guest_port"], 22, "{blank}");
    let blank_dir = agent.state_dir.join("qemu/blank-1");
    let banner = wait_for(
        "the disk-booted guest's SSH banner through the forward",
        Duration::from_secs(90),
        || {
            use std::io::Read;
            let mut s = std::net::TcpStream::connect(("127.0.0.1", ppn_port)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text.starts_with("SSH-2.0-").then_some(text)
        },
    );
    assert_eq!(banner.trim(), "SSH-2.0-fleetwire-guest");
    agent.wait_reported("ppn-1 running and healthy", Duration::from_secs(20), |r| {
        instance(r, "ppn-1")
            .filter(|i| i.state == InstanceState::Running)?
            .last_healthy_at
    });

    // The range is used up: the only node refuses, and placement says there is no room.
    let (status, full) = post_vm(
        &controller,
        &json!({"vm_type": "web", "ram_mb": 128, "vcpu_count": 1, "disk_gb": 1, "vm_id": "web-2",
                "boot": {"kernel": "vmlinuz"}, "guest_ports": [80]}),
    );
    assert_eq!(status, 503, "{full}");
    assert_eq!(full["code"], "no_capacity", "{full}");

    // A kernel that is not there: the VM is in error, naming it; nothing else is touched.
    let (status, missing) = post_vm(
        &controller,
        &json!({"vm_type": "web", "ram_mb": 128, "vcpu_count": 1, "disk_gb": 1, "vm_id": "bad-1",
                "boot": {"kernel": "vmlinuz-6.99"}}),
    );
    assert_eq!(status, 200, "{missing}");
    assert_eq!(missing["state"], "Error", "{missing}");
    let message = missing["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("kernel \"vmlinuz-6.99\"") && message.contains("VM_IMAGE_DIR"),
        "{message}"
    );
    delete_vm(&controller, "bad-1");
    // A name that leaves the image directory is refused at its pointer.
    let (status, escaping) = post_vm(
        &controller,
        &json!({"vm_type": "web", "ram_mb": 128, "vcpu_count": 1, "boot": {"kernel": "../vmlinuz"}}),
    );
    assert_eq!(status, 400, "{escaping}");
    assert_eq!(
        escaping["violations"][0]["instance_path"], "/boot/kernel",
        "{escaping}"
    );

    // The blank disk boots nothing: after VM_GUEST_BOOT_TIMEOUT_S the VM is in error, its
    // QEMU stopped; deleting it frees its port and removes its overlay.
    let failed = agent.wait_reported("blank-1 failed", Duration::from_secs(120), |r| {
        instance(r, "blank-1")
            .filter(|i| i.state == InstanceState::Failed)
            .cloned()
    });
    let message = failed
        .message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("did not answer on guest port 22 within 60 s"),
        "{message}"
    );
    assert!(qemu_pids(&blank_dir).is_empty());
    for (vm, dir) in [("blank-1", &blank_dir), ("ppn-1", &ppn_dir)] {
        delete_vm(&controller, vm);
        wait_for("the VM's folder to go", Duration::from_secs(15), || {
            (!dir.exists()).then_some(())
        });
    }

    // kill -9 of QEMU: a cold boot by the host under the restart policy, which is not a
    // restart by a supervisor in the guest (restartCount stays 0, seed 001).
    let started_before = instance(&agent.reported(), "web-1").unwrap().started_at;
    crate::support::send_signal(web_pid, rustix::process::Signal::KILL);
    let again = agent.wait_reported("web-1 booted again", Duration::from_secs(30), |r| {
        instance(r, "web-1")
            .filter(|i| i.state == InstanceState::Running && i.started_at != started_before)
            .cloned()
    });
    assert_eq!(again.restart_count, 0);
    assert!(again.last_restart.is_none());
    let message = again
        .message
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(
        message.contains("QEMU killed by signal 9; cold boot 1 of"),
        "{message}"
    );
    let new_pid = qemu_pid(&agent, "web-1").unwrap();
    assert_ne!(new_pid, web_pid);
    wait_for("the guest to serve again", Duration::from_secs(60), || {
        page(host_port)
    });
    agent.wait_reported("web-1 healthy again", Duration::from_secs(10), |r| {
        instance(r, "web-1")?
            .last_healthy_at
            .filter(|at| *at > healthy)
    });

    // A restarted agent finds the running QEMU again and starts no second one; the guest's
    // startedAt stays when QEMU started, not when the new agent found it, and the CPU QEMU used
    // before is not metered twice.
    let before_restart = instance(&agent.reported(), "web-1").unwrap().clone();
    let started_at = before_restart.started_at.expect("web-1's startedAt");
    let cpu_before = before_restart.meters.as_ref().map_or(0, |m| m.cpu_ms);
    let qemu_cpu_ms = || {
        let stat = std::fs::read_to_string(format!("/proc/{new_pid}/stat")).unwrap();
        let fields: Vec<i64> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // utime and stime (fields 14 and 15 of proc(5); field 3, the state, is no number).
        let ticks = rustix::param::clock_ticks_per_second() as i64;
        ((fields[10] + fields[11]) * 1000 / ticks) as u64
    };
    let qemu_cpu_at_kill = qemu_cpu_ms();
    // Apart enough that the agent's restart time cannot pass for QEMU's start.
    std::thread::sleep(Duration::from_secs(3));
    agent.running.kill();
    agent.restart_after_kill(&controller.url(""));
    let found = agent.wait_reported(
        "web-1 running after the agent's restart",
        Duration::from_secs(20),
        |r| {
            instance(r, "web-1")
                .filter(|i| i.state == InstanceState::Running)
                .cloned()
        },
    );
    let found_started = found
        .started_at
        .expect("web-1's startedAt after the restart");
    let apart = (found_started.utc() - started_at.utc()).abs();
    assert!(
        apart < chrono::Duration::milliseconds(500),
        "startedAt was {started_at:?}, after the agent's restart {found_started:?}"
    );
    // The meter grew by at most what QEMU used since the last report before the kill (plus
    // what it uses while this runs), not by all QEMU ever used again.
    let cpu_after = found.meters.as_ref().map_or(0, |m| m.cpu_ms);
    let used_since = qemu_cpu_ms().saturating_sub(qemu_cpu_at_kill);
    assert!(
        cpu_after <= cpu_before + used_since + 200,
        "cpuMs went from {cpu_before} to {cpu_after}; QEMU used {used_since} ms since \
         (and {qemu_cpu_at_kill} ms in all before the agent's restart)"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        qemu_pids(&agent.state_dir.join("qemu/web-1")),
        vec![new_pid]
    );
    assert!(page(host_port).is_some());
    let vms: Value = http()
        .get(controller.url("/v1/vms"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let record = vms
        .as_array()
        .and_then(|a| a.iter().find(|v| v["vm_id"] == "web-1"))
        .cloned()
        .unwrap_or(vms.clone());
    assert_eq!(record["host_ports"][0]["host_port"], host_port, "{record}");

    // DELETE stops QEMU within 10 s, frees the port and removes the VM's files.
    let deleted_at = Instant::now();
    delete_vm(&controller, "web-1");
    wait_for("web-1's QEMU to stop", Duration::from_secs(10), || {
        (!alive(new_pid)).then_some(())
    });
    let stopped_in = deleted_at.elapsed();
    assert!(stopped_in < Duration::from_secs(10), "{stopped_in:?}");
    wait_for("web-1's folder to go", Duration::from_secs(10), || {
        (!agent.state_dir.join("qemu/web-1").exists()).then_some(())
    });
    // Its port is free again: the next VM gets it.
    let (status, next) = post_vm(
        &controller,
        &json!({"vm_type": "web", "ram_mb": 128, "vcpu_count": 1, "disk_gb": 1, "vm_id": "web-3",
                "boot": {"kernel": "vmlinuz", "initrd": "initrd.img"}, "guest_ports": [80]}),
    );
    assert_eq!(status, 200, "{next}");
    assert_eq!(next["host_ports"][0]["host_port"], host_port, "{next}");
    delete_vm(&controller, "web-3");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !qemu_pids(&agent.state_dir.join("qemu")).is_empty() {
        assert!(
            Instant::now() < deadline,
            "QEMUs left 10 s after web-3's DELETE: {:?}; reported: {:?}",
            qemu_pids(&agent.state_dir.join("qemu"))
                .iter()
                .map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default())
                .collect::<Vec<_>>(),
            agent.reported().instances
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a qemu agent with `env` that refuses to start says on stderr (it must exit non-zero).
pub(super) fn qemu_agent_refusal(env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let env: Vec<(String, String)> = [("VM_RUNTIME", "qemu")]
        .iter()
        .chain(env)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let output = crate::support::agent_harness::agent_command(
        "http://127.0.0.1:9",
        &dir.path().join("state"),
        crate::support::free_port(),
        &env,
    )
    .stderr(std::process::Stdio::piped())
    .output()
    .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs without QEMU: an agent whose `VM_HOST_PORT_RANGE` lies in the kernel's ephemeral ports
/// warns, naming both ranges and the way out, before it checks anything else (here it then stops
/// for want of its QEMU); the default range draws no warning.
#[test]
fn a_qemu_agent_whose_host_ports_are_ephemeral_ports_says_so() {
    let Ok(ephemeral) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else {
        eprintln!("skipped: /proc/sys/net/ipv4/ip_local_port_range is not readable here");
        return;
    };
    let first: u16 = ephemeral
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let inside = format!("{}-{}", first + 100, first + 109);
    let stderr = qemu_agent_refusal(&[
        ("VM_QEMU_BINARY", "/nonexistent/qemu-system-x86_64"),
        ("VM_HOST_PORT_RANGE", &inside),
    ]);
    assert!(
        stderr.contains(&format!(
            "VM_HOST_PORT_RANGE {inside} overlaps this host's ephemeral ports"
        )) && stderr.contains("net.ipv4.ip_local_reserved_ports"),
        "{stderr}"
    );
    if first > 20999 {
        let stderr = qemu_agent_refusal(&[("VM_QEMU_BINARY", "/nonexistent/qemu-system-x86_64")]);
        assert!(!stderr.contains("ephemeral ports"), "{stderr}");
    }
}

/// Runs without QEMU: a qemu agent whose QEMU is not where it is told stops at once, naming
/// the setting.
#[test]
fn a_qemu_agent_without_its_qemu_says_where_it_looked() {
    let stderr = qemu_agent_refusal(&[("VM_QEMU_BINARY", "/nonexistent/qemu-system-x86_64")]);
    assert!(
        stderr.contains("VM_QEMU_BINARY: /nonexistent/qemu-system-x86_64 is not a file"),
        "{stderr}"
    );
}

/// `fleetwire up --runtime qemu`: the fleet of one's agent runs QEMU, and the banner's example
/// places a guest that serves through its host port; Ctrl-C stops the guest with the agent.
#[test]
#[ignore = "boots a real Linux guest under QEMU: needs qemu-system-x86 and the guest (bash tests/qemu/build-guest.sh); run: cargo test -p fleetwire --test e2e -- agent::qemu_guest --ignored"]
fn up_with_the_qemu_runtime_places_the_banners_guest() {
    use std::io::{BufRead, BufReader};
    let Some(guest) = guest_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    for file in ["vmlinuz", "initrd.img"] {
        std::fs::copy(guest.join(file), images.join(file)).unwrap();
    }
    let state = dir.path().join("state");
    let _reaper = Reaper(state.clone());
    let (first, last) = free_ports(2);
    let mut up = crate::support::Running::spawn(
        crate::support::fleetwire()
            .arg("up")
            .arg("--dir")
            .arg(&state)
            .args([
                "--listen",
                &format!("127.0.0.1:{}", crate::support::free_port()),
            ])
            .args(["--spawn-port", &crate::support::free_port().to_string()])
            .args(["--node-id", "up-qemu", "--heartbeat-interval", "1"])
            .args(["--plain-http", "--runtime", "qemu"])
            .env("VM_IMAGE_DIR", &images)
            .env("VM_HOST_PORT_RANGE", format!("{first}-{last}"))
            .env("VM_QEMU_ACCEL", "tcg")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null()),
    );
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = up.child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut printed = Vec::new();
    wait_for(
        "`fleetwire up` to say it is up",
        Duration::from_secs(90),
        || {
            while let Ok(line) = lines.try_recv() {
                printed.push(line);
            }
            printed
                .iter()
                .any(|l| l.contains("fleetwire is up"))
                .then_some(())
        },
    );
    let at = printed.iter().position(|l| l.contains("-X POST")).unwrap();
    let place = format!("{}\n{}", printed[at], printed[at + 1]);
    assert!(place.contains("\"boot\""), "{place}");
    let out = Command::new("sh")
        .arg("-c")
        .arg(place.trim())
        .output()
        .unwrap();
    let placed: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(placed["node_id"], "up-qemu", "{placed}");
    let port = placed["host_ports"][0]["host_port"]
        .as_u64()
        .expect("a host port") as u16;
    let body = wait_for("the guest to serve", Duration::from_secs(60), || page(port));
    assert!(body.contains("fleetwire guest"), "{body}");

    // Ctrl-C: `up` stops its agent, which stops its guests.
    crate::support::send_signal(up.pid(), rustix::process::Signal::INT);
    let _ = up.child.wait();
    wait_for(
        "the guest's QEMU to stop with the agent",
        Duration::from_secs(30),
        || qemu_pids(&state).is_empty().then_some(()),
    );
}

/// PPN parity: fleetwire's agent with the qemu runtime, enrolled in PPN's real controller
/// (`service-vm-fleet`, built from `../shared/peers`), receives PPN's spawn, which names no
/// image, and boots the node's base image; `host_ports` carries the SSH forward, as PPN's own
/// agent reports it, and the guest's port 22 answers through it.
#[test]
#[ignore = "needs the real PPN controller (../shared/peers/build.sh) and qemu-system-x86 with the guest (bash tests/qemu/build-guest.sh); run: cargo test -p fleetwire --test e2e -- agent::qemu_guest --ignored"]
fn ppn_controller_spawns_a_guest_from_the_base_image_on_a_fleetwire_qemu_node() {
    const PPN_PORT: u16 = 9203;
    let Some(guest) = guest_or_skip() else {
        return;
    };
    let fleet_bin = crate::support::real_peers::binary("service-vm-fleet");
    // service-vm-fleet listens on the fixed 9203: the lock ppn_real.rs takes too.
    let lock = std::fs::File::create(std::env::temp_dir().join("fleetwire-ppn-9203.lock")).unwrap();
    // Released when the file is closed.
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    assert!(
        std::net::TcpListener::bind(("0.0.0.0", PPN_PORT)).is_ok(),
        "port {PPN_PORT} is taken: service-vm-fleet listens on it"
    );
    let images = tempfile::tempdir().unwrap();
    std::fs::copy(guest.join("disk.img"), images.path().join("disk.img")).unwrap();
    let image_dir = images.path().display().to_string();
    let (first, last) = free_ports(2);
    let range = format!("{first}-{last}");
    let node_id = "fw-qemu.dc1.example";
    let agent = AgentProcess::start(
        &format!("http://127.0.0.1:{PPN_PORT}"),
        &[
            ("VM_NODE_ID", node_id),
            ("VM_RUNTIME", "qemu"),
            ("VM_IMAGE_DIR", &image_dir),
            ("VM_BASE_IMAGE", "disk.img"),
            ("VM_HOST_PORT_RANGE", &range),
            ("VM_QEMU_ACCEL", "tcg"),
        ],
    );
    let _reaper = Reaper(agent.state_dir.clone());
    let scratch = tempfile::tempdir().unwrap();
    let _fleet = crate::support::Running::spawn(
        Command::new(fleet_bin)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("VM_HOST_SPAWN_PORT", agent.port.to_string())
            .current_dir(scratch.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    let ppn = |path: &str| format!("http://127.0.0.1:{PPN_PORT}{path}");
    wait_for("the node in PPN's listing", Duration::from_secs(30), || {
        let resp = http()
            .get(ppn(&format!("/v1/nodes/{node_id}")))
            .send()
            .ok()?;
        resp.status().is_success().then_some(())
    });

    // PPN's spawn, as its clients send it: no image, no ports.
    let resp = http()
        .post(ppn("/v1/vms"))
        .json(&json!({"vm_type": "devbox", "ram_mb": 128, "vcpu_count": 1,
                      "tenant_id": "acme", "preferred_node": node_id}))
        .send()
        .unwrap();
    let status = resp.status().as_u16();
    let created: Value = resp.json().unwrap_or(Value::Null);
    assert_eq!(status, 200, "{created}");
    let vm_id = created["vm_id"].as_str().unwrap().to_string();
    assert_eq!(created["host_ports"][0]["guest_port"], 22, "{created}");
    let ssh_port = created["host_ports"][0]["host_port"].as_u64().unwrap() as u16;
    let banner = wait_for(
        "the guest's port 22 through the forward",
        Duration::from_secs(90),
        || {
            use std::io::Read;
            let mut s = std::net::TcpStream::connect(("127.0.0.1", ssh_port)).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text.starts_with("SSH-2.0-").then_some(text)
        },
    );
    assert_eq!(banner.trim(), "SSH-2.0-fleetwire-guest");
    // PPN lists it, with the SSH forward, from the agent's heartbeats.
    let listed = wait_for(
        "PPN's record with host_ports",
        Duration::from_secs(20),
        || {
            let vms: Value = http().get(ppn("/v1/vms")).send().ok()?.json().ok()?;
            vms.as_array()?
                .iter()
                .find(|v| v["vm_id"] == vm_id.as_str() && v["state"] == "Running")
                .cloned()
        },
    );
    assert_eq!(
        listed["host_ports"],
        json!([{"host_port": ssh_port, "guest_port": 22, "protocol": "tcp"}]),
        "{listed}"
    );
    // PPN's delete stops the guest.
    let resp = http()
        .delete(ppn(&format!("/v1/vms/{vm_id}")))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    wait_for("the guest's QEMU to stop", Duration::from_secs(15), || {
        qemu_pids(&agent.state_dir).is_empty().then_some(())
    });
}
