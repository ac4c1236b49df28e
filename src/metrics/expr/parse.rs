//! Reading a formula: the tokens of perf's metric language and a
//! recursive-descent parser over them, bounded in length, depth and size
//! (see [`MAX_LEN`], [`MAX_DEPTH`], [`MAX_NODES`]) so a hostile config
//! cannot exhaust the stack.

use super::{
    Expr, ExprError, Func, MAX_DEPTH, MAX_LEN, MAX_NODES, Node, Op, SOURCE_COUNT, constant,
};

/// Parses `text`, read as `syntax` says, into an [`Expr`].
pub(super) fn parse(text: &str, syntax: Syntax) -> Result<Expr, ExprError> {
    if syntax == Syntax::Config && text.len() > MAX_LEN {
        return Err(ExprError {
            at: MAX_LEN,
            message: format!(
                "{} bytes long, more than the {MAX_LEN} a metric may have; a metric is a \
                 short formula over counted events",
                text.len()
            ),
        });
    }
    let tokens = tokenize(text, syntax)?;
    let mut parser = Parser {
        tokens,
        next: 0,
        names: Vec::new(),
        end: text.len(),
        nodes: 0,
    };
    let root = parser.expr(0)?;
    if let Some((at, token)) = parser.tokens.get(parser.next) {
        return Err(ExprError {
            at: *at,
            message: format!(
                "unexpected {} after a complete expression; \
                 join terms with an operator (`+ - * / %`), \
                 and write a subtraction with spaces (`a - b`)",
                token.describe()
            ),
        });
    }
    Ok(Expr {
        root,
        names: parser.names,
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(f64),
    Name(String),
    Op(char),
    Open,
    Close,
    Comma,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Self::Number(n) => format!("number `{n}`"),
            Self::Name(name) => format!("`{name}`"),
            Self::Op(c) => format!("`{c}`"),
            Self::Open => "`(`".into(),
            Self::Close => "`)`".into(),
            Self::Comma => "`,`".into(),
        }
    }
}

/// `#` starts a literal of perf's tables (`#smt_on`): a name whose value
/// the machine gives (see `crate::metrics::named`).
fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '\\' || c == '#'
}

/// Whose formula is read: the config's keep event syntax (`-`, `/`, `=`)
/// in names; perf's tables keep only `_ . : @ ?` there, as perf does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Syntax {
    Config,
    Perf,
}

fn is_name_char(c: char, syntax: Syntax) -> bool {
    let extra = match syntax {
        Syntax::Config => "_.:-/=@",
        Syntax::Perf => "_.:@?",
    };
    c.is_ascii_alphanumeric() || extra.contains(c)
}

