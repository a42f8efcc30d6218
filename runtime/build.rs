//! Renders the reference site from `../schemas` (with `../docs-site`'s templates and assets)
//! into `OUT_DIR`, where `reference_site` compiles it in for the controller to serve under
//! `/docs` (docs/reference-site.md).

fn main() {
    let (outputs, out_dir) =
        fleetwire_codegen::build_script_outputs(&["docs-site/templates", "docs-site/static"]);
    fleetwire_codegen::write_site_out_dir(&outputs, &out_dir).expect("writing the reference site");
}
