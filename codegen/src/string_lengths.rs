//! The length bounds of typify's constrained string newtypes, as constants on each type, and a
//! truncating constructor where the length is its only constraint.
//!
//! typify checks a string's `minLength` and `maxLength` in the newtype's `FromStr` (counting
//! characters, i.e. code points, as JSON Schema does) but names the bounds nowhere a program can
//! use them. Code that clips text to fit a schema field (a message, a host name) uses
//! `MAX_LENGTH` or `truncated` instead of re-typing the number, so a schema edit moves it too.
//! The bounds are read off typify's own checks, so they are exactly what the type enforces;
//! the generated code passes them to `fleetwire-types`' `length_bounds!` macro, which writes
//! the constants and the constructor (how to cut text is hand-written there, once).

use std::collections::BTreeMap;

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use crate::typify_impls::method_bodies;

/// The length bounds of one generated string newtype.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StringLengths {
    pub min: Option<usize>,
    pub max: Option<usize>,
    /// `FromStr` checks something besides the length (a pattern): a clipped text may still be
    /// refused, so there is no truncating constructor.
    pub other_checks: bool,
}

/// The bounded string newtypes of a typify output, by type name.
pub fn find(file: &syn::File) -> BTreeMap<String, StringLengths> {
    let mut found = BTreeMap::new();
    for (name, body) in method_bodies(file, "FromStr", "from_str") {
        let mut lengths = StringLengths::default();
        let last = body.stmts.len().saturating_sub(1);
        for (index, stmt) in body.stmts.iter().enumerate() {
            match length_check(stmt) {
                Some((syn::BinOp::Gt(_), n)) => lengths.max = Some(n),
                Some((syn::BinOp::Lt(_), n)) => lengths.min = Some(n),
                // The closing `Ok(Self(value.to_string()))`.
                _ if index == last => {}
                _ => lengths.other_checks = true,
            }
        }
        if lengths.min.is_some() || lengths.max.is_some() {
            found.insert(name, lengths);
        }
    }
    found
}

/// `if value.chars().count() > N { .. }` (or `<`): the comparison and `N`.
fn length_check(stmt: &syn::Stmt) -> Option<(syn::BinOp, usize)> {
    let syn::Stmt::Expr(syn::Expr::If(check), _) = stmt else {
        return None;
    };
    let syn::Expr::Binary(cmp) = check.cond.as_ref() else {
        return None;
    };
    let syn::Expr::MethodCall(count) = cmp.left.as_ref() else {
        return None;
    };
    let syn::Expr::MethodCall(chars) = count.receiver.as_ref() else {
        return None;
    };
    if count.method != "count" || chars.method != "chars" {
        return None;
    }
    let syn::Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Int(n),
        ..
    }) = cmp.right.as_ref()
    else {
        return None;
    };
    let n = n.base10_parse().ok()?;
    matches!(cmp.op, syn::BinOp::Gt(_) | syn::BinOp::Lt(_)).then_some((cmp.op, n))
}

/// One invocation of `macro_path` (the `length_bounds` macro of `fleetwire-types`, which writes
/// the constants and the constructor) per bounded string newtype: its constants (and, when its
/// length is all it checks, `truncated`).
pub fn impls(found: &BTreeMap<String, StringLengths>, macro_path: &syn::Path) -> TokenStream {
    let mut out = TokenStream::new();
    for (name, lengths) in found {
        let ty = format_ident!("{name}");
        let min = lengths.min.map(|min| {
            let min = Literal::usize_unsuffixed(min);
            quote!(, min = #min)
        });
        let max = lengths.max.map(|max| {
            let max = Literal::usize_unsuffixed(max);
            quote!(, max = #max)
        });
        let truncated = (lengths.max.is_some() && lengths.min.is_none() && !lengths.other_checks)
            .then(|| quote!(, fn truncated));
        out.extend(quote!(#macro_path!(#ty #min #max #truncated);));
    }
    out
}
