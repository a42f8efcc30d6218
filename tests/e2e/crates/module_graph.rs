//! The layers hold inside each crate too: no module imports from a module that depends on it
//! (docs/architecture.md, "How the layers are checked").
//!
//! Every crate root of the workspace (`src/lib.rs`, `src/main.rs`) is parsed with `syn`, its
//! module tree followed through `mod` declarations, and every path a module names is resolved
//! to the module that defines it: `crate::`, `super::` and `self::` paths, paths that start with
//! a child module, and `pub use` re-exports followed to where the item really lives (so
//! importing through a parent's re-export is not an edge to the parent). Paths inside macro
//! invocations count too. A child that uses an item defined in its parent while the parent uses
//! the child is a cycle like any other. `#[cfg(test)]` items are left out: a test module may
//! reach anywhere. The strongly connected components of the resulting graph must all be single
//! modules.
//!
//! Run it alone: `cargo test -p fleetwire --test e2e -- crates::module_graph`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graphmap::DiGraphMap;
use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module path inside one crate; the root is the empty path.
type ModPath = Vec<String>;

#[derive(Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// `pub use` re-exports: the name as seen from outside → the path as written.
    reexports: BTreeMap<String, Vec<String>>,
    /// Every path this module names, as written.
    paths: Vec<Vec<String>>,
}

#[derive(Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .meta
                .require_list()
                .map(|list| {
                    list.tokens
                        .to_string()
                        .split_whitespace()
                        .any(|t| t == "test")
                })
                .unwrap_or(false)
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        if !attr.path().is_ident("path") {
            return None;
        }
        match &attr.meta.require_name_value().ok()?.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        }
    })
}

/// The paths of a `use` tree, each ending in the imported name (or `*`), with the name it is
/// bound to.
fn flatten_use(prefix: &[String], tree: &syn::UseTree, out: &mut Vec<(Vec<String>, String)>) {
    let with = |segment: String| {
        let mut path = prefix.to_vec();
        path.push(segment);
        path
    };
    match tree {
        syn::UseTree::Path(p) => flatten_use(&with(p.ident.to_string()), &p.tree, out),
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                let bound = prefix.last().cloned().unwrap_or_default();
                out.push((prefix.to_vec(), bound));
            } else {
                out.push((with(name.clone()), name));
            }
        }
        syn::UseTree::Rename(r) => out.push((with(r.ident.to_string()), r.rename.to_string())),
        syn::UseTree::Glob(_) => out.push((with("*".into()), "*".into())),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten_use(prefix, t, out)),
    }
}

/// Collects the paths an item names, skipping `#[cfg(test)]` items and nested modules (those
/// are modules of their own).
#[derive(Default)]
struct PathCollector {
    paths: Vec<Vec<String>>,
}

