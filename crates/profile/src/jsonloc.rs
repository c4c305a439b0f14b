//! Typed JSON parsing whose errors name the field path, not just a line.
//!
//! serde_json reports where it stopped (line and column) but not which field it
//! was in. The files are small, so on an error we rescan the text with a tiny
//! tolerant scanner that records the byte span and path of every value, and
//! pick the innermost value around the parser's position.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::{Position, ProfileError, join_index, join_key};

/// Deepest nesting the scanner follows (serde_json itself stops at 128).
const MAX_DEPTH: usize = 256;

/// Parse `text` (the contents of `file`) into `T`, turning any parser error
/// into a [`ProfileError::Invalid`] that names the field path.
pub(crate) fn parse<T: DeserializeOwned>(file: &Path, text: &str) -> Result<T, ProfileError> {
    // A UTF-8 byte-order mark is legal in files saved by some editors.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(text).map_err(|e| {
        let position = (e.line() > 0).then_some(Position { line: e.line(), column: e.column() });
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let reason = full.strip_suffix(suffix.as_str()).unwrap_or(&full).to_string();
        let path = position.and_then(|p| locate(text, p)).unwrap_or_default();
        ProfileError::Invalid { file: file.to_path_buf(), path, position, reason }
    })
}

/// Path of the innermost value around the parser position `p`.
///
/// serde_json positions point at the next unread byte: just after a scalar it
/// rejected, at the `{`/`[` of a container it rejected without reading, just
/// after a key it rejected (inside the object), or just after the `}` of an
/// object that lacks a field. In every case the innermost value whose span
/// reaches the position is the one at fault.
fn locate(text: &str, p: Position) -> Option<String> {
    let offset = line_start(text, p.line)? + p.column;
    let spans = scan(text);
    spans
        .iter()
        .filter(|s| s.start <= offset && offset <= s.end)
        .max_by_key(|s| s.start)
        .map(|s| s.path.clone())
}

/// Byte offset where 1-based line `line` starts.
fn line_start(text: &str, line: usize) -> Option<usize> {
    if line == 1 {
        return Some(0);
    }
    text.bytes().enumerate().filter(|&(_, b)| b == b'\n').nth(line - 2).map(|(i, _)| i + 1)
}

/// One JSON value: its byte span (end exclusive; `usize::MAX` if never closed)
/// and its path.
#[derive(Debug)]
struct Span {
    start: usize,
    end: usize,
    path: String,
}

/// Record the span and path of every value, as far as the text is well formed.
fn scan(text: &str) -> Vec<Span> {
    let mut s = Scanner { b: text.as_bytes(), i: 0, spans: Vec::new() };
    // Stops at the first malformed byte; the spans so far stay useful.
    let _ = s.value(String::new(), 0);
    s.spans
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    spans: Vec<Span>,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.peek()? == byte).then(|| self.i += 1)
    }

    fn value(&mut self, path: String, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        let start = self.i;
        let slot = self.spans.len();
        self.spans.push(Span { start, end: usize::MAX, path: path.clone() });
        match self.peek()? {
            b'{' => {
                self.i += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                } else {
                    loop {
                        self.ws();
                        let key = self.string()?;
                        self.eat(b':')?;
                        self.value(join_key(&path, &key), depth + 1)?;
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b'}' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    let mut index = 0;
                    loop {
                        self.value(join_index(&path, index), depth + 1)?;
                        index += 1;
                        self.ws();
                        match self.peek()? {
                            b',' => self.i += 1,
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
            }
            b'"' => {
                self.string()?;
            }
            _ => {
                let from = self.i;
                while let Some(b) = self.peek() {
                    if matches!(b, b',' | b']' | b'}' | b':' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.i += 1;
                }
                if self.i == from {
                    return None;
                }
            }
        }
        self.spans[slot].end = self.i;
        Some(())
    }

    /// A string literal, decoded well enough to name a key.
    fn string(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        let from = self.i;
        self.i += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
        let raw = std::str::from_utf8(self.b.get(from..self.i)?).ok()?;
        Some(serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw.to_string()))
    }
}

/// Deserialize a map, rejecting keys that appear twice (serde_json would keep
/// the last silently).
pub(crate) fn unique_map<'de, D, K, V>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord + fmt::Display,
    V: Deserialize<'de>,
{
    struct UniqueMap<K, V>(PhantomData<(K, V)>);

    impl<'de, K, V> Visitor<'de> for UniqueMap<K, V>
    where
        K: Deserialize<'de> + Ord + fmt::Display,
        V: Deserialize<'de>,
    {
        type Value = BTreeMap<K, V>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<K>()? {
                if out.contains_key(&key) {
                    return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }

    deserializer.deserialize_map(UniqueMap(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[expect(dead_code, reason = "the fields exist to be deserialized; the tests only check the errors")]
    struct Row {
        dp: u32,
        pp: u32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        #[serde(deserialize_with = "unique_map")]
        models: BTreeMap<String, Vec<Row>>,
    }

    fn err(text: &str) -> (String, String) {
        match parse::<Doc>(Path::new("f.json"), text) {
            Err(ProfileError::Invalid { path, reason, .. }) => (path, reason),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn wrong_scalar_type_names_the_field() {
        let (path, reason) = err(r#"{"models": {"a.b": [{"dp": 1, "pp": 2}, {"dp": "x", "pp": 1}]}}"#);
        assert_eq!(path, r#"models["a.b"][1].dp"#);
        assert!(reason.contains("invalid type"), "{reason}");
    }

    #[test]
    fn negative_count_names_the_field() {
        let (path, _) = err("{\"models\": {\"m\": [\n  {\"dp\": 1,\n   \"pp\": -2}]}}");
        assert_eq!(path, "models.m[0].pp");
    }

    #[test]
    fn missing_field_names_the_object_not_its_last_member() {
        let (path, reason) = err(r#"{"models": {"m": [{"dp": 1}]}}"#);
        assert_eq!(path, "models.m[0]");
        assert!(reason.contains("missing field `pp`"), "{reason}");
    }

    #[test]
    fn unknown_field_names_the_object() {
        let (path, reason) = err(r#"{"models": {"m": [{"dp": 1, "pq": 1, "pp": 2}]}}"#);
        assert_eq!(path, "models.m[0]");
        assert!(reason.contains("unknown field `pq`"), "{reason}");
    }

    #[test]
    fn container_of_wrong_kind_names_itself() {
        let (path, _) = err(r#"{"models": {"m": {"dp": 1}}}"#);
        assert_eq!(path, "models.m");
    }

    #[test]
    fn duplicate_key_names_the_map() {
        let (path, reason) = err(r#"{"models": {"m": [], "m": []}}"#);
        assert_eq!(path, "models");
        assert!(reason.contains("duplicate key `m`"), "{reason}");
    }

    #[test]
    fn syntax_error_names_the_enclosing_value() {
        let (path, _) = err("{\"models\": {\"m\": [{\"dp\": 1, \"pp\": 2},]}}");
        assert!(path.starts_with("models.m"), "{path}");
        let (_, reason) = err("");
        assert!(reason.contains("EOF"), "{reason}");
    }

    #[test]
    fn byte_order_mark_is_accepted() {
        let doc: Doc = parse(Path::new("f.json"), "\u{feff}{\"models\": {}}").unwrap();
        assert!(doc.models.is_empty());
    }
}
