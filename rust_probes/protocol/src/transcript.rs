//! A session's transcript: the framework calls a probe made, as Rust source with the case's names
//! as variables. The transcript is the reproducer (`harness/targets/rust_reproducer.py` wraps it in
//! a `main`), so a call is spelled once, in the probe, and cannot drift from what the probe ran.
//!
//! A probe spells a call with [`spell!`]: the macro runs an expression over placeholders bound to
//! the probe's values and gives back its result and its source text, each placeholder replaced by
//! the variable the reproducer holds the value in ([`fill`]). The probe then records the statement
//! that expression is part of ([`Transcript::line`]).
//!
//! Invariants: a line is recorded whether or not its call succeeded, so a failed call is the last
//! line of its op; a case name's variable never changes within a program ([`Transcript::var`]); a
//! variable is a Rust identifier that no other name, helper or scaffolding name takes.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The lines one program ran, op by op, and the variable of every case name in them.
#[derive(Debug, Default)]
pub struct Transcript {
    prologue: Vec<String>,
    ops: Vec<Vec<String>>,
    /// By op: the statements that follow the op's failed call (see [`Transcript::after_failure`]).
    after_failure: BTreeMap<usize, Vec<String>>,
    names: BTreeMap<String, String>,
    taken: BTreeSet<String>,
}

/// Rust's keywords (strict and reserved, 2021 edition): no variable takes one.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn",
    "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self",
    "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "abstract", "become",
    "box", "do", "final", "gen", "macro", "override", "priv", "try", "typeof", "unsized", "virtual", "yield", "union",
];

impl Transcript {
    /// An empty transcript whose variables avoid `reserved`: the names the reproducer's own lines
    /// use around the transcript (`main`, `show`, the device, ...).
    pub fn new(reserved: &[&str]) -> Self {
        let taken = reserved.iter().map(|s| s.to_string()).collect();
        Transcript {
            taken,
            ..Default::default()
        }
    }

    /// The lines from here on are the next op's.
    pub fn begin_op(&mut self) {
        self.ops.push(Vec::new());
    }

    /// Records one statement (a line of the prologue before the first op).
    pub fn line(&mut self, statement: impl Into<String>) {
        let statement = statement.into();
        match self.ops.last_mut() {
            Some(op) => op.push(statement),
            None => self.prologue.push(statement),
        }
    }

    /// Records a statement that follows the current op's failed call (its last line) in the
    /// reproducer, which runs that call apart (under `catch_unwind`, or in a closure): what the
    /// probe keeps of the values the call consumed, so that the later ops read them as the probe
    /// does.
    pub fn after_failure(&mut self, statement: impl Into<String>) {
        let op = self.ops.len().saturating_sub(1);
        self.after_failure.entry(op).or_default().push(statement.into());
    }

    /// The variable of the case name `name`, given on its first use and kept after: the name with
    /// every character that is not an ASCII letter, digit or `_` made `_` (a dotted
    /// `bn.running_mean` is `bn_running_mean`), `v_` before a leading digit, and `_` appended
    /// while it is a keyword or taken.
    pub fn var(&mut self, name: &str) -> String {
        if let Some(v) = self.names.get(name) {
            return v.clone();
        }
        let mut ident: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
            .collect();
        if ident.is_empty() || ident.starts_with(|c: char| c.is_ascii_digit()) || ident == "_" {
            ident = format!("v_{ident}");
        }
        ident = self.free(ident);
        self.names.insert(name.to_string(), ident.clone());
        ident
    }

