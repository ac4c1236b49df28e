//! Metric expressions: parsed once from the config, evaluated per cgroup
//! per interval over that interval's counts.
//!
//! The language is the part of `perf`'s metric expressions (`MetricExpr`)
//! that stands on counts alone, so that a metric written for `perf stat -M`
//! reads the same here:
//!
//! ```text
//! expr    := sum [ "if" sum "else" expr ]       a if c else b (c != 0)
//! sum     := product { ("+" | "-") product }
//!                       (comparison: sum ("<" | ">") sum, 1 or 0)
//! product := unary { ("*" | "/" | "%") unary }
//! unary   := "-" unary | primary
//! primary := number | name | func "(" expr { "," expr } ")" | "(" expr ")"
//! func    := d_ratio | min | max
//! ```
//!
//! Names are what cgperf counts, as the config writes them
//! (`context-switches`, `syscalls:sys_enter_read`, `cpu/event=0x3c/`, an
//! `as:` label): a name is a letter or `_` followed by letters, digits and
//! `_ . : - / = @`, and `\` keeps the next character in it (perf's
//! `\-`, `\,`). So `a-b` is one name and a subtraction is written
//! `a - b`, with spaces, as perf's own metrics are.
//!
//! Hand-written: perf's expression language has no crate, and the general
//! expression crates neither keep `-` in names nor make a division by
//! zero "no value".

mod parse;

use parse::Syntax;
use std::fmt;

/// The most nested parentheses or calls an expression may have: deep
/// enough for any real metric, shallow enough that parsing and evaluating
/// (both recursive) cannot exhaust the stack on a hostile config.
pub const MAX_DEPTH: usize = 64;

/// The most operators and values an expression may have: a sum is a chain
/// of nested nodes, which evaluating walks recursively, so its length is
/// bounded like nesting is.
pub const MAX_NODES: usize = 1_000;

/// The longest formula a config may write, in bytes: ten times any of
/// perf's, short enough that the `description` label (the formula when the
/// config gives none) of every series stays small.
pub const MAX_LEN: usize = 4096;

/// A parsed expression; its names are numbered in order of first use.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    root: Node,
    names: Vec<String>,
}

/// Numbers are never NaN (the tokenizer reads digits, and `nan` is a
/// name), so equality is an equivalence.
impl Eq for Expr {}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Number(f64),
    /// The value of `names[i]`.
    Name(usize),
    Neg(Box<Node>),
    Binary(Op, Box<Node>, Box<Node>),
    /// `then if condition else otherwise`.
    If {
        then: Box<Node>,
        condition: Box<Node>,
        otherwise: Box<Node>,
    },
    Call(Func, Vec<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Less,
    Greater,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Func {
    /// `a / b`, or 0 when `b` is 0 (perf's).
    DRatio,
    Min,
    Max,
}

/// perf's function of an event's number of sources; see
/// `Parser::source_count` in `parse.rs`.
const SOURCE_COUNT: &str = "source_count";

impl Func {
    const ALL: [(&'static str, Self); 3] = [
        ("d_ratio", Self::DRatio),
        ("min", Self::Min),
        ("max", Self::Max),
    ];

    fn arity(self) -> Option<usize> {
        match self {
            Self::DRatio => Some(2),
            Self::Min | Self::Max => None,
        }
    }
}

/// Why an expression does not parse: what, and where (a byte offset into
/// the expression).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Byte offset of the mistake in the expression.
    pub at: usize,
    /// What is wrong, and how to write it.
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.at + 1)
    }
}

impl std::error::Error for ExprError {}

