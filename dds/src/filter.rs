//! Content filters: which samples a reader queues (see
//! [`crate::DomainParticipant::create_reader_filtered`] and
//! [`crate::DomainParticipant::create_reader_where`]).
//!
//! An expression is a small subset of DDS's filter grammar over a serde type's
//! fields: comparisons `field op literal` (`=`, `<>` or `!=`, `<`, `<=`, `>`, `>=`)
//! joined by `AND`, `OR`, `NOT` and parentheses. A field is a path of names
//! (`pos.x`) through structs; a literal is a number, a quoted string (`'red'`) or
//! `true`/`false`. Each field is checked against the type's traced layout when the
//! reader is made: a missing field, or a literal of the wrong kind, is an error
//! then, not a sample silently dropped later.
//!
//! ```no_run
//! # fn f(p: &spindle_dds::DomainParticipant) -> Result<(), spindle_dds::DdsError> {
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Reading { sensor: u32, celsius: f32, room: String }
//! let t = p.topic::<Reading>("readings", spindle_dds::Qos::ordered())?;
//! // Only hot readings outside the attic reach this reader.
//! let hot = p.create_reader_where(&t, spindle_dds::Qos::ordered(), "celsius > 30 AND NOT room = 'attic'")?;
//! // A field the type lacks is an error here, not a sample dropped later.
//! assert!(p.create_reader_where(&t, spindle_dds::Qos::ordered(), "kelvin > 300").is_err());
//! # Ok(()) }
//! ```

use crate::error::FilterError;
use crate::queue::FilterFn;
use crate::sample::Codec;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use serde_reflection::{ContainerFormat, Format, Registry, Samples, Tracer, TracerConfig};

/// A filter that decodes each sample's payload and asks `f`. A payload that does
/// not decode passes (the reader then rejects it, and says why).
pub(crate) fn by_closure<T: 'static>(codec: &Codec<T>, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> FilterFn {
    let decode = codec.decode;
    Box::new(move |payload: &[u8]| decode(payload).map_or(true, |t| f(&t)))
}

/// A parsed, checked filter expression (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expr(Node);

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Or(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Cmp(Vec<String>, Op, Lit),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Num(f64),
    Str(String),
    Bool(bool),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Num(f64),
    Str(String),
    Op(Op),
    Open,
    Close,
}

/// The longest expression accepted.
const MAX_EXPR: usize = 4096;
/// The deepest nesting accepted.
const MAX_DEPTH: usize = 32;

fn tokens(text: &str) -> Result<Vec<Tok>, FilterError> {
    if text.len() > MAX_EXPR {
        return Err(FilterError::TooLong { len: text.len(), max: MAX_EXPR });
    }
    let cs: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        let two: String = cs[i..cs.len().min(i + 2)].iter().collect();
        if c.is_whitespace() {
            i += 1;
        } else if c == '(' || c == ')' {
            out.push(if c == '(' { Tok::Open } else { Tok::Close });
            i += 1;
        } else if let Some((op, n)) = match two.as_str() {
            "<=" => Some((Op::Le, 2)),
            ">=" => Some((Op::Ge, 2)),
            "<>" | "!=" => Some((Op::Ne, 2)),
            "==" => Some((Op::Eq, 2)),
            _ => match c {
                '=' => Some((Op::Eq, 1)),
                '<' => Some((Op::Lt, 1)),
                '>' => Some((Op::Gt, 1)),
                _ => None,
            },
        } {
            out.push(Tok::Op(op));
            i += n;
        } else if c == '\'' || c == '"' {
            let end = cs[i + 1..].iter().position(|&x| x == c).ok_or(FilterError::UnclosedString)?;
            out.push(Tok::Str(cs[i + 1..i + 1 + end].iter().collect()));
            i += end + 2;
        } else if c.is_ascii_digit() || (c == '-' && cs.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let start = i;
            i += 1;
            while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '.' || cs[i] == '_') {
                i += 1;
            }
            let s: String = cs[start..i].iter().collect();
            let n = s.parse().map_err(|_| FilterError::NotANumber(s.clone()))?;
            out.push(Tok::Num(n));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_' || cs[i] == '.') {
                i += 1;
            }
            out.push(Tok::Word(cs[start..i].iter().collect()));
        } else {
            return Err(FilterError::Unexpected { found: c, at: i });
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn keyword(&self, k: &str) -> bool {
        matches!(self.toks.get(self.at), Some(Tok::Word(w)) if w.eq_ignore_ascii_case(k))
    }

    fn or(&mut self, depth: usize) -> Result<Node, FilterError> {
        if depth > MAX_DEPTH {
            return Err(FilterError::TooDeep { max: MAX_DEPTH });
        }
        let mut left = self.and(depth)?;
        while self.keyword("or") {
            self.at += 1;
            left = Node::Or(Box::new(left), Box::new(self.and(depth)?));
        }
        Ok(left)
    }

    fn and(&mut self, depth: usize) -> Result<Node, FilterError> {
        let mut left = self.not(depth)?;
        while self.keyword("and") {
            self.at += 1;
            left = Node::And(Box::new(left), Box::new(self.not(depth)?));
        }
        Ok(left)
    }

    fn not(&mut self, depth: usize) -> Result<Node, FilterError> {
        if self.keyword("not") {
            self.at += 1;
            return Ok(Node::Not(Box::new(self.not(depth + 1)?)));
        }
        match self.toks.get(self.at).cloned() {
            Some(Tok::Open) => {
                self.at += 1;
                let inner = self.or(depth + 1)?;
                if self.toks.get(self.at) != Some(&Tok::Close) {
                    return Err(FilterError::UnclosedParen);
                }
                self.at += 1;
                Ok(inner)
            }
            Some(Tok::Word(w)) => {
                let path: Vec<String> = w.split('.').map(str::to_string).collect();
                if path.iter().any(String::is_empty) {
                    return Err(FilterError::NotAPath(w));
                }
                let Some(Tok::Op(op)) = self.toks.get(self.at + 1).cloned() else {
                    return Err(FilterError::NoOperator(w));
                };
                let lit = match self.toks.get(self.at + 2).cloned() {
                    Some(Tok::Num(n)) => Lit::Num(n),
                    Some(Tok::Str(s)) => Lit::Str(s),
                    Some(Tok::Word(b)) if b.eq_ignore_ascii_case("true") => Lit::Bool(true),
                    Some(Tok::Word(b)) if b.eq_ignore_ascii_case("false") => Lit::Bool(false),
                    _ => return Err(FilterError::NoLiteral(w)),
                };
                self.at += 3;
                Ok(Node::Cmp(path, op, lit))
            }
            _ => Err(FilterError::NoComparison),
        }
    }
}

