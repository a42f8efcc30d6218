//! The length bounds of the generated string newtypes. fleetwire-codegen reads each bound off
//! typify's own check and invokes [`length_bounds`] with the numbers, so the constants move with
//! the schema; how to cut text to a bound is written once, here.

/// Gives a generated string newtype its schema's bounds: `MIN_LENGTH`, `MAX_LENGTH` and, when
/// the length is all the type checks, `truncated`, which cuts text to `MAX_LENGTH`. Exported
/// (as `fleetwire_types::toolkit::length_bounds`) for the code the toolkit generates in other
/// crates (docs/codegen.md).
#[doc(hidden)]
#[macro_export]
macro_rules! __length_bounds {
    (
        $name:ident $(, min = $min:literal)? $(, max = $max:literal)? $(, fn $truncated:ident)?
    ) => {
        impl $name {
            $(
                /// The schema's `minLength`: at least this many characters (code points).
                pub const MIN_LENGTH: usize = $min;
            )?
            $(
                /// The schema's `maxLength`: at most this many characters (code points, as JSON
                /// Schema counts them).
                pub const MAX_LENGTH: usize = $max;
            )?
            $(
                /// `text` cut to its first [`Self::MAX_LENGTH`] characters (never inside one):
                /// the length is all the schema checks.
                pub fn $truncated(text: &str) -> Self {
                    let cut = $crate::toolkit::cut(text, Self::MAX_LENGTH);
                    Self(cut.to_string())
                }
            )?
        }
    };
}
pub use crate::__length_bounds as length_bounds;

/// `text` up to its `max`-th character (Unicode code point), never cut inside one.
pub fn cut(text: &str, max: usize) -> &str {
    let end = text
        .char_indices()
        .nth(max)
        .map_or(text.len(), |(at, _)| at);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cuts_after_max_characters_whatever_their_width() {
        assert_eq!(cut("aé€🦀x", 4), "aé€🦀");
        assert_eq!(cut("🦀🦀", 1), "🦀");
        assert_eq!(cut("short", 9), "short");
        assert_eq!(cut("", 0), "");
        assert_eq!(cut("ab", 0), "");
    }
}
