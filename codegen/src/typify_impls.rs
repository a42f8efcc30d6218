//! Finding the trait impls typify writes for each generated type, which is where it states what
//! a type checks (`FromStr`) and how it spells its values (`Display`).

/// For every `impl <trait_name> for <Type>` of `file` that has a method `method`: the type's
/// name and the method's body.
pub fn method_bodies<'a>(
    file: &'a syn::File,
    trait_name: &'a str,
    method: &'a str,
) -> impl Iterator<Item = (String, &'a syn::Block)> + 'a {
    file.items.iter().filter_map(move |item| {
        let syn::Item::Impl(imp) = item else {
            return None;
        };
        let (path, _) = imp.trait_.as_ref()?;
        if path.segments.last()?.ident != trait_name {
            return None;
        }
        let syn::Type::Path(self_ty) = imp.self_ty.as_ref() else {
            return None;
        };
        let name = self_ty.path.get_ident()?.to_string();
        imp.items.iter().find_map(|i| match i {
            syn::ImplItem::Fn(f) if f.sig.ident == method => Some((name.clone(), &f.block)),
            _ => None,
        })
    })
}