    /// Whether `name` has a variable.
    pub fn has(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// A new variable for something that is not a case name: `base`, else `base2`, `base3`, ...
    pub fn helper(&mut self, base: &str) -> String {
        let mut ident = base.to_string();
        let mut n = 2;
        while self.taken.contains(&ident) || KEYWORDS.contains(&ident.as_str()) {
            ident = format!("{base}{n}");
            n += 1;
        }
        self.taken.insert(ident.clone());
        ident
    }

    fn free(&mut self, mut ident: String) -> String {
        while self.taken.contains(&ident) || KEYWORDS.contains(&ident.as_str()) {
            ident.push('_');
        }
        self.taken.insert(ident.clone());
        ident
    }

    /// The transcript as the protocol's `transcript` field (`PROTOCOL.md`).
    pub fn to_json(&self) -> Value {
        let after_failure: BTreeMap<String, &Vec<String>> = self
            .after_failure
            .iter()
            .map(|(op, lines)| (op.to_string(), lines))
            .collect();
        json!({"prologue": self.prologue, "ops": self.ops, "names": self.names, "after_failure": after_failure})
    }
}

/// `text` with every placeholder of `subs` that stands as a value replaced by its text: an
/// identifier equal to a placeholder, not inside a string literal, not a field or method (after
/// one `.`; after `..` it is a range's end or a struct literal's base, a value), not a path
/// segment (beside `::`), not a macro (before `!`) and not a struct literal's field name (before
/// `:`). A replacement `&s` that is a method's receiver is written `s`, and a negative number
/// `(-2.0)`. The pretty printer's line breaks are spaces, so a statement is one line.
pub fn fill(text: &str, subs: &[(&str, &str)]) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            // A string literal, copied as it is up to its closing quote.
            out.push(c);
            i += 1;
            while i < chars.len() {
                out.push(chars[i]);
                if chars[i] == '\\' && i + 1 < chars.len() {
                    out.push(chars[i + 1]);
                    i += 2;
                    continue;
                }
                i += 1;
                if chars[i - 1] == '"' {
                    break;
                }
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut preceding = chars[..start].iter().rev().filter(|c| !c.is_whitespace());
            let before = preceding.next();
            // `..x` (a range's end, a struct literal's base) is a value, not a field.
            let spread = before == Some(&'.') && preceding.next() == Some(&'.');
            let path = start >= 2 && chars[start - 2..start] == [':', ':'];
            let after = chars[i..].iter().find(|c| !c.is_whitespace());
            // A field, method or path segment, a macro, or a struct literal's field name.
            let member = (before == Some(&'.') && !spread) || path || after == Some(&'!') || after == Some(&':');
            match subs.iter().find(|(p, _)| *p == word) {
                // A `&value` as a method's receiver is the value: auto-ref borrows it again.
                Some((_, var)) if !member && after == Some(&'.') => match var.strip_prefix('&') {
                    Some(value) => out.push_str(value),
                    // `-2.0f32.into()` would negate what `into` gives.
                    None if var.starts_with('-') => out.push_str(&format!("({var})")),
                    None => out.push_str(var),
                },
                Some((_, var)) if !member => out.push_str(var),
                _ => out.push_str(&word),
            }
            continue;
        }
        if c == '\n' {
            // A broken line is one line again: a method chain's `.` follows its receiver directly.
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if chars.get(i) != Some(&'.') {
                out.push(' ');
            }
            continue;
        }
        out.push(c);
        i += 1;
    }
    // The pretty printer indents a broken line; one space is enough inside a statement.
    // The printer also spaces a method chain it breaks (`x? .reshape(..)`): a call follows its
    // receiver directly.
    let out: Vec<char> = out.chars().collect();
    let mut squeezed = String::with_capacity(out.len());
    for (k, &c) in out.iter().enumerate() {
        let method_next =
            out.get(k + 1) == Some(&'.') && out.get(k + 2).is_some_and(|n| n.is_ascii_alphabetic() || *n == '_');
        if c == ' ' && (squeezed.ends_with(' ') || method_next) {
            continue;
        }
        squeezed.push(c);
    }
    squeezed
}

/// A float that has no literal (NaN, the infinities) by its constant's name in `ty`.
fn named_float(x: f64, ty: &str) -> Option<String> {
    if x.is_nan() {
        Some(format!("{ty}::NAN"))
    } else if x.is_infinite() {
        Some(format!("{ty}::{}", if x > 0.0 { "INFINITY" } else { "NEG_INFINITY" }))
    } else {
        None
    }
}

/// An `f32` as a Rust expression of type `f32` that has the same value (`f32::NAN` and the
/// infinities by name).
pub fn f32_lit(x: f32) -> String {
    named_float(x as f64, "f32").unwrap_or_else(|| format!("{x:?}f32"))
}

/// An `f64` as a Rust expression of type `f64`, as [`f32_lit`].
pub fn f64_lit(x: f64) -> String {
    named_float(x, "f64").unwrap_or_else(|| format!("{x:?}"))
}

/// `values` as a `vec![..]` of `f32` literals.
pub fn f32_vec(values: &[f32]) -> String {
    let items: Vec<String> = values.iter().map(|x| f32_lit(*x)).collect();
    format!("vec![{}]", items.join(", "))
}