/// What a field's layout holds, for checking a literal against it.
#[derive(Debug, PartialEq)]
enum Kind {
    Num,
    Str,
    Bool,
}

/// The kind of the leaf at `path` in `format`, or why there is none.
fn kind_at<'a>(registry: &'a Registry, mut format: &'a Format, path: &[String]) -> Result<Kind, FilterError> {
    for (i, name) in path.iter().enumerate() {
        let fields = match format {
            Format::TypeName(t) => match registry.get(t) {
                Some(ContainerFormat::Struct(fields)) => fields,
                Some(ContainerFormat::NewTypeStruct(inner)) if i == 0 => {
                    return kind_at(registry, inner, path);
                }
                _ => return Err(FilterError::NotAStruct { path: path[..i].join("."), field: name.clone() }),
            },
            _ => return Err(FilterError::NotAStruct { path: path[..i].join("."), field: name.clone() }),
        };
        match fields.iter().find(|f| f.name == *name) {
            Some(f) => format = &f.value,
            None => {
                let fields = fields.iter().map(|f| f.name.clone()).collect();
                return Err(FilterError::NoSuchField { path: path[..=i].join("."), fields });
            }
        }
    }
    match format {
        Format::Bool => Ok(Kind::Bool),
        Format::Str | Format::Char => Ok(Kind::Str),
        Format::I8
        | Format::I16
        | Format::I32
        | Format::I64
        | Format::I128
        | Format::U8
        | Format::U16
        | Format::U32
        | Format::U64
        | Format::U128
        | Format::F32
        | Format::F64 => Ok(Kind::Num),
        _ => Err(FilterError::NotComparable(path.join("."))),
    }
}

fn check(registry: &Registry, root: &Format, n: &Node) -> Result<(), FilterError> {
    match n {
        Node::Or(a, b) | Node::And(a, b) => check(registry, root, a).and_then(|_| check(registry, root, b)),
        Node::Not(a) => check(registry, root, a),
        Node::Cmp(path, op, lit) => {
            let kind = kind_at(registry, root, path)?;
            let ok = matches!(
                (&kind, lit),
                (Kind::Num, Lit::Num(_)) | (Kind::Str, Lit::Str(_)) | (Kind::Bool, Lit::Bool(_))
            );
            if !ok {
                return Err(FilterError::WrongLiteral(path.join(".")));
            }
            if kind == Kind::Bool && !matches!(op, Op::Eq | Op::Ne) {
                return Err(FilterError::BoolOrder(path.join(".")));
            }
            Ok(())
        }
    }
}