impl Expr {
    /// Parses `text`, a formula of the config.
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        parse::parse(text, Syntax::Config)
    }

    /// Parses `text`, a formula of perf's tables (`MetricExpr`), whose
    /// names end at `- / = ,` unless escaped (`cpu@EVENT\,cmask\=1@`):
    /// perf's own tables write `a/b` for a division.
    pub fn parse_perf(text: &str) -> Result<Self, ExprError> {
        parse::parse(text, Syntax::Perf)
    }

    /// The names it uses, each once, in order of first use: `value`'s
    /// index in [`Expr::eval`] is the position here.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// This expression with each name for which `with` gives an expression
    /// replaced by it (its names join this one's, numbered anew in order of
    /// first use), the other names kept. Fails with `with`'s error, or
    /// when the result is deeper or larger than an expression may be
    /// (both bounds times [`EXPANDED`]: a metric of perf's tables refers to
    /// others, which are written out in it).
    pub fn substitute<E: From<ExprError>>(
        &self,
        mut with: impl FnMut(&str) -> Result<Option<Expr>, E>,
    ) -> Result<Expr, E> {
        let mut replacements = Vec::with_capacity(self.names.len());
        for name in &self.names {
            replacements.push(with(name)?);
        }
        // Measured before it is built: expressions that each refer to the
        // next many times would otherwise grow without bound first.
        let sizes: Vec<Option<(usize, usize)>> = replacements
            .iter()
            .map(|r| r.as_ref().map(|e| measure(&e.root, &[])))
            .collect();
        let (depth, nodes) = measure(&self.root, &sizes);
        if depth > MAX_DEPTH * EXPANDED || nodes > MAX_NODES * EXPANDED {
            return Err(ExprError {
                at: 0,
                message: format!(
                    "written out with the metrics it refers to, it is nested {depth} deep with \
                     {nodes} values and operators, more than a metric may have"
                ),
            }
            .into());
        }
        let mut names = Vec::new();
        let root = graft(&self.root, &self.names, &replacements, &mut names);
        Ok(Self { root, names })
    }

    /// This expression with each name `n` renamed `rename(n)`; names that
    /// become one are one.
    pub fn renamed(&self, rename: impl Fn(&str) -> String) -> Expr {
        let new: Vec<String> = self.names.iter().map(|n| rename(n)).collect();
        let mut names = Vec::new();
        let root = graft(&self.root, &new, &[], &mut names);
        Self { root, names }
    }

    /// The constant `value`.
    pub fn number(value: f64) -> Expr {
        Self {
            root: Node::Number(value),
            names: Vec::new(),
        }
    }

    /// This expression times `factor` (a table's `ScaleUnit`).
    pub fn times(self, factor: f64) -> Expr {
        if factor == 1.0 {
            return self;
        }
        Self {
            root: Node::Binary(Op::Mul, Box::new(self.root), Box::new(Node::Number(factor))),
            names: self.names,
        }
    }

    /// Its value when name `i` has `values[i]`; `None` when it has none: a
    /// division or remainder by zero (a cgroup that did not run in the
    /// interval), or a result that is not a finite number. `values` holds
    /// one value per [`Expr::names`]. Never `-0`: `0 * -1` is 0, as a
    /// count of nothing is, not a sign a dashboard would show.
    pub fn eval(&self, values: &[f64]) -> Option<f64> {
        eval(&self.root, values)
            .filter(|v| v.is_finite())
            .map(|v| if v == 0.0 { 0.0 } else { v })
    }
}

/// How many times deeper and larger than a written expression one written
/// out with the metrics it refers to may be.
pub const EXPANDED: usize = 8;

/// `node` (of an expression whose names are `old`) with `old[i]` replaced
/// by `replacements[i]` where there is one, its names pushed to `names`.
fn graft(
    node: &Node,
    old: &[String],
    replacements: &[Option<Expr>],
    names: &mut Vec<String>,
) -> Node {
    let again = |n: &Node, names: &mut Vec<String>| Box::new(graft(n, old, replacements, names));
    match node {
        Node::Number(n) => Node::Number(*n),
        Node::Name(i) => match replacements.get(*i) {
            Some(Some(expr)) => graft(&expr.root, &expr.names, &[], names),
            _ => {
                let name = &old[*i];
                let index = names.iter().position(|n| n == name).unwrap_or_else(|| {
                    names.push(name.clone());
                    names.len() - 1
                });
                Node::Name(index)
            }
        },
        Node::Neg(inner) => Node::Neg(again(inner, names)),
        Node::Binary(op, a, b) => {
            let a = again(a, names);
            Node::Binary(*op, a, again(b, names))
        }
        Node::If {
            then,
            condition,
            otherwise,
        } => {
            let then = again(then, names);
            let condition = again(condition, names);
            Node::If {
                then,
                condition,
                otherwise: again(otherwise, names),
            }
        }
        Node::Call(func, args) => Node::Call(
            *func,
            args.iter()
                .map(|a| graft(a, old, replacements, names))
                .collect(),
        ),
    }
}

