//! Prints, for every root document, whether its generated type enforces the whole schema.
fn main() {
    for doc in fleetwire_types::DOCUMENTS {
        println!("{:<22} exact={:<5} {}", doc.name, doc.exact, doc.exactness);
    }
}
