//! The targets by name, as the corpus folders (`tests/fuzz/corpus/<name>/`), the crash
//! folders (`tests/fuzz/crashes/<name>/`) and the binaries (`fuzz_<name>`) are named.

pub struct Target {
    pub name: &'static str,
    pub prepare: fn(),
    pub check: fn(&[u8]),
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "documents",
        prepare: crate::documents::prepare,
        check: crate::documents::check,
    },
    Target {
        name: "desired_intake",
        prepare: crate::desired_intake::prepare,
        check: crate::desired_intake::check,
    },
    Target {
        name: "csr",
        prepare: crate::csr::prepare,
        check: crate::csr::check,
    },
    Target {
        name: "contact_log",
        prepare: crate::contact_log::prepare,
        check: crate::contact_log::check,
    },
];
