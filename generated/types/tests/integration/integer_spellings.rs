//! JSON Schema counts `1.0`, `-0` and `1e2` as integers, and peers that serialise through
//! floats (JavaScript, Python) send them: the readers accept them wherever the schema does, with
//! the same range checks, and refuse the rest with a violation that says why.

use std::path::Path;

use fleetwire_types::{read, read_strict, HostReportedState, NodeHeartbeat};

fn fixture(path: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../schemas/examples")
            .join(path),
    )
    .unwrap()
}

/// The typical reported.json with its first instance's `restartCount` spelled `spelling`.
fn reported_with_restart_count(spelling: &str) -> Vec<u8> {
    let text = fixture("HostReportedState/valid/typical.json");
    let text = text.replacen(
        "\"restartCount\": 1,",
        &format!("\"restartCount\": {spelling},"),
        1,
    );
    assert!(text.contains(&format!("\"restartCount\": {spelling},")));
    text.into_bytes()
}

#[test]
fn integral_floats_are_integers() {
    for (spelling, expected) in [
        ("1.0", 1),
        ("-0", 0),
        ("-0.0", 0),
        ("1e2", 100),
        ("1E+2", 100),
        ("4.2e1", 42),
        ("4294967295.0", u32::MAX),
    ] {
        let bytes = reported_with_restart_count(spelling);
        let report = read::<HostReportedState>(&bytes)
            .unwrap_or_else(|r| panic!("{spelling} refused: {r}"))
            .into_inner();
        assert_eq!(report.instances[0].restart_count, expected, "{spelling}");
        assert_eq!(
            read_strict::<HostReportedState>(&bytes).unwrap().instances[0].restart_count,
            expected
        );
    }
}

#[test]
fn fractions_and_values_past_the_width_are_refused_with_the_schema_keyword() {
    for (spelling, keyword) in [
        ("1.5", "type"),
        ("-1.0", "minimum"),
        ("4294967296.0", "maximum"),
        ("4294967296", "maximum"),
        ("1e40", "maximum"),
    ] {
        let bytes = reported_with_restart_count(spelling);
        let refused = read::<HostReportedState>(&bytes).unwrap_err();
        assert!(
            refused
                .violations()
                .iter()
                .any(|v| v.keyword == keyword
                    && v.instance_path.as_str() == "/instances/0/restartCount"),
            "{spelling}: {refused}"
        );
    }
}

#[test]
fn a_heartbeat_from_a_float_serialiser_is_read() {
    // A PPN heartbeat as a JavaScript or Python agent would write it.
    let text = fixture("NodeHeartbeat/valid/ppn-heartbeat.json");
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let total = value["ram_total_mb"].as_u64().unwrap();
    let cores = value["cpu_cores"].as_u64().unwrap();
    let text = serde_json::to_string(&value)
        .unwrap()
        .replace(
            &format!("\"ram_total_mb\":{total}"),
            &format!("\"ram_total_mb\":{total}.0"),
        )
        .replace(
            &format!("\"cpu_cores\":{cores}"),
            &format!("\"cpu_cores\":{cores}e0"),
        );
    assert!(text.contains(".0") && text.contains("e0"));
    let hb = read::<NodeHeartbeat>(text.as_bytes()).unwrap().into_inner();
    assert_eq!(hb.ram_total_mb, total);
    assert_eq!(u64::from(hb.cpu_cores), cores);
    value["cpu_cores"] = serde_json::json!(4294967296.0);
    let refused = read::<NodeHeartbeat>(value.to_string().as_bytes()).unwrap_err();
    assert_eq!(refused.violations()[0].keyword, "maximum", "{refused}");
}

#[test]
fn a_uint64_past_its_range_is_refused_with_maximum() {
    let text = fixture("HostReportedState/valid/typical.json").replacen(
        "\"cacheBytes\": 214748364800",
        "\"cacheBytes\": 1e20",
        1,
    );
    let refused = read::<HostReportedState>(text.as_bytes()).unwrap_err();
    assert!(
        refused
            .violations()
            .iter()
            .any(|v| v.keyword == "maximum" && v.instance_path.as_str() == "/capacity/cacheBytes"),
        "{refused}"
    );
}
