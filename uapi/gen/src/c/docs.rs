//! The Rust doc comments of the crate's constants, read from its source
//! with `syn`, so that every `#define` of the header carries the same
//! documentation as the item it comes from; and the rewriting of rustdoc
//! links (`[`path`]`) into the names the header gives those items.
//!
//! Constants are keyed by their path inside the crate without `crate::`:
//! `regs::TRIG_TARGET`, `regs::trig_cmd::FLUSH_ULC`, `ABI_MAJOR`. The ioctl
//! numbers, defined inside `ioctl_numbers!`/`tenant_ioctls!`/… invocations,
//! are found in the macros' token streams (`/// doc` then `NAME = …;`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::{Attribute, Expr, ExprLit, Item, Lit, Meta};

/// Modules kept in per-unit files that the parent re-exports whole
/// (`pub use self::unit::*`): their constants' paths omit the unit.
const SPLIT_MODULES: [&str; 1] = ["regs"];

/// The `.rs` files directly in `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("uapi source folder")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

/// Doc comments by constant path, and which of them the header used.
#[derive(Default)]
pub struct Docs {
    by_key: BTreeMap<String, String>,
    used: BTreeSet<String>,
}

impl Docs {
    /// Reads every `.rs` file of `src` (one module per file, `lib.rs` the
    /// root), and those of the modules in [`SPLIT_MODULES`] under the
    /// parent's prefix.
    pub fn load(src: &Path) -> Docs {
        let mut docs = Docs::default();
        for path in rust_files(src) {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("file name");
            let prefix = if stem == "lib" { "" } else { stem };
            docs.load_file(prefix, &path);
        }
        for module in SPLIT_MODULES {
            for path in rust_files(&src.join(module)) {
                docs.load_file(module, &path);
            }
        }
        docs
    }

    fn load_file(&mut self, prefix: &str, path: &Path) {
        let text = std::fs::read_to_string(path).expect("read uapi source");
        let file = syn::parse_file(&text).expect("uapi source parses");
        self.items(prefix, &file.items);
    }

    fn items(&mut self, prefix: &str, items: &[Item]) {
        let key = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}::{name}")
            }
        };
        for item in items {
            match item {
                Item::Const(c) if matches!(c.vis, syn::Visibility::Public(_)) => {
                    self.insert(key(&c.ident.to_string()), &c.attrs)
                }
                Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        self.items(&key(&m.ident.to_string()), inner);
                    }
                }
                // Registers carry their documentation in the map's table
                // (`gpupm_uapi::map`), which the header reads directly.
                Item::Macro(m) if m.mac.path.is_ident("register_block") => {}
                // Invocations only: a `macro_rules!` body is a template.
                Item::Macro(m) if m.ident.is_none() => {
                    for (name, doc) in macro_entries(m.mac.tokens.clone()) {
                        self.by_key.insert(key(&name), doc);
                    }
                }
                _ => {}
            }
        }
    }

    fn insert(&mut self, key: String, attrs: &[Attribute]) {
        let doc = doc_text(attrs);
        if !doc.is_empty() {
            self.by_key.insert(key, doc);
        }
    }

    /// The doc comment of constant `key`, marked as used.
    pub fn take(&mut self, key: &str) -> Option<String> {
        let doc = self.by_key.get(key).cloned()?;
        self.used.insert(key.to_string());
        Some(doc)
    }

    /// Documented constants the header never used.
    pub fn unused(&self) -> Vec<String> {
        self.by_key
            .keys()
            .filter(|k| !self.used.contains(*k))
            .cloned()
            .collect()
    }
}

/// The text of the `#[doc]` attributes, one line each, the single space
/// after `///` removed.
fn doc_text(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .map(|l| l.strip_prefix(' ').unwrap_or(&l).trim_end().to_string())
        .collect();
    lines.join("\n").trim().to_string()
}

/// `(NAME, doc)` of every `/// doc … NAME = …;` entry of a macro body.
fn macro_entries(tokens: TokenStream) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut attrs: Vec<Attribute> = Vec::new();
    let mut named = false;
    let mut tokens = tokens.into_iter().peekable();
    while let Some(tt) = tokens.next() {
        match tt {
            TokenTree::Punct(p) if p.as_char() == '#' => {
                if let Some(TokenTree::Group(g)) = tokens.next() {
                    let attr: syn::Result<Vec<Attribute>> =
                        syn::parse::Parser::parse2(Attribute::parse_outer, quote_attr(g.stream()));
                    attrs.extend(attr.unwrap_or_default());
                }
            }
            TokenTree::Ident(name) if !named => {
                named = true;
                let doc = doc_text(&attrs);
                if !doc.is_empty() {
                    out.push((name.to_string(), doc));
                }
                attrs.clear();
            }
            TokenTree::Punct(p) if p.as_char() == ';' => {
                named = false;
                attrs.clear();
            }
            _ => {}
        }
    }
    out
}

