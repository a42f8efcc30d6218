//! Regenerates the types and the schema facts from `../schemas` on every schema change (the
//! reference site is rendered by the runtime's build script, not here).

fn main() {
    let (outputs, out_dir) = fleetwire_codegen::build_script_outputs(&[]);
    fleetwire_codegen::write_out_dir(&outputs, &out_dir).expect("writing generated sources");
}
