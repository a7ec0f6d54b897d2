//! The web configuration's YAML, read with `yaml-rust2` (pure Rust) into
//! a `serde_json::Value` that serde then checks, remembering where each
//! mapping key stood so that a refused key is named by line and column.
//!
//! Why not a serde YAML crate: the maintained ones (`serde_norway`,
//! `serde_yml`, `serde_yaml_ng`) embed a C-to-Rust translation of libyaml,
//! which Debian's lintian refuses as an embedded copy of a library
//! (`embedded-library libyaml`, an error) in the package's `gpupmd`.

use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::{Event, Yaml};

/// Where a problem is: 1-based line and column, and what it is.
#[derive(Debug, PartialEq, Eq)]
pub struct YamlError {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub col: usize,
    /// What is wrong.
    pub reason: String,
}

/// A parsed document: its value, and where each mapping key first
/// appears (by name, whatever its mapping).
#[derive(Debug)]
pub struct Document {
    /// The document as JSON values (scalars typed by YAML's core schema).
    pub value: Value,
    /// The first position of each mapping key.
    pub keys: BTreeMap<String, (usize, usize)>,
}

/// Parses `text`: one document of mappings, sequences and scalars
/// (anchors and aliases are refused: a web configuration needs none).
pub fn parse(text: &str) -> Result<Document, YamlError> {
    let mut builder = Builder::default();
    Parser::new_from_str(text)
        .load(&mut builder, true)
        .map_err(|e| YamlError {
            line: e.marker().line(),
            col: e.marker().col() + 1,
            reason: e.info().to_owned(),
        })?;
    if let Some(e) = builder.error {
        return Err(e);
    }
    if builder.documents > 1 {
        return Err(YamlError {
            line: 1,
            col: 1,
            reason: "more than one YAML document".into(),
        });
    }
    Ok(Document {
        value: builder.root.unwrap_or(Value::Null),
        keys: builder.keys,
    })
}

/// An open collection: a sequence, or a mapping and its pending key.
#[derive(Debug)]
enum Open {
    Sequence(Vec<Value>),
    Mapping(Map<String, Value>, Option<String>),
}

#[derive(Debug, Default)]
struct Builder {
    stack: Vec<Open>,
    root: Option<Value>,
    keys: BTreeMap<String, (usize, usize)>,
    documents: usize,
    error: Option<YamlError>,
}

impl Builder {
    fn fail(&mut self, mark: Marker, reason: impl Into<String>) {
        self.error.get_or_insert(YamlError {
            line: mark.line(),
            col: mark.col() + 1,
            reason: reason.into(),
        });
    }

    /// Places a finished value in the open collection, or as the root.
    fn push(&mut self, value: Value, mark: Marker) {
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Open::Sequence(items)) => items.push(value),
            Some(Open::Mapping(map, pending)) => match pending.take() {
                Some(key) => {
                    if map.contains_key(&key) {
                        self.fail(mark, format!("key {key:?} given twice"));
                    } else {
                        map.insert(key, value);
                    }
                }
                None => match value {
                    Value::String(key) => {
                        self.keys
                            .entry(key.clone())
                            .or_insert((mark.line(), mark.col() + 1));
                        *pending = Some(key);
                    }
                    _ => self.fail(mark, "a mapping key must be a string"),
                },
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::DocumentStart => self.documents += 1,
            Event::Alias(_) => self.fail(mark, "aliases are not supported"),
            Event::Scalar(text, style, anchor, _) => {
                if anchor != 0 {
                    return self.fail(mark, "anchors are not supported");
                }
                let value = if style == TScalarStyle::Plain {
                    plain_scalar(&text)
                } else {
                    Value::String(text)
                };
                self.push(value, mark);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) if anchor != 0 => {
                self.fail(mark, "anchors are not supported");
            }
            Event::SequenceStart(..) => self.stack.push(Open::Sequence(Vec::new())),
            Event::MappingStart(..) => self.stack.push(Open::Mapping(Map::new(), None)),
            Event::SequenceEnd | Event::MappingEnd => {
                let value = match self.stack.pop() {
                    Some(Open::Sequence(items)) => Value::Array(items),
                    Some(Open::Mapping(map, _)) => Value::Object(map),
                    None => return self.fail(mark, "unbalanced collection"),
                };
                self.push(value, mark);
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

/// A plain (unquoted) scalar typed as YAML's core schema types it.
fn plain_scalar(text: &str) -> Value {
    match Yaml::from_str(text) {
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::Number(i.into()),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or(Value::String(r), Value::Number),
        Yaml::Null => Value::Null,
        _ => Value::String(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_typed_as_the_core_schema_types_them() {
        let d = parse("a: true\nb: 12\nc: '12'\nd: ~\ne: x y\nf: [1, \"2\"]\n").unwrap();
        assert_eq!(
            d.value,
            serde_json::json!({"a": true, "b": 12, "c": "12", "d": null, "e": "x y", "f": [1, "2"]})
        );
        assert_eq!(d.keys["e"], (5, 1));
    }

    #[test]
    fn keys_are_found_where_they_stand() {
        let d = parse("tls_server_config:\n  certfile: x\n").unwrap();
        assert_eq!(d.keys["certfile"], (2, 3));
    }

    #[test]
    fn what_a_web_configuration_never_needs_is_refused_with_its_place() {
        for (text, line) in [
            ("a: 1\na: 2\n", 2),
            ("a: &x 1\nb: *x\n", 1),
            ("? [1]\n: 2\n", 1),
            ("a: 1\n---\nb: 2\n", 1),
            ("a: [1\n", 2),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e:?}");
        }
    }
}
