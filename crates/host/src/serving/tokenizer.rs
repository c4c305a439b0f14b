//! The built-in model's tokenizer: one character per token.
//!
//! Why: the built-in GPT is trained on token ids, not text, so it has no vocabulary to
//! speak of; clients of an OpenAI-compatible API send and read text all the same. Token
//! `i` is the `i`-th character of [`ALPHABET`] (space and lowercase first, so the default
//! 64-token model covers `[ a-zA-Z0-9.]`), and a token beyond the alphabet (or any id a
//! model larger than it produces) renders as `<|N|>`, which parses back. `|` is not in the
//! alphabet, so `<|` in text always starts such an escape and [`decode`] then [`encode`]
//! gives back the same tokens, whatever they are.

use thiserror::Error;

/// The characters of tokens `0..ALPHABET.chars().count()`, in order: space, lowercase,
/// uppercase, digits, then punctuation and newline (`|` excluded: it marks escapes).
pub const ALPHABET: &str =
    " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?;:'\"-()\n/&+*=#@%$_[]{}<>~`^\\";

/// Why text does not tokenize.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenizeError {
    /// A character that is not in [`ALPHABET`] (and not part of a `<|N|>` escape).
    #[error("the character {ch:?} at byte {offset} is not in the tokenizer's alphabet")]
    UnknownChar {
        /// The character.
        ch: char,
        /// Its byte offset in the text.
        offset: usize,
    },
    /// `<|` not followed by an integer and `|>`.
    #[error("malformed token escape at byte {offset}: `<|` must start `<|N|>` with N an integer")]
    BadEscape {
        /// Byte offset of the `<|`.
        offset: usize,
    },
}

/// Characters in [`ALPHABET`]: tokens below this render as one character.
pub fn alphabet_len() -> usize {
    ALPHABET.chars().count()
}

/// The token of `ch`, if it is in the alphabet.
pub fn char_token(ch: char) -> Option<i64> {
    ALPHABET.chars().position(|c| c == ch).map(|i| i as i64)
}

/// The text of one token: its character, or `<|N|>` beyond the alphabet (and for negative ids).
pub fn decode_token(token: i64) -> String {
    match usize::try_from(token).ok().and_then(|i| ALPHABET.chars().nth(i)) {
        Some(ch) => ch.to_string(),
        None => format!("<|{token}|>"),
    }
}

/// The text of `tokens` (what [`encode`] turns back into them).
pub fn decode(tokens: &[i64]) -> String {
    tokens.iter().map(|&t| decode_token(t)).collect()
}

/// The tokens of `text`: one per character of [`ALPHABET`], one per `<|N|>` escape.
pub fn encode(text: &str) -> Result<Vec<i64>, TokenizeError> {
    encode_with_offsets(text).map(|tokens| tokens.into_iter().map(|(t, _)| t).collect())
}

/// [`encode`], with each token's byte offset in `text` (for errors that point at it).
pub fn encode_with_offsets(text: &str) -> Result<Vec<(i64, usize)>, TokenizeError> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text.char_indices().peekable();
    while let Some((offset, ch)) = rest.next() {
        if ch == '<' && text[offset + 1..].starts_with('|') {
            let body = &text[offset + 2..];
            let end = body.find("|>").ok_or(TokenizeError::BadEscape { offset })?;
            let token: i64 = body[..end].parse().map_err(|_| TokenizeError::BadEscape { offset })?;
            out.push((token, offset));
            // Skip the escape's remaining characters: `|`, the digits, `|>`.
            let skip_to = offset + 2 + end + 2;
            while rest.peek().is_some_and(|&(o, _)| o < skip_to) {
                rest.next();
            }
            continue;
        }
        match char_token(ch) {
            Some(token) => out.push((token, offset)),
            None => return Err(TokenizeError::UnknownChar { ch, offset }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_starts_with_space_and_lowercase_and_has_no_bar() {
        assert!(alphabet_len() >= 64);
        assert!(ALPHABET.starts_with(" abcdefghijklmnopqrstuvwxyz"));
        assert!(!ALPHABET.contains('|'));
        for class in ["ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", ".,!?\n"] {
            assert!(class.chars().all(|c| ALPHABET.contains(c)), "{class:?}");
        }
        let mut seen = std::collections::HashSet::new();
        assert!(ALPHABET.chars().all(|c| seen.insert(c)), "no character twice");
        assert_eq!(encode(" a").unwrap(), [0, 1]);
    }

    #[test]
    fn every_token_round_trips() {
        let tokens: Vec<i64> = (-3..300).chain([i64::MAX, i64::MIN]).collect();
        let text = decode(&tokens);
        assert_eq!(encode(&text).unwrap(), tokens);
        assert_eq!(decode_token(500), "<|500|>");
        assert_eq!(encode("hi<|70|>!").unwrap(), [8, 9, 70, char_token('!').unwrap()]);
        // A literal `<` next to an escape stays a character.
        let tricky = vec![char_token('<').unwrap(), 120, char_token('>').unwrap(), char_token('<').unwrap()];
        assert_eq!(decode(&tricky), "<<|120|>><");
        assert_eq!(encode(&decode(&tricky)).unwrap(), tricky);
    }

    #[test]
    fn errors_name_the_character_and_its_byte() {
        assert_eq!(encode("ab|c").unwrap_err(), TokenizeError::UnknownChar { ch: '|', offset: 2 });
        let e = encode("héllo").unwrap_err();
        assert_eq!(e, TokenizeError::UnknownChar { ch: 'é', offset: 1 });
        assert!(e.to_string().contains("'é' at byte 1"), "{e}");
        assert_eq!(encode("ok é").unwrap_err(), TokenizeError::UnknownChar { ch: 'é', offset: 3 });
        for bad in ["x<|12", "x<|a|>", "x<||>"] {
            assert_eq!(encode(bad).unwrap_err(), TokenizeError::BadEscape { offset: 1 }, "{bad}");
        }
        let offsets = encode_with_offsets("a<|99|>b").unwrap();
        assert_eq!(offsets, [(1, 0), (99, 1), (2, 7)]);
    }
}
