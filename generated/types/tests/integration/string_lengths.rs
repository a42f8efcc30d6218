//! The length bounds generated on typify's string newtypes: `MAX_LENGTH` is the schema's
//! `maxLength`, and `truncated` cuts to it, counting characters (code points, as JSON Schema
//! does) and never splitting one.

use fleetwire_types::{ApiErrorMessage, BootId, Hostname, StateMessage, VmId, BUNDLE_SCHEMA};

fn schema_bound(definition: &str, keyword: &str) -> usize {
    let bundle: serde_json::Value = serde_json::from_str(BUNDLE_SCHEMA).unwrap();
    bundle["$defs"][definition][keyword]
        .as_u64()
        .unwrap_or_else(|| panic!("{definition} has no {keyword}")) as usize
}

#[test]
fn the_constants_are_the_schemas_bounds() {
    assert_eq!(
        StateMessage::MAX_LENGTH,
        schema_bound("StateMessage", "maxLength")
    );
    assert_eq!(Hostname::MAX_LENGTH, schema_bound("Hostname", "maxLength"));
    assert_eq!(BootId::MAX_LENGTH, schema_bound("BootId", "maxLength"));
    assert_eq!(VmId::MAX_LENGTH, schema_bound("VmId", "maxLength"));
    assert_eq!(VmId::MIN_LENGTH, schema_bound("VmId", "minLength"));
    let bundle: serde_json::Value = serde_json::from_str(BUNDLE_SCHEMA).unwrap();
    let message = &bundle["$defs"]["ApiError"]["properties"]["message"]["maxLength"];
    assert_eq!(
        ApiErrorMessage::MAX_LENGTH as u64,
        message.as_u64().unwrap()
    );
}

#[test]
fn truncated_keeps_at_most_max_length_characters_and_never_splits_one() {
    let max = StateMessage::MAX_LENGTH;
    // One to four bytes per character, and a character that straddles the cut.
    for unit in ["a", "é", "€", "🦀", "aé€🦀"] {
        let long = unit.repeat(max + 3);
        let cut = StateMessage::truncated(&long);
        assert_eq!(cut.chars().count(), max, "{unit}");
        assert!(long.starts_with(cut.as_str()), "{unit}: a prefix");
        // What the truncated value holds is what the type's own check accepts.
        assert_eq!(cut.as_str().parse::<StateMessage>().unwrap(), cut);
    }
}

#[test]
fn truncated_leaves_text_that_fits_as_it_is() {
    for text in ["", "ok", &"🦀".repeat(StateMessage::MAX_LENGTH)] {
        assert_eq!(StateMessage::truncated(text).as_str(), text);
    }
    let long_id = "b".repeat(BootId::MAX_LENGTH + 1);
    assert_eq!(
        BootId::truncated(&long_id).len(),
        BootId::MAX_LENGTH,
        "every generated constructor cuts at its own bound"
    );
}