/// `#[inner]` as tokens, for the attribute parser.
fn quote_attr(inner: TokenStream) -> TokenStream {
    let mut ts = TokenStream::new();
    ts.extend([TokenTree::Punct(proc_macro2::Punct::new(
        '#',
        proc_macro2::Spacing::Alone,
    ))]);
    ts.extend([TokenTree::Group(proc_macro2::Group::new(
        proc_macro2::Delimiter::Bracket,
        inner,
    ))]);
    ts
}

/// What rustdoc links name in the header: constants by their path, modules
/// of constants by the prefix their members share, structs by their tag.
#[derive(Default)]
pub struct Names {
    items: HashMap<String, String>,
}

impl Names {
    /// Records that the Rust item at `path` is `c` in the header.
    pub fn add(&mut self, path: &str, c: &str) {
        self.items.insert(path.to_string(), c.to_string());
    }

    /// The header's name for a link to `link` written in module `module`
    /// (a path relative to that module or to the crate, or a unique
    /// suffix of one), if the header has the item.
    fn resolve(&self, module: &str, link: &str) -> Option<String> {
        let (link, mut scope) = match link.strip_prefix("crate::") {
            Some(rooted) => (rooted, None),
            None => (link, Some(module)),
        };
        while let Some(m) = scope.filter(|m| !m.is_empty()) {
            if let Some(c) = self.items.get(&format!("{m}::{link}")) {
                return Some(c.clone());
            }
            scope = m.rsplit_once("::").map(|(outer, _)| outer);
        }
        if let Some(c) = self.items.get(link) {
            return Some(c.clone());
        }
        let suffix = format!("::{link}");
        let mut found: Vec<&String> = self
            .items
            .iter()
            .filter(|(k, _)| k.ends_with(&suffix))
            .map(|(_, v)| v)
            .collect();
        found.sort();
        found.dedup();
        if found.len() == 1 {
            return Some(found[0].clone());
        }
        // `Struct::field`: the struct's tag and the field.
        let (owner, field) = link.rsplit_once("::")?;
        let owner = self.resolve(module, owner)?;
        owner
            .strip_prefix("struct ")
            .map(|tag| format!("{tag}.{field}"))
    }

    /// `text`, written in module `module`, with every rustdoc link
    /// `[`path`]` replaced by the header's name for it (the last path
    /// segment when the header has none).
    pub fn rewrite_in(&self, module: &str, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("[`") {
            let Some(len) = rest[start + 2..].find("`]") else {
                break;
            };
            let link = &rest[start + 2..start + 2 + len];
            out.push_str(&rest[..start]);
            let name = self
                .resolve(module, link)
                .unwrap_or_else(|| link.rsplit("::").next().unwrap_or(link).to_string());
            out.push_str(&name);
            rest = &rest[start + 2 + len + 2..];
        }
        out.push_str(rest);
        out
    }
}

/// `doc` as a C block comment (`/** … */`), one ` * ` line per line.
pub fn c_comment(doc: &str) -> String {
    let doc = doc.replace("*/", "* /");
    let lines: Vec<&str> = doc.lines().collect();
    if lines.len() == 1 {
        return format!("/** {} */", lines[0]);
    }
    let mut out = String::from("/**\n");
    for l in lines {
        if l.is_empty() {
            out.push_str(" *\n");
        } else {
            out.push_str(&format!(" * {l}\n"));
        }
    }
    out.push_str(" */");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macro_entries_pair_docs_with_names() {
        let ts: TokenStream = "/// Read it.\n/// Twice.\nFOO = read_write(0x00, Foo);\nBAR = write(0x01, Bar);\n/// Baz.\nBAZ = write(0x02, Baz);"
            .parse()
            .unwrap();
        assert_eq!(
            macro_entries(ts),
            vec![
                ("FOO".to_string(), "Read it.\nTwice.".to_string()),
                ("BAZ".to_string(), "Baz.".to_string())
            ]
        );
    }
}