/// The depth and the number of nodes of `node` with name `i` counted as
/// `sizes[i]` (the depth and nodes of what replaces it) where given, in
/// saturating arithmetic.
fn measure(node: &Node, sizes: &[Option<(usize, usize)>]) -> (usize, usize) {
    let children: Vec<&Node> = match node {
        Node::Name(i) => {
            return sizes.get(*i).copied().flatten().unwrap_or((1, 1));
        }
        Node::Number(_) => Vec::new(),
        Node::Neg(inner) => vec![inner],
        Node::Binary(_, a, b) => vec![a, b],
        Node::If {
            then,
            condition,
            otherwise,
        } => vec![then, condition, otherwise],
        Node::Call(_, args) => args.iter().collect(),
    };
    children.iter().fold((1, 1), |(depth, nodes), child| {
        let (d, n) = measure(child, sizes);
        (depth.max(d.saturating_add(1)), nodes.saturating_add(n))
    })
}

/// The value of `node` when it uses no name (`Some(None)`: it has none, a
/// division by zero); `None` when it uses one.
fn constant(node: &Node) -> Option<Option<f64>> {
    let named = match node {
        Node::Number(_) => false,
        Node::Name(_) => true,
        Node::Neg(inner) => constant(inner).is_none(),
        Node::Binary(_, a, b) => constant(a).is_none() || constant(b).is_none(),
        Node::If {
            then,
            condition,
            otherwise,
        } => [then, condition, otherwise]
            .iter()
            .any(|n| constant(n).is_none()),
        Node::Call(_, args) => args.iter().any(|n| constant(n).is_none()),
    };
    (!named).then(|| eval(node, &[]))
}

