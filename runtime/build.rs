//! Renders the reference site from `../schemas` (with `../docs-site`'s templates and assets)
//! into `OUT_DIR`, where `reference_site` compiles it in for the controller to serve under
//! `/docs` (docs/reference-site.md); and tells the binary which release it is, as the site's
//! version line does (`fleetwire --version`, docs/versioning.md "One version").

fn main() {
    let (outputs, out_dir) =
        fleetwire_codegen::build_script_outputs(&["docs-site/templates", "docs-site/static"]);
    fleetwire_codegen::write_site_out_dir(&outputs, &out_dir).expect("writing the reference site");
    println!(
        "cargo:rustc-env=FLEETWIRE_RELEASE_LINE={}",
        outputs.model.stamp.release
    );
}
