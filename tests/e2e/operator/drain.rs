//! `fleetwire nodes drain` (issue 30): it used to return at once and move nothing. Now, on a
//! controller with two real agents, it moves the node's VMs to the other node (same ids, same
//! commands) and waits until the drained node runs none, with progress; `--stop` stops them
//! instead, `--detach` only marks the node; and once the only other node drains too, a create
//! says that the nodes are draining, not that there is no room.

use super::run_cli::{exits, ok, stderr, words, SmallFleet};
use fleetwire_types::VmRecord;

fn node_of(fleet: &SmallFleet, vm: &str) -> String {
    let json = ok(fleet.run(&["vms", "get", vm, "-o", "json"]));
    let vm: VmRecord = fleetwire_types::read_strict(json.as_bytes()).unwrap();
    vm.node_id.unwrap().to_string()
}

#[test]
fn drain_moves_or_stops_the_vms_and_waits_for_the_node_to_be_empty() {
    let fleet = SmallFleet::start(&["node-a", "node-b"]);
    for vm in ["vm-1", "vm-2"] {
        ok(fleet.run(&words(&format!(
            "vms create --type t --memory-mb 64 --vcpus 1 --vm-id {vm} --node node-a -- sleep 600"
        ))));
        assert_eq!(node_of(&fleet, vm), "node-a");
    }

    // Moved: the same VMs, running on node-b; node-a has none left.
    let drained = fleet.run(&["nodes", "drain", "node-a", "--deadline", "60s"]);
    let said = ok(drained);
    assert!(said.contains("node node-a drained: 2 moved"), "{said}");
    for vm in ["vm-1", "vm-2"] {
        assert_eq!(node_of(&fleet, vm), "node-b");
    }
    let described = ok(fleet.run(&["vms", "get", "vm-1"]));
    assert!(
        described.contains("sleep 600") && described.contains("Running"),
        "{described}"
    );
    let nodes = ok(fleet.run(&["nodes", "get", "node-a"]));
    assert!(nodes.contains("draining"), "{nodes}");

    // With no other node to take them, nothing is deleted: exit 6, saying why.
    let stuck = fleet.run(&["nodes", "drain", "node-b"]);
    exits(&stuck, 6, "cannot move");
    assert!(
        stderr(&stuck).contains("no other node"),
        "{}",
        stderr(&stuck)
    );
    assert_eq!(node_of(&fleet, "vm-1"), "node-b");

    // Both nodes draining: a create says so, not "no room".
    let refused = fleet.run(&words(
        "vms create --type t --memory-mb 64 --vcpus 1 -- sleep 600",
    ));
    exits(&refused, 6, "draining");

    // --detach marks the node and returns; --stop stops its VMs.
    let detached = ok(fleet.run(&["nodes", "drain", "node-b", "--detach"]));
    assert!(detached.contains("2 VMs stay"), "{detached}");
    let stopped = fleet.run(&["nodes", "drain", "node-b", "--stop"]);
    let said = ok(stopped);
    assert!(said.contains("node node-b drained: 2 stopped"), "{said}");
    assert_eq!(ok(fleet.run(&["vms", "list", "-o", "name"])), "");
}