impl PathCollector {
    /// `crate::a::b`, `super::x`, `self::y` inside a macro's tokens.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.scan_tokens(group.stream()),
                TokenTree::Ident(ident)
                    if matches!(ident.to_string().as_str(), "crate" | "super" | "self") =>
                {
                    let mut path = vec![ident.to_string()];
                    let mut j = i + 1;
                    while j + 2 < tokens.len() && is_path_sep(&tokens[j], &tokens[j + 1]) {
                        match &tokens[j + 2] {
                            TokenTree::Ident(next) => path.push(next.to_string()),
                            _ => break,
                        }
                        j += 3;
                    }
                    if path.len() > 1 {
                        self.paths.push(path);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// `quote!`, `quote_spanned!`, `parse_quote!`: tokens of generated code.
fn is_code_template(mac: &syn::Macro) -> bool {
    mac.path.segments.last().is_some_and(|last| {
        matches!(
            last.ident.to_string().as_str(),
            "quote" | "quote_spanned" | "parse_quote" | "parse_quote_spanned"
        )
    })
}

fn is_path_sep(a: &TokenTree, b: &TokenTree) -> bool {
    matches!((a, b), (TokenTree::Punct(a), TokenTree::Punct(b))
        if a.as_char() == ':' && b.as_char() == ':' && a.spacing() == proc_macro2::Spacing::Joint)
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.paths
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }
    /// `pub(crate)` names where an item may be used, not something the module uses.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // What `quote!` and its kin hold is code generated for another crate (codegen's
        // output, docs/codegen.md): its `crate::` paths name that crate, not this one.
        if is_code_template(mac) {
            return;
        }
        self.scan_tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Mod(_) | syn::Item::Use(_) => return,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_cfg_test(attrs) {
            syn::visit::visit_item(self, item);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
}

impl Crate {
    fn load(root: &Path) -> Crate {
        let mut krate = Crate::default();
        let file =
            syn::parse_file(&read(root)).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let dir = root
            .parent()
            .expect("a crate root has a folder")
            .to_path_buf();
        krate.add_module(Vec::new(), root, &dir, &file.items);
        krate
    }

    /// `dir` is where the files of this module's children are looked for.
    fn add_module(&mut self, path: ModPath, file: &Path, dir: &Path, items: &[syn::Item]) {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut collector = PathCollector::default();
        let mut children = Vec::new();
        for item in items {
            match item {
                syn::Item::Mod(m) if !is_cfg_test(&m.attrs) => {
                    module.children.insert(m.ident.to_string());
                    children.push(m);
                }
                syn::Item::Use(u) if !is_cfg_test(&u.attrs) => {
                    let mut uses = Vec::new();
                    flatten_use(&[], &u.tree, &mut uses);
                    let public = !matches!(u.vis, syn::Visibility::Inherited);
                    for (used, bound) in uses {
                        if public && bound != "*" {
                            module.reexports.insert(bound, used.clone());
                        }
                        module.paths.push(used);
                    }
                }
                other => collector.visit_item(other),
            }
        }
        module.paths.extend(collector.paths);
        self.modules.insert(path.clone(), module);
        for child in children {
            let name = child.ident.to_string();
            let mut child_path = path.clone();
            child_path.push(name.clone());
            match &child.content {
                Some((_, items)) => {
                    self.add_module(child_path, file, &dir.join(&name), items);
                }
                None => {
                    let child_file = match path_attr(&child.attrs) {
                        Some(p) => dir.join(p),
                        None if dir.join(format!("{name}.rs")).exists() => {
                            dir.join(format!("{name}.rs"))
                        }
                        None => dir.join(&name).join("mod.rs"),
                    };
                    let parsed = syn::parse_file(&read(&child_file))
                        .unwrap_or_else(|e| panic!("{}: {e}", child_file.display()));
                    let child_dir = if child_file.ends_with("mod.rs") {
                        child_file.parent().unwrap().to_path_buf()
                    } else {
                        child_file.with_extension("")
                    };
                    self.add_module(child_path, &child_file, &child_dir, &parsed.items);
                }
            }
        }
    }

    /// The module that defines what `written` names, seen from module `from`; `None` for paths
    /// outside the crate (other crates, the standard library, local names).
    fn resolve(&self, from: &[String], written: &[String], depth: usize) -> Option<ModPath> {
        let first = written.first()?;
        let (mut here, mut rest): (ModPath, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &written[1..]),
            "self" => (from.to_vec(), &written[1..]),
            "super" => {
                let mut base = from.to_vec();
                let mut rest = written;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            name if self.modules[from].children.contains(name) => (from.to_vec(), written),
            _ => return None,
        };
        while let Some((segment, tail)) = rest.split_first() {
            let mut next = here.clone();
            next.push(segment.clone());
            if self.modules.contains_key(&next) {
                here = next;
                rest = tail;
                continue;
            }
            if let Some(target) = self.modules[&here].reexports.get(segment) {
                if depth < 16 {
                    let mut followed = target.clone();
                    followed.extend_from_slice(tail);
                    if let Some(defining) = self.resolve(&here, &followed, depth + 1) {
                        return Some(defining);
                    }
                }
            }
            break;
        }
        Some(here)
    }

    /// Each module's imports of other modules of the crate, with one example path each.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), String> {
        let mut edges = BTreeMap::new();
        for (from, module) in &self.modules {
            for written in &module.paths {
                let Some(to) = self.resolve(from, written, 0) else {
                    continue;
                };
                if &to != from {
                    edges
                        .entry((from.clone(), to))
                        .or_insert_with(|| written.join("::"));
                }
            }
        }
        edges
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn display(path: &[String]) -> String {
    if path.is_empty() {
        "crate".into()
    } else {
        path.join("::")
    }
}

/// The cycles of one crate, described for a reader; empty when the graph is acyclic.
///
/// The graph is checked at every depth of the module tree: at depth 1 each top-level module
/// stands for everything below it, so `drivers::process` using `reported` while
/// `reported::builder` uses `drivers` is a cycle between `drivers` and `reported` even when no
/// two files import each other.
fn cycles(root: &Path) -> Vec<String> {
    let krate = Crate::load(root);
    let edges = krate.edges();
    let deepest = krate.modules.keys().map(Vec::len).max().unwrap_or(0);
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for depth in 1..=deepest {
        let collapse = |p: &ModPath| p[..p.len().min(depth)].to_vec();
        let mut collapsed: BTreeMap<(ModPath, ModPath), Vec<String>> = BTreeMap::new();
        for ((from, to), example) in &edges {
            let (a, b) = (collapse(from), collapse(to));
            if a != b {
                collapsed.entry((a, b)).or_default().push(format!(
                    "{} ({}) -> {}  via `{example}`",
                    display(from),
                    krate.modules[from].file.display(),
                    display(to)
                ));
            }
        }
        let mut graph = DiGraphMap::<&[String], ()>::new();
        for (a, b) in collapsed.keys() {
            graph.add_edge(a.as_slice(), b.as_slice(), ());
        }
        for component in tarjan_scc(&graph) {
            if component.len() < 2 {
                continue;
            }
            let members: BTreeSet<&[String]> = component.into_iter().collect();
            let names: Vec<String> = members.iter().map(|m| display(m)).collect();
            if !seen.insert(names.clone()) {
                continue;
            }
            let mut text = format!("{}: cycle between {}\n", root.display(), names.join(", "));
            for ((a, b), examples) in &collapsed {
                if members.contains(a.as_slice()) && members.contains(b.as_slice()) {
                    for example in examples {
                        text.push_str(&format!("    {example}\n"));
                    }
                }
            }
            found.push(text);
        }
    }
    found
}

/// This workspace, or the checkout named by `MODULE_GRAPH_WORKSPACE` (to check another
/// worktree with the same build).
fn workspace_root() -> PathBuf {
    if let Some(other) = std::env::var_os("MODULE_GRAPH_WORKSPACE") {
        return PathBuf::from(other);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runtime/ sits in the workspace")
        .to_path_buf()
}

fn crate_roots() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut roots = Vec::new();
    for member in [
        "codegen",
        "generated/types",
        "generated/client",
        "runtime",
        "tests/fuzz",
    ] {
        for file in ["src/lib.rs", "src/main.rs"] {
            let path = root.join(member).join(file);
            if path.exists() {
                roots.push(path);
            }
        }
    }
    // The end-to-end tests' one binary (tests/e2e/main.rs).
    roots.push(root.join("tests/e2e/main.rs"));
    roots
}

#[test]
fn no_module_imports_from_a_module_that_depends_on_it() {
    let roots = crate_roots();
    assert!(roots.len() >= 5, "crate roots found: {roots:?}");
    let found: Vec<String> = roots.iter().flat_map(|r| cycles(r)).collect();
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

/// The checker itself finds what it is meant to find, including the quiet kinds of cycle.
#[test]
fn the_checker_sees_cycles_through_parents_reexports_and_macros() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    // a <-> b through a `use` and a macro argument.
    write(
        "lib.rs",
        "mod a; mod b; mod p; mod q; mod leaf;\n\
         #[cfg(test)] mod tests { use crate::a::*; }",
    );
    write("a.rs", "use crate::b::B; pub struct A;");
    write(
        "b.rs",
        "pub struct B; fn f() { println!(\"{}\", crate::a::A); }",
    );
    // p's child uses an item defined in p, and p uses the child.
    write(
        "p/mod.rs",
        "mod child; pub struct Shared; fn f() -> child::C { child::C }",
    );
    write("p/child.rs", "pub struct C; fn g(_: super::Shared) {}");
    // q re-exports from leaf; leaf's users import through q: no edge to q, no cycle.
    write("q.rs", "pub use crate::leaf::L;");
    write(
        "leaf.rs",
        "pub struct L;\n#[cfg(test)] fn t() { let _ = crate::q::L; }",
    );
    let found = cycles(&dir.path().join("lib.rs")).join("\n");
    assert!(found.contains("cycle between a, b"), "{found}");
    assert!(found.contains("via `crate::a::A`"), "{found}");
    assert!(found.contains("cycle between p, p::child"), "{found}");
    assert!(!found.contains("leaf"), "{found}");
    assert_eq!(found.matches("cycle between").count(), 2, "{found}");

    let through_reexport = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        std::fs::write(through_reexport.path().join(rel), text).unwrap();
    };
    write("lib.rs", "mod x; mod y; pub use x::X;");
    write("x.rs", "pub struct X;");
    write("y.rs", "use crate::X; fn f(_: X) {}");
    assert!(cycles(&through_reexport.path().join("lib.rs")).is_empty());

    // A code generator's `quote!` names the crate it generates for, not its own.
    let generator = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        std::fs::write(generator.path().join(rel), text).unwrap();
    };
    write("lib.rs", "mod emit; mod base;");
    write(
        "emit.rs",
        "fn f() { let _ = quote::quote!(use crate::base::B;); }",
    );
    write("base.rs", "use crate::emit::*; pub struct B;");
    assert!(cycles(&generator.path().join("lib.rs")).is_empty());
}
