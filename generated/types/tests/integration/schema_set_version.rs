//! The crate's version is the schema set's (docs/versioning.md): a downstream crate that pins
//! `fleetwire-types` pins the wire's version.

#[test]
fn the_crate_version_is_the_schema_set_version() {
    assert_eq!(
        fleetwire_types::SCHEMA_SET_VERSION,
        env!("CARGO_PKG_VERSION"),
        "set the fleetwire-types crate's version (its Cargo.toml, and the workspace dependency \
         on it) to schemas/schema-set.json's version"
    );
    assert_eq!(fleetwire_types::SCHEMA_SET_NAME, "fleetwire");
    let hash = fleetwire_types::SCHEMA_SET_HASH;
    assert_eq!(hash.len(), 64, "{hash}");
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()), "{hash}");
}