fn eval(v: &Value, n: &Node) -> bool {
    match n {
        Node::Or(a, b) => eval(v, a) || eval(v, b),
        Node::And(a, b) => eval(v, a) && eval(v, b),
        Node::Not(a) => !eval(v, a),
        Node::Cmp(path, op, lit) => {
            let mut at = v;
            for p in path {
                match at.get(p) {
                    Some(x) => at = x,
                    None => return false,
                }
            }
            let ord = match (at, lit) {
                (Value::Number(x), Lit::Num(y)) => x.as_f64().and_then(|x| x.partial_cmp(y)),
                (Value::String(x), Lit::Str(y)) => Some(x.as_str().cmp(y.as_str())),
                (Value::Bool(x), Lit::Bool(y)) => Some(x.cmp(y)),
                _ => None,
            };
            let Some(o) = ord else { return false };
            use std::cmp::Ordering::*;
            match op {
                Op::Eq => o == Equal,
                Op::Ne => o != Equal,
                Op::Lt => o == Less,
                Op::Le => o != Greater,
                Op::Gt => o == Greater,
                Op::Ge => o != Less,
            }
        }
    }
}

impl Expr {
    /// Parses `text` and checks its fields against `T`'s layout.
    pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<Expr, FilterError> {
        let mut p = Parser { toks: tokens(text)?, at: 0 };
        if p.toks.is_empty() {
            return Err(FilterError::Empty);
        }
        let node = p.or(0)?;
        if p.at != p.toks.len() {
            return Err(FilterError::Trailing);
        }
        let mut tracer = Tracer::new(TracerConfig::default());
        let (root, _) = tracer.trace_type::<T>(&Samples::new()).map_err(|_| FilterError::Untraceable)?;
        check(&tracer.registry_unchecked(), &root, &node)?;
        Ok(Expr(node))
    }

    /// True if `sample` passes.
    pub fn matches<T: Serialize>(&self, sample: &T) -> bool {
        serde_json::to_value(sample).is_ok_and(|v| eval(&v, &self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Pos {
        x: i32,
        y: i32,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Shape {
        colour: String,
        pos: Pos,
        filled: bool,
    }

    fn s(colour: &str, x: i32, filled: bool) -> Shape {
        Shape { colour: colour.into(), pos: Pos { x, y: 0 }, filled }
    }

    #[test]
    fn a_reading_filter_passes_what_it_says_and_names_what_is_wrong() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Reading {
            sensor: u32,
            celsius: f32,
            room: String,
        }
        let e = Expr::parse::<Reading>("celsius > 30 AND NOT room = 'attic'").unwrap();
        assert!(e.matches(&Reading { sensor: 1, celsius: 31.5, room: "hall".into() }));
        assert!(!e.matches(&Reading { sensor: 1, celsius: 31.5, room: "attic".into() }));
        let fields = ["sensor", "celsius", "room"].map(String::from).to_vec();
        let missing = FilterError::NoSuchField { path: "kelvin".into(), fields };
        assert_eq!(Expr::parse::<Reading>("kelvin > 300").unwrap_err(), missing);
        assert_eq!(Expr::parse::<Reading>("room > 3").unwrap_err(), FilterError::WrongLiteral("room".into()));
    }

    #[test]
    fn expressions_nest_and_compare_by_kind() {
        let e =
            Expr::parse::<Shape>("(colour = 'red' OR colour = \"blue\") AND pos.x >= -3 AND filled <> false").unwrap();
        assert!(e.matches(&s("red", -3, true)));
        assert!(!e.matches(&s("red", -4, true)));
        assert!(!e.matches(&s("green", 0, true)));
        assert!(!e.matches(&s("blue", 0, false)));
        assert!(Expr::parse::<Shape>("NOT NOT pos.y = 0").unwrap().matches(&s("x", 1, true)));
    }

    #[test]
    fn bad_expressions_are_errors_that_say_why() {
        use FilterError::*;
        let struct_ = |p: &str, f: &str| NotAStruct { path: p.into(), field: f.into() };
        for (bad, why) in [
            ("colour.x = 1", struct_("colour", "x")),
            ("pos = 1", NotComparable("pos".into())),
            ("filled > true", BoolOrder("filled".into())),
            ("colour = 3", WrongLiteral("colour".into())),
            ("(colour = 'a'", UnclosedParen),
            ("colour = 'a", UnclosedString),
            ("", Empty),
            ("colour 'a'", NoOperator("colour".into())),
            ("colour =", NoLiteral("colour".into())),
            ("= 1", NoComparison),
            ("x = 1 junk", Trailing),
            ("x = 1e999999x", NotANumber("1e999999x".into())),
            ("x = 1 ; y", Unexpected { found: ';', at: 6 }),
        ] {
            assert_eq!(Expr::parse::<Shape>(bad).unwrap_err(), why, "{bad}");
        }
        let e = Expr::parse::<Shape>("pos.z = 1").unwrap_err();
        assert!(matches!(&e, NoSuchField { path, .. } if path == "pos.z"), "{e}");
        let deep = format!("{}x = 1{}", "(".repeat(100), ")".repeat(100));
        assert_eq!(Expr::parse::<Shape>(&deep).unwrap_err(), TooDeep { max: MAX_DEPTH });
        assert_eq!(Expr::parse::<Shape>(&"x".repeat(5000)).unwrap_err(), TooLong { len: 5000, max: MAX_EXPR });
    }
}
