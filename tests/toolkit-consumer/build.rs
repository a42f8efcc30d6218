//! The whole build script of a crate with its own schemas (docs/codegen.md, "From a build
//! script"): the types, the schema facts and the root documents into `OUT_DIR`.

fn main() {
    fleetwire_codegen::toolkit::Toolkit::new("schemas")
        .api("schemas/parcel-api.openapi.json")
        .generate_to_out_dir();
}
