//! The `--json` schemas. Each command's JSON output is a
//! `#[derive(Serialize, JsonSchema)]` type; the same type is what the
//! command serialises and what [`long_help`] describes in its `--help`
//! (and man page), field by field with the field's doc comment, so the two
//! cannot drift. [`with_json_schemas`] adds them to the commands.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::Value;

/// `cmd` with each `--json` command's schema at the end of its long help.
pub fn with_json_schemas(cmd: clap::Command) -> clap::Command {
    let one = "one object";
    let sections = [
        ("demo", long_help::<crate::demo::summary::DemoJson>(one)),
        ("list", long_help::<crate::list::ListJson>(one)),
        (
            "stat",
            long_help::<crate::stat::StatJson>("one object; with -I, one per line per interval"),
        ),
        (
            "dmon",
            long_help::<crate::dmon::DmonJson>("one object per line per interval"),
        ),
        ("report", long_help::<crate::report::ReportJson>(one)),
        ("health", long_help::<crate::health::HealthJson>(one)),
        ("bmc", long_help::<crate::bmc::BmcJson>(one)),
        ("simulate", long_help::<crate::simulate::SimulateJson>(one)),
        ("plan", long_help::<crate::plan::PlanJson>(one)),
        ("cpi", long_help::<crate::cpi::CpiOutput>(one)),
        ("ranges", long_help::<crate::ranges::RangesJson>(one)),
        (
            "callgraph",
            long_help::<crate::ranges::GraphJson>(
                "one object; --folded prints `k0;k1 COUNT` lines instead",
            ),
        ),
        (
            "ri",
            long_help::<crate::ri::RiEntryJson>("one object per line per entry"),
        ),
        (
            "events",
            long_help::<Vec<crate::events::EventJson>>("one array"),
        ),
    ];
    let cmd = sections.into_iter().fold(cmd, |cmd, (name, help)| {
        cmd.mut_subcommand(name, |sub| sub.after_long_help(help))
    });
    cmd.mut_subcommand("cc", |cc| {
        cc.mut_subcommand("status", |sub| {
            sub.after_long_help(long_help::<crate::cc::StatusJson>(one))
        })
        .mut_subcommand("establish", |sub| {
            sub.after_long_help(long_help::<crate::cc::EstablishJson>(one))
        })
        .mut_subcommand("rekey", |sub| {
            sub.after_long_help(long_help::<crate::cc::RekeyJson>(one))
        })
    })
}

/// The long-help section describing `T` as the command's JSON output;
/// `shape` says how the objects are printed (e.g. "one object").
pub fn long_help<T: JsonSchema>(shape: &str) -> String {
    // The schema of what is serialised: a field skipped when empty is
    // optional, an `Option` always written is a required nullable one.
    let schema = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>();
    let root = schema.as_value();
    let mut out = format!("JSON output (--json), {shape}:\n");
    let top = Describe {
        defs: root.get("$defs"),
    };
    if let Some(items) = root.get("items") {
        out.push_str(&format!("  [ {} ]\n", top.type_name(items)));
        top.fields(items, 2, &mut out);
    } else {
        top.fields(root, 1, &mut out);
    }
    out
}

struct Describe<'a> {
    defs: Option<&'a Value>,
}

impl<'a> Describe<'a> {
    /// `v` with a `$ref` followed.
    fn resolve(&self, v: &'a Value) -> &'a Value {
        let target = v
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .and_then(|name| self.defs?.get(name));
        target.unwrap_or(v)
    }

    /// A short name of the type of `v`: `integer`, `"a" | "b"`, `[T]`,
    /// `{NAME: T}`, `object`, with `or null` for nullable ones.
    fn type_name(&self, v: &'a Value) -> String {
        let v = self.resolve(v);
        if let Some(values) = v.get("enum").and_then(Value::as_array) {
            let names: Vec<String> = values.iter().map(Value::to_string).collect();
            return names.join(" | ");
        }
        if let Some(c) = v.get("const") {
            return c.to_string();
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = v.get(key).and_then(Value::as_array) {
                let names: Vec<String> = alts.iter().map(|a| self.type_name(a)).collect();
                let all_values = alts.iter().all(|a| self.resolve(a).get("const").is_some());
                return names.join(if all_values { " | " } else { " or " });
            }
        }
        match v.get("type") {
            Some(Value::Array(types)) => types
                .iter()
                .map(|t| self.simple(v, t.as_str().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join(" or "),
            Some(Value::String(t)) => self.simple(v, t),
            _ => "any".into(),
        }
    }

    fn simple(&self, v: &'a Value, t: &str) -> String {
        match t {
            "array" => format!(
                "[{}]",
                v.get("items").map_or("any".into(), |i| self.type_name(i))
            ),
            "object" if v.get("properties").is_none() => match v.get("additionalProperties") {
                Some(ap) if ap.is_object() => format!("{{NAME: {}}}", self.type_name(ap)),
                _ => "object".into(),
            },
            other => other.into(),
        }
    }

    /// The object below `v` (directly, through an array, or a nullable
    /// one), if it has named fields.
    fn nested(&self, v: &'a Value) -> Option<&'a Value> {
        let v = self.resolve(v);
        if v.get("properties").is_some() {
            return Some(v);
        }
        if let Some(items) = v.get("items") {
            return self.nested(items);
        }
        if let Some(values) = v.get("additionalProperties").filter(|a| a.is_object()) {
            return self.nested(values);
        }
        ["anyOf", "oneOf"]
            .iter()
            .filter_map(|k| v.get(*k).and_then(Value::as_array))
            .flatten()
            .find_map(|a| self.nested(a))
    }

    /// One line per field of the object `v`, nested objects indented.
    fn fields(&self, v: &'a Value, depth: usize, out: &mut String) {
        let v = self.resolve(v);
        let Some(props) = v.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required: Vec<&str> = v
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let width = props.keys().map(String::len).max().unwrap_or(0);
        let indent = "  ".repeat(depth);
        for (name, p) in props {
            let mut ty = self.type_name(p);
            if !required.contains(&name.as_str()) {
                // Left out rather than null when it has no value.
                ty = ty.trim_end_matches(" or null").to_string() + ", optional";
            }
            let mut line = format!("{indent}{name:<width$}  {ty}");
            let doc = p
                .get("description")
                .or_else(|| self.resolve(p).get("description"))
                .and_then(Value::as_str);
            if let Some(doc) = doc {
                line += " — ";
                line += &doc.replace('\n', " ");
            }
            out.push_str(&line);
            out.push('\n');
            if let Some(inner) = self.nested(p) {
                self.fields(inner, depth + 1, out);
            }
        }
    }
}