fn tokenize(text: &str, syntax: Syntax) -> Result<Vec<(usize, Token)>, ExprError> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(at, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_ascii_digit() || c == '.' {
            let mut end = at;
            let mut last = ' ';
            while let Some(&(i, c)) = chars.peek() {
                let exponent_sign = (c == '+' || c == '-') && matches!(last, 'e' | 'E');
                if c.is_ascii_alphanumeric() || c == '.' || exponent_sign {
                    end = i + c.len_utf8();
                    last = c;
                    chars.next();
                } else {
                    break;
                }
            }
            let written = &text[at..end];
            let n: f64 = written.parse().map_err(|_| ExprError {
                at,
                message: format!("`{written}` is not a number; names start with a letter or `_`"),
            })?;
            if !n.is_finite() {
                return Err(ExprError {
                    at,
                    message: format!(
                        "`{written}` is too large to be a number (the largest is about 1.8e308), \
                         so the metric would never have a value"
                    ),
                });
            }
            tokens.push((at, Token::Number(n)));
        } else if is_name_start(c) {
            let mut name = String::new();
            if c == '#' {
                name.push(c);
                chars.next();
            }
            while let Some(&(i, c)) = chars.peek() {
                if c == '\\' {
                    chars.next();
                    let Some((_, kept)) = chars.next() else {
                        return Err(ExprError {
                            at: i,
                            message: "`\\` at the end: it keeps the character after it \
                                      in a name"
                                .into(),
                        });
                    };
                    name.push(kept);
                } else if is_name_char(c, syntax) {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            tokens.push((at, Token::Name(name)));
        } else {
            chars.next();
            let token = match c {
                '+' | '-' | '*' | '/' | '%' | '<' | '>' => Token::Op(c),
                '(' => Token::Open,
                ')' => Token::Close,
                ',' => Token::Comma,
                other => {
                    return Err(ExprError {
                        at,
                        message: format!(
                            "unexpected `{other}`; an expression has numbers, names, \
                             `+ - * / %`, `< >`, `a if c else b`, parentheses and \
                             d_ratio(a, b), min(...), max(...)"
                        ),
                    });
                }
            };
            tokens.push((at, token));
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
    names: Vec<String>,
    /// Where the text ends, for "missing ..." at the end.
    end: usize,
    /// Nodes made so far (see [`MAX_NODES`]).
    nodes: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(_, t)| t)
    }

    fn at(&self) -> usize {
        self.tokens.get(self.next).map_or(self.end, |(at, _)| *at)
    }

    fn is_keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Name(n)) if n == word)
    }

    fn error(&self, message: impl Into<String>) -> ExprError {
        ExprError {
            at: self.at(),
            message: message.into(),
        }
    }

    /// Counts one more node, refusing past [`MAX_NODES`].
    fn node(&mut self, node: Node) -> Result<Node, ExprError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.error(format!(
                "more than {MAX_NODES} operators and values; a metric is a short formula"
            )));
        }
        Ok(node)
    }

    fn deeper(&self, depth: usize) -> Result<usize, ExprError> {
        if depth >= MAX_DEPTH {
            return Err(self.error(format!(
                "nested more than {MAX_DEPTH} deep; a metric is a short formula"
            )));
        }
        Ok(depth + 1)
    }

    fn expr(&mut self, depth: usize) -> Result<Node, ExprError> {
        let depth = self.deeper(depth)?;
        let then = self.comparison(depth)?;
        if !self.is_keyword("if") {
            return Ok(then);
        }
        self.next += 1;
        let condition = self.comparison(depth)?;
        if !self.is_keyword("else") {
            return Err(self.error("`a if c` needs `else b`"));
        }
        self.next += 1;
        let otherwise = self.expr(depth)?;
        Ok(Node::If {
            then: Box::new(then),
            condition: Box::new(condition),
            otherwise: Box::new(otherwise),
        })
    }

    fn comparison(&mut self, depth: usize) -> Result<Node, ExprError> {
        let left = self.sum(depth)?;
        let op = match self.peek() {
            Some(Token::Op('<')) => Op::Less,
            Some(Token::Op('>')) => Op::Greater,
            _ => return Ok(left),
        };
        self.next += 1;
        let right = self.sum(depth)?;
        Ok(Node::Binary(op, Box::new(left), Box::new(right)))
    }

    fn sum(&mut self, depth: usize) -> Result<Node, ExprError> {
        let start = self.at();
        let mut left = self.product(depth)?;
        loop {
            let op = match self.peek() {
                Some(Token::Op('+')) => Op::Add,
                Some(Token::Op('-')) => Op::Sub,
                _ => return Ok(left),
            };
            self.next += 1;
            let right = self.product(depth)?;
            left = self.node(Node::Binary(op, Box::new(left), Box::new(right)))?;
            self.finite(&left, start)?;
        }
    }

    fn product(&mut self, depth: usize) -> Result<Node, ExprError> {
        let start = self.at();
        let mut left = self.unary(depth)?;
        loop {
            let (op, sign) = match self.peek() {
                Some(Token::Op('*')) => (Op::Mul, '*'),
                Some(Token::Op('/')) => (Op::Div, '/'),
                Some(Token::Op('%')) => (Op::Rem, '%'),
                _ => return Ok(left),
            };
            self.next += 1;
            let divisor_at = self.at();
            let right = self.unary(depth)?;
            if let Some(Some(b)) = constant(&right) {
                let zero = match op {
                    Op::Div => b == 0.0,
                    Op::Rem => b.trunc() == 0.0,
                    _ => false,
                };
                if zero {
                    let whole = if op == Op::Rem && b != 0.0 {
                        format!(
                            " ({b} is 0 as a whole number, and a remainder is of whole numbers)"
                        )
                    } else {
                        String::new()
                    };
                    return Err(ExprError {
                        at: divisor_at,
                        message: format!(
                            "`{sign}` by 0{whole}: the metric would never have a value; \
                             divide by something counted, or write `d_ratio(a, b)` for 0 \
                             when `b` is 0"
                        ),
                    });
                }
            }
            left = self.node(Node::Binary(op, Box::new(left), Box::new(right)))?;
            self.finite(&left, start)?;
        }
    }

    /// Refuses `node`, which begins at `start`, when it uses no name and is
    /// not a finite number (`1e308 * 1e308`): a metric made of it would
    /// never have a value.
    fn finite(&self, node: &Node, start: usize) -> Result<(), ExprError> {
        match constant(node) {
            Some(Some(v)) if !v.is_finite() => Err(ExprError {
                at: start,
                message: "this part is a number too large to be one (more than about 1.8e308), \
                          so the metric would never have a value"
                    .into(),
            }),
            _ => Ok(()),
        }
    }

    fn unary(&mut self, depth: usize) -> Result<Node, ExprError> {
        if self.peek() == Some(&Token::Op('-')) {
            let depth = self.deeper(depth)?;
            self.next += 1;
            return Ok(Node::Neg(Box::new(self.unary(depth)?)));
        }
        self.primary(depth)
    }

    fn primary(&mut self, depth: usize) -> Result<Node, ExprError> {
        let Some(token) = self.peek().cloned() else {
            return Err(self.error("the expression ends where a value is needed"));
        };
        match token {
            Token::Number(n) => {
                self.next += 1;
                self.node(Node::Number(n))
            }
            Token::Open => {
                self.next += 1;
                let inner = self.expr(depth)?;
                self.close("`(`")?;
                Ok(inner)
            }
            Token::Name(name) if name == "if" || name == "else" => Err(self.error(format!(
                "`{name}` where a value is needed; write `a if c else b`"
            ))),
            Token::Name(name) => {
                self.next += 1;
                if self.peek() == Some(&Token::Open) {
                    return self.call(&name, depth);
                }
                let index = match self.names.iter().position(|n| *n == name) {
                    Some(i) => i,
                    None => {
                        self.names.push(name);
                        self.names.len() - 1
                    }
                };
                self.node(Node::Name(index))
            }
            other => Err(self.error(format!(
                "unexpected {} where a value is needed",
                other.describe()
            ))),
        }
    }

    fn call(&mut self, name: &str, depth: usize) -> Result<Node, ExprError> {
        if name == SOURCE_COUNT {
            return self.source_count();
        }
        let Some(func) = Func::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f) else {
            self.next -= 1;
            let known: Vec<&str> = Func::ALL.iter().map(|(n, _)| *n).collect();
            return Err(self.error(format!(
                "unknown function `{name}`; the functions are {}",
                known.join(", ")
            )));
        };
        let called_at = self.tokens[self.next - 1].0;
        self.next += 1;
        let depth = self.deeper(depth)?;
        let mut args = vec![self.expr(depth)?];
        while self.peek() == Some(&Token::Comma) {
            self.next += 1;
            args.push(self.expr(depth)?);
        }
        self.close(&format!("`{name}(`"))?;
        if let Some(n) = func.arity()
            && args.len() != n
        {
            return Err(ExprError {
                at: called_at,
                message: format!("`{name}` takes {n} arguments, not {}", args.len()),
            });
        }
        Ok(Node::Call(func, args))
    }

    /// perf's `source_count(event)`: how many PMUs' counts of `event` are
    /// summed into one (the boxes of an uncore unit). cgperf sums an event
    /// over the CPUs of one PMU, so it is 1; the event is not counted for
    /// it.
    fn source_count(&mut self) -> Result<Node, ExprError> {
        self.next += 1;
        if !matches!(self.peek(), Some(Token::Name(_))) {
            return Err(self.error(format!("`{SOURCE_COUNT}(` takes one event name")));
        }
        self.next += 1;
        self.close(&format!("`{SOURCE_COUNT}(`"))?;
        self.node(Node::Number(1.0))
    }

    fn close(&mut self, opened: &str) -> Result<(), ExprError> {
        if self.peek() == Some(&Token::Close) {
            self.next += 1;
            Ok(())
        } else {
            Err(self.error(format!("missing `)` to close {opened}")))
        }
    }
}
