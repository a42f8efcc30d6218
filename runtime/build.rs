//! Renders the reference site from `../schemas` (with the templates and assets compiled into
//! fleetwire-codegen) into `OUT_DIR`, where `reference_site` compiles it in for the controller to
//! serve under `/docs` (docs/reference-site.md). The generator runs the one way a build script
//! runs it (codegen `build_script`, docs/codegen.md "One generator path"); it also tells the
//! binary which release it is, as the site's version line does (`fleetwire --version`,
//! docs/versioning.md "One version").

fn main() {
    fleetwire_codegen::build_script::reference_site();
}
