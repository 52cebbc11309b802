//! What a label may hold: the short texts by which notifications are listed, filtered
//! and grouped (a notification's `topic` and `rate_key`), which operators read in tables
//! and on the review page. Visible characters only: no control characters, no format
//! characters (Unicode's category Cf: the bidi controls such as U+202E, which reorder
//! what follows, zero-width spaces and joiners, soft hyphens, tags), no line or paragraph
//! separators, and none of the other characters Unicode has shown as nothing (Hangul
//! fillers, variation selectors), so that what a label looks like is what it is.
//! `invisible` is also what the command line escapes of any value it prints.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use super::FieldError;

/// Default-ignorable code points outside categories Cc and Cf (Unicode's
/// `Default_Ignorable_Code_Point`): shown as nothing, though neither control nor format.
const IGNORABLE: &[(char, char)] = &[
    ('\u{034F}', '\u{034F}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` is a character that does not show as itself: a control or format
/// character, a line or paragraph separator, or a default-ignorable one.
pub fn invisible(c: char) -> bool {
    let category = c.general_category();
    matches!(
        category,
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || IGNORABLE
        .iter()
        .any(|(from, to)| (*from..=*to).contains(&c))
}

/// Refuses, naming `field`, a label that is empty, longer than `max` bytes, or holds a
/// character that is `invisible`.
pub fn check_label(text: &str, field: &str, max: usize) -> Result<(), FieldError> {
    if text.is_empty() || text.len() > max || text.chars().any(invisible) {
        return Err(FieldError::new(
            field,
            format!(
                "must be 1 to {max} bytes of visible characters (no control or format \
                 characters: no bidi controls, zero-width or other invisible ones)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_holds_visible_characters_only() {
        for good in ["payment.succeeded", "支付 成功", "café-é", "shop a/β", "✓"] {
            assert!(check_label(good, "topic", 256).is_ok(), "{good}");
        }
        for bad in [
            "",
            "paid\u{202E}gnp.exe",
            "paid\u{2066}x\u{2069}",
            "paid\u{200B}",
            "pa\u{200D}id",
            "\u{FEFF}paid",
            "pa\u{00AD}id",
            "paid\u{E0041}",
            "paid\u{3164}",
            "paid\u{FE0F}",
            "paid\u{2028}",
            "paid\u{1b}[2J",
            "paid\u{9B}",
            "paid\n",
        ] {
            let e = check_label(bad, "topic", 256).unwrap_err();
            assert_eq!(e.field, "topic", "{bad:?}");
        }
        assert!(check_label(&"a".repeat(257), "rate_key", 256).is_err());
    }
}