/// A shape as a tuple literal: `(2, 3)`, `(4,)`, `()`.
pub fn shape_lit(dims: &[usize]) -> String {
    match dims {
        [] => "()".into(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A string as a Rust string literal (`Debug` escapes quotes, backslashes and control characters).
pub fn str_lit(s: &str) -> String {
    format!("{s:?}")
}

/// Runs the expression `$e` over placeholders and gives `(result, text)`.
///
/// `spell!(Error; [t = value => variable, ...] expression)` binds each placeholder `t` to `value`
/// (evaluated after every `variable`), evaluates `expression` in a closure returning
/// `Result<_, Error>` (so its `?` work), and returns that result with the expression's source
/// text, each placeholder replaced by `variable` (a `&str`-like: the reproducer's name for the
/// value, or a literal). The caller records the statement the text is part of.
#[macro_export]
macro_rules! spell {
    ($err:ty; [$($p:ident = $v:expr => $var:expr),* $(,)?] $e:expr) => {{
        let spelled: ::std::vec::Vec<(&str, ::std::string::String)> =
            ::std::vec![$((::core::stringify!($p), ::std::string::String::from($var))),*];
        let subs: ::std::vec::Vec<(&str, &str)> = spelled.iter().map(|(p, v)| (*p, v.as_str())).collect();
        let text = $crate::transcript::fill(::core::stringify!($e), &subs);
        $(#[allow(unused_variables)] let $p = $v;)*
        #[allow(unused_mut, clippy::redundant_closure_call)]
        let mut run = || -> ::core::result::Result<_, $err> { ::core::result::Result::Ok($e) };
        (run(), text)
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_placeholders_as_values_only() {
        let subs = [("t", "w"), ("dt", "dt"), ("i", "2"), ("r", "&s")];
        assert_eq!(fill("r.t(r)", &subs), "s.t(&s)");
        assert_eq!(fill("x.into()", &[("x", "-2.0f32")]), "(-2.0f32).into()");
        assert_eq!(fill("t.t()?", &subs), "w.t()?");
        assert_eq!(
            fill("t.narrow(0, i, 1)?.to_dtype(dt)?", &subs),
            "w.narrow(0, 2, 1)?.to_dtype(dt)?"
        );
        assert_eq!(fill("Tensor::t(&t, \"t\")", &subs), "Tensor::t(&w, \"t\")");
        assert_eq!(fill("t!(t)", &subs), "t!(w)");
        assert_eq!(fill("f(\"a\\\"t\", t)", &subs), "f(\"a\\\"t\", w)");
        assert_eq!(fill("f(a,\n    t)", &subs), "f(a, w)");
        assert_eq!(fill("t.a()?\n    .b()?", &subs), "w.a()?.b()?");
        assert_eq!(fill("t.a()? .b()? + 1 .. 2", &subs), "w.a()?.b()? + 1 .. 2");
        assert_eq!(fill("P { t: t, i: 1 }", &subs), "P { t: w, i: 1 }");
        assert_eq!(fill("P { i: 1, ..t }", &subs), "P { i: 1, ..w }");
        assert_eq!(fill("0..i", &subs), "0..2");
    }

    #[test]
    fn variables_are_identifiers_that_nothing_else_takes() {
        let mut tx = Transcript::new(&["dev", "show"]);
        assert_eq!(tx.var("w"), "w");
        assert_eq!(tx.var("bn.running_mean"), "bn_running_mean");
        assert_eq!(tx.var("bn_running_mean"), "bn_running_mean_");
        assert_eq!(tx.var("dev"), "dev_");
        assert_eq!(tx.var("fn"), "fn_");
        assert_eq!(tx.var("0a"), "v_0a");
        assert_eq!(tx.var("ü\"x"), "__x");
        assert_eq!(tx.var("w"), "w");
        assert_eq!(tx.helper("opt"), "opt");
        assert_eq!(tx.helper("opt"), "opt2");
    }

    #[test]
    fn a_spelled_call_runs_and_gives_its_text() {
        let v = vec![1, 2, 3];
        let (r, text) = spell!(String; [t = &v => "w"] t.iter().sum::<i32>());
        assert_eq!((r, text.as_str()), (Ok(6), "w.iter().sum::<i32>()"));
        let (r, text) = spell!(String; [t = &v => "w"] { if t.len() > 2 { Err("long".to_string())? } 0 });
        assert_eq!(r, Err("long".to_string()));
        assert!(text.contains("w.len()"), "{text}");
    }

    #[test]
    fn literals_read_back_as_the_same_values() {
        assert_eq!(f32_vec(&[1.0, -0.5, f32::NAN]), "vec![1.0f32, -0.5f32, f32::NAN]");
        assert_eq!(
            (f64_lit(f64::NEG_INFINITY), f64_lit(0.1)),
            ("f64::NEG_INFINITY".to_string(), "0.1".to_string())
        );
        assert_eq!(shape_lit(&[2]), "(2,)");
        assert_eq!(shape_lit(&[2, 3]), "(2, 3)");
        assert_eq!(str_lit("a\"b\n"), "\"a\\\"b\\n\"");
    }
}
