//! Every value of a generated string enum, as constants a program can match and iterate.
//!
//! typify turns a schema `enum` of strings into a Rust enum with `Display` and `FromStr`, but
//! gives no list of the values and no `const` spelling of each. Code that must know every value
//! (the runtimes a build drives, listed in an error message) or match a wire string against one
//! in a `const` pattern would otherwise re-type the strings. The values are read off typify's
//! own `Display` impl, so they are exactly what the type reads and writes.

use std::collections::BTreeMap;

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use crate::typify_impls::method_bodies;

/// The string enums of a typify output: type name → (variant, value) in schema order.
pub fn find(file: &syn::File) -> BTreeMap<String, Vec<(String, String)>> {
    method_bodies(file, "Display", "fmt")
        .filter_map(|(name, body)| Some((name, unit_arms(body)?)))
        .collect()
}

/// `match *self { Self::A => f.write_str("a"), .. }`: every arm a unit variant written as a
/// literal, or `None` (a newtype or struct enum, or another shape of `Display`).
fn unit_arms(block: &syn::Block) -> Option<Vec<(String, String)>> {
    let [syn::Stmt::Expr(syn::Expr::Match(m), None)] = block.stmts.as_slice() else {
        return None;
    };
    let mut arms = Vec::new();
    for arm in &m.arms {
        let syn::Pat::Path(pat) = &arm.pat else {
            return None;
        };
        let variant = pat.path.segments.last()?.ident.to_string();
        let syn::Expr::MethodCall(call) = arm.body.as_ref() else {
            return None;
        };
        let [syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(value),
            ..
        })] = call.args.iter().collect::<Vec<_>>().as_slice()
        else {
            return None;
        };
        if call.method != "write_str" {
            return None;
        }
        arms.push((variant, value.value()));
    }
    (!arms.is_empty()).then_some(arms)
}

/// `ALL` and `as_str` for each string enum.
pub fn impls(enums: &BTreeMap<String, Vec<(String, String)>>) -> TokenStream {
    enums
        .iter()
        .map(|(name, arms)| {
            let ty = format_ident!("{name}");
            let variants: Vec<_> = arms.iter().map(|(v, _)| format_ident!("{v}")).collect();
            let values = arms.iter().map(|(_, value)| value);
            let count = Literal::usize_unsuffixed(arms.len());
            quote! {
                impl #ty {
                    /// Every value, in the schema's order.
                    pub const ALL: [#ty; #count] = [#(#ty::#variants),*];
                    /// The value as the schema spells it.
                    pub const fn as_str(&self) -> &'static str { match self { #(#ty::#variants => #values,)* } }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_values_off_typifys_display_and_skips_other_enums() {
        let file: syn::File = syn::parse_str(
            r#"
            impl ::std::fmt::Display for Color {
                fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                    match *self {
                        Self::Red => f.write_str("red"),
                        Self::DarkBlue => f.write_str("dark-blue"),
                    }
                }
            }
            impl ::std::fmt::Display for Either {
                fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                    match self {
                        Self::Text(x) => x.fmt(f),
                    }
                }
            }
            "#,
        )
        .unwrap();
        let found = find(&file);
        assert_eq!(
            found["Color"],
            vec![
                ("Red".to_string(), "red".to_string()),
                ("DarkBlue".to_string(), "dark-blue".to_string())
            ]
        );
        assert!(!found.contains_key("Either"));
        let code = prettyplease::unparse(&syn::parse2(impls(&found)).unwrap());
        assert!(
            code.contains("pub const ALL: [Color; 2] = [Color::Red, Color::DarkBlue];"),
            "{code}"
        );
        assert!(code.contains("Color::DarkBlue => \"dark-blue\","), "{code}");
    }
}