fn eval(node: &Node, values: &[f64]) -> Option<f64> {
    Some(match node {
        Node::Number(n) => *n,
        Node::Name(i) => *values.get(*i)?,
        Node::Neg(inner) => -eval(inner, values)?,
        Node::Binary(op, a, b) => {
            let (a, b) = (eval(a, values)?, eval(b, values)?);
            match op {
                Op::Add => a + b,
                Op::Sub => a - b,
                Op::Mul => a * b,
                Op::Div if b == 0.0 => return None,
                Op::Div => a / b,
                // perf's: the remainder of the two as whole numbers.
                Op::Rem if b.trunc() == 0.0 => return None,
                Op::Rem => a.trunc() % b.trunc(),
                Op::Less => f64::from(u8::from(a < b)),
                Op::Greater => f64::from(u8::from(a > b)),
            }
        }
        Node::If {
            then,
            condition,
            otherwise,
        } => {
            if eval(condition, values)? != 0.0 {
                eval(then, values)?
            } else {
                eval(otherwise, values)?
            }
        }
        Node::Call(func, args) => {
            let mut args = args.iter().map(|a| eval(a, values));
            match func {
                Func::DRatio => {
                    let (a, b) = (args.next()??, args.next()??);
                    if b == 0.0 { 0.0 } else { a / b }
                }
                Func::Min => args.try_fold(f64::INFINITY, |m, v| Some(m.min(v?)))?,
                Func::Max => args.try_fold(f64::NEG_INFINITY, |m, v| Some(m.max(v?)))?,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, values: &[f64]) -> Option<f64> {
        Expr::parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .eval(values)
    }

    fn error(text: &str) -> ExprError {
        Expr::parse(text).expect_err(text)
    }

    #[test]
    fn perfs_tables_end_names_at_operators_as_perf_does() {
        // powerpc's tables write `a/b`; a `-` in a name is escaped.
        let e = Expr::parse_perf("PM_CMPLU_STALL/PM_RUN_INST_CMPL - topdown\\-be\\-bound")
            .expect("parses");
        assert_eq!(
            e.names(),
            ["PM_CMPLU_STALL", "PM_RUN_INST_CMPL", "topdown-be-bound"]
        );
        assert_eq!(e.eval(&[6.0, 3.0, 0.5]), Some(1.5));
        // The config's own keep event syntax in a name.
        let e = Expr::parse("cpu/event=0x3c/ / PM_RUN_INST_CMPL").expect("parses");
        assert_eq!(e.names(), ["cpu/event=0x3c/", "PM_RUN_INST_CMPL"]);
        // A `?` is a name's, in perf's tables only.
        let e = Expr::parse_perf("hv_24x7@PM_PB_CYC\\,chip\\=?@").expect("parses");
        assert_eq!(e.names(), ["hv_24x7@PM_PB_CYC,chip=?@"]);
    }

    #[test]
    fn literals_are_names_and_source_count_is_one() {
        let e = Expr::parse("#SMT_on * 2 + source_count(uncore_cha/x/) + #").expect("parses");
        assert_eq!(e.names(), ["#SMT_on", "#"]);
        assert_eq!(e.eval(&[1.0, 0.0]), Some(3.0));
        let err = Expr::parse("source_count(1)").expect_err("a number");
        assert!(err.message.contains("takes one event name"), "{err}");
        let err = Expr::parse("source_count(a, b)").expect_err("two");
        assert!(err.message.contains("missing `)`"), "{err}");
    }

    #[test]
    fn a_remainder_is_of_whole_numbers_as_perfs() {
        assert_eq!(value("a % b", &[7.9, 2.5]), Some(1.0));
        assert_eq!(value("a % b", &[-7.0, 2.0]), Some(-1.0));
        assert_eq!(
            value("a % b", &[7.0, 0.5]),
            None,
            "0.5 is 0 as a whole number"
        );
    }

    #[test]
    fn substituting_writes_expressions_into_names_and_numbers_them_anew() {
        let outer = Expr::parse("a / CLKS + a").expect("parses");
        let clks = Expr::parse("b * 2 + a").expect("parses");
        let e = outer
            .substitute(|n| Ok::<_, ExprError>((n == "CLKS").then(|| clks.clone())))
            .expect("substitutes");
        assert_eq!(e.names(), ["a", "b"]);
        // a / (b * 2 + a) + a with a = 4, b = 2.
        assert_eq!(e.eval(&[4.0, 2.0]), Some(4.5));
        assert_eq!(e.clone().times(100.0).eval(&[4.0, 2.0]), Some(450.0));
        // Writing out cannot grow an expression without bound.
        let mut big = Expr::parse("x + x").expect("parses");
        let mut failed = None;
        for round in 0..20 {
            let inner = big.clone();
            match Expr::parse("x + x")
                .and_then(|e| e.substitute(|_| Ok::<_, ExprError>(Some(inner.clone()))))
            {
                Ok(next) => big = next,
                Err(e) => {
                    failed = Some((round, e));
                    break;
                }
            }
        }
        let (round, e) = failed.expect("refused before 2^20 nodes");
        assert!(round < 15, "{round}");
        assert!(e.message.contains("more than a metric may have"), "{e}");
    }

    #[test]
    fn a_replacement_used_many_times_is_measured_before_it_is_built() {
        // 400 uses of a name that stands for 400 uses of another, and so on:
        // 400^3 nodes at the third level if it were built.
        let wide = vec!["x"; 400].join(" + ");
        let mut e = Expr::parse("x").expect("parses");
        let mut refused = None;
        for level in 0..4 {
            let inner = e.clone();
            match Expr::parse(&wide)
                .and_then(|w| w.substitute(|_| Ok::<_, ExprError>(Some(inner.clone()))))
            {
                Ok(next) => e = next,
                Err(err) => {
                    refused = Some((level, err));
                    break;
                }
            }
        }
        let (level, err) = refused.expect("refused");
        assert_eq!(level, 1, "400 x 400 nodes are more than 8,000");
        assert!(err.message.contains("more than a metric may have"), "{err}");
    }

    #[test]
    fn names_keep_dashes_colons_and_escapes_and_are_numbered_once() {
        let e = Expr::parse(
            "syscalls:sys_enter_read / context-switches + cpu/event=0x3c/ \
             * context-switches - topdown\\-be\\-bound + cpu@inst\\,cmask\\=1@",
        )
        .expect("parses");
        assert_eq!(
            e.names(),
            [
                "syscalls:sys_enter_read",
                "context-switches",
                "cpu/event=0x3c/",
                "topdown-be-bound",
                "cpu@inst,cmask=1@"
            ]
        );
    }

    #[test]
    fn precedence_and_associativity_are_arithmetics() {
        assert_eq!(value("1 + 2 * 3", &[]), Some(7.0));
        assert_eq!(value("(1 + 2) * 3", &[]), Some(9.0));
        assert_eq!(value("8 - 2 - 1", &[]), Some(5.0));
        assert_eq!(value("8 / 4 / 2", &[]), Some(1.0));
        assert_eq!(value("-2 * -3", &[]), Some(6.0));
        assert_eq!(value("7 % 4", &[]), Some(3.0));
        assert_eq!(value("1e9 * 2.5e-9", &[]), Some(2.5));
        assert_eq!(value(".5 + 0.25", &[]), Some(0.75));
        assert_eq!(value("a - b", &[5.0, 3.0]), Some(2.0));
        assert_eq!(value("a-b", &[4.0]), Some(4.0), "one name");
        assert_eq!(value("1 < 2", &[]), Some(1.0));
        assert_eq!(value("1 > 2", &[]), Some(0.0));
        assert_eq!(value("1 + 1 > 1", &[]), Some(1.0));
    }

    #[test]
    fn conditionals_functions_and_perfs_d_ratio() {
        assert_eq!(value("a if b > 1 else c", &[1.0, 2.0, 3.0]), Some(1.0));
        assert_eq!(value("a if b > 1 else c", &[1.0, 0.0, 3.0]), Some(3.0));
        // Right-nested: a if x else (b if y else c).
        assert_eq!(
            value("1 if 0 else 2 if 0 else 3", &[]),
            Some(3.0),
            "else binds an if-else"
        );
        assert_eq!(value("d_ratio(a, b)", &[6.0, 3.0]), Some(2.0));
        assert_eq!(value("d_ratio(a, b)", &[6.0, 0.0]), Some(0.0));
        assert_eq!(value("min(3, a, 2)", &[1.0]), Some(1.0));
        assert_eq!(value("max(3, a, 2)", &[1.0]), Some(3.0));
        assert_eq!(value("max(a)", &[-1.0]), Some(-1.0));
    }

    #[test]
    fn a_zero_denominator_or_a_non_finite_result_has_no_value() {
        assert_eq!(value("a / b", &[1.0, 0.0]), None);
        assert_eq!(value("0 / b", &[0.0]), None, "0/0 is no value, not NaN");
        assert_eq!(value("a % b", &[1.0, 0.0]), None);
        assert_eq!(value("1 + a / b * 0", &[1.0, 0.0]), None, "anywhere inside");
        // The branch not taken may divide by zero.
        assert_eq!(value("1 if 1 else a / b", &[2.0, 0.0]), Some(1.0));
        assert_eq!(value("a * a", &[1e308]), None);
        assert_eq!(value("a", &[f64::NAN]), None);
        // A value missing from the slice is no value either.
        assert_eq!(value("a + b", &[1.0]), None);
    }

    #[test]
    fn what_could_never_have_a_value_is_refused_where_it_is_written() {
        let e = error("1e999");
        assert_eq!(e.at, 0);
        assert!(e.message.contains("`1e999` is too large"), "{e}");
        assert_eq!(error("a * 1e999").at, 4);
        assert_eq!(error("a + -1E400").at, 5);
        let e = error("x / 0");
        assert_eq!(e.at, 4);
        assert!(e.message.contains("`/` by 0"), "{e}");
        assert!(e.message.contains("d_ratio"), "{e}");
        let e = error("x % 0.5");
        assert_eq!(e.at, 4);
        assert!(e.message.contains("0.5 is 0 as a whole number"), "{e}");
        assert_eq!(
            error("x / (2 - 2)").at,
            4,
            "a divisor that is 0 however written"
        );
        assert_eq!(error("x + 1 if 0 else x / -0").at, 20, "in a branch too");
        let e = error("x + 1e308 * 10");
        assert_eq!(e.at, 4);
        assert!(e.message.contains("too large"), "{e}");
        assert_eq!(error("1e308 + 1e308 * 2").at, 8);
        assert_eq!(error("1e308 + 1e308").at, 0);
        // Divisors that only may be 0, and constants that are numbers, stay.
        assert_eq!(value("x / 0.5", &[1.0]), Some(2.0));
        assert_eq!(value("x % 1.5", &[7.0]), Some(0.0));
        assert_eq!(value("x / (y - 1)", &[4.0, 3.0]), Some(2.0));
        assert_eq!(value("1e308 * 1", &[]), Some(1e308));
        assert_eq!(value("2", &[]), Some(2.0));
    }

    #[test]
    fn zero_has_no_sign() {
        for (text, values) in [("0 * -1", &[][..]), ("a * b", &[0.0, -3.0]), ("-a", &[0.0])] {
            let v = value(text, values).expect("a value");
            assert!(v == 0.0 && v.is_sign_positive(), "{text}: {v:?}");
            assert_eq!(format!("{v}"), "0", "{text}");
        }
        assert_eq!(value("-a", &[2.0]), Some(-2.0));
    }

    #[test]
    fn a_config_formula_is_at_most_max_len_bytes() {
        let fine = format!("a{}", " ".repeat(MAX_LEN - 1));
        assert_eq!(value(&fine, &[1.0]), Some(1.0));
        let long = format!("a{}", " ".repeat(MAX_LEN));
        let e = error(&long);
        assert_eq!(e.at, MAX_LEN);
        assert!(
            e.message.contains("4097 bytes long, more than the 4096"),
            "{e}"
        );
        // perf's tables are theirs to write.
        assert!(Expr::parse_perf(&long).is_ok());
    }

    #[test]
    fn mistakes_say_what_and_where() {
        let e = error("a +");
        assert_eq!(e.at, 3);
        assert!(e.message.contains("ends where a value"), "{e}");
        let e = error("a b");
        assert_eq!(e.at, 2);
        assert!(e.message.contains("`a - b`"), "{e}");
        let e = error("(a + b");
        assert!(e.message.contains("missing `)`"), "{e}");
        let e = error("ratio(a, b)");
        assert_eq!(e.at, 0);
        assert!(e.message.contains("d_ratio, min, max"), "{e}");
        let e = error("d_ratio(a)");
        assert!(e.message.contains("takes 2 arguments, not 1"), "{e}");
        let e = error("a ^ b");
        assert_eq!(e.at, 2);
        assert!(e.message.contains("unexpected `^`"), "{e}");
        let e = error("a if b");
        assert!(e.message.contains("needs `else b`"), "{e}");
        let e = error("1.2.3");
        assert!(e.message.contains("not a number"), "{e}");
        let e = error("a\\");
        assert!(e.message.contains("at the end"), "{e}");
        let e = error("");
        assert_eq!(e.at, 0);
        let e = error("if");
        assert!(e.message.contains("`if` where a value"), "{e}");
        assert_eq!(error("a )").at, 2);
    }

    #[test]
    fn nesting_is_bounded_so_a_hostile_config_cannot_overflow_the_stack() {
        // A config's formula is at most MAX_LEN bytes, a table's is not:
        // both are bounded by depth and size before that.
        let perf = |text: &str| Expr::parse_perf(text).expect_err("refused");
        for (n, parse) in [
            (100_000, &perf as &dyn Fn(&str) -> ExprError),
            (1_000, &error),
        ] {
            let deep = format!("{}1{}", "(".repeat(n), ")".repeat(n));
            assert!(parse(&deep).message.contains("nested more than"));
            let negated = format!("{}1", "-".repeat(n));
            assert!(parse(&negated).message.contains("nested more than"));
            let calls = format!("{}1{}", "max(".repeat(n * 4 / 5), ")".repeat(n * 4 / 5));
            assert!(parse(&calls).message.contains("nested more than"));
            // A long sum is a deep chain too.
            let long = vec!["a"; n + 1].join(" + ");
            assert!(parse(&long).message.contains("more than 1000 operators"));
        }
        let fine = format!(
            "{}1{}",
            "(".repeat(MAX_DEPTH - 2),
            ")".repeat(MAX_DEPTH - 2)
        );
        assert_eq!(value(&fine, &[]), Some(1.0));
        let fine = vec!["a"; 400].join(" + ");
        assert_eq!(value(&fine, &[1.0]), Some(400.0));
    }
}
