//! Complexity expressions (e.g. `2*m*n*k`): the number of operations a call performs as a
//! function of the service's size parameters, evaluated with `evalexpr`.

use evalexpr::{Context, DefaultNumericTypes, Node, build_operator_tree};
use std::fmt;

/// Why a complexity expression was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComplexityError {
    /// The text does not parse.
    #[error("complexity `{expr}` does not parse: {reason}")]
    Parse {
        expr: String,
        /// The parser's words.
        reason: String,
    },
    /// The expression names a variable that is not a size parameter.
    #[error(
        "complexity `{expr}` uses `{var}`, which is not a size parameter (size parameters: {allowed})"
    )]
    UnknownVariable {
        expr: String,
        var: String,
        /// The names it may use.
        allowed: String,
    },
    /// Evaluation failed or gave no finite, non-negative number.
    #[error("complexity `{expr}` cannot be evaluated here: {reason}")]
    Eval { expr: String, reason: String },
}

/// A parsed complexity expression over named size parameters.
#[derive(Clone)]
pub struct Complexity {
    expr: String,
    tree: Node<DefaultNumericTypes>,
    vars: Vec<String>,
}

impl fmt::Debug for Complexity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Complexity({})", self.expr)
    }
}

/// Two expressions are the same when their text is: the tree is parsed from it.
impl PartialEq for Complexity {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr
    }
}

impl Complexity {
    /// Parses `expr`; every variable it uses must be one of `allowed`.
    pub fn parse(expr: &str, allowed: &[String]) -> Result<Self, ComplexityError> {
        let tree = build_operator_tree::<DefaultNumericTypes>(expr).map_err(|e| {
            ComplexityError::Parse {
                expr: expr.to_string(),
                reason: e.to_string(),
            }
        })?;
        let mut vars: Vec<String> = Vec::new();
        for v in tree.iter_variable_identifiers() {
            if !allowed.iter().any(|a| a == v) {
                return Err(ComplexityError::UnknownVariable {
                    expr: expr.to_string(),
                    var: v.to_string(),
                    allowed: allowed.join(", "),
                });
            }
            if !vars.iter().any(|x| x == v) {
                vars.push(v.to_string());
            }
        }
        Ok(Self {
            expr: expr.to_string(),
            tree,
            vars,
        })
    }

    /// The text as given to [`parse`](Self::parse).
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Evaluates with the given size values (integers are taken as floats, so `2*m*n*k` cannot
    /// overflow). Missing variables, NaN, infinities and negative results are errors.
    pub fn eval(&self, sizes: &[(String, i64)]) -> Result<f64, ComplexityError> {
        let mut values = Vec::with_capacity(self.vars.len());
        for v in &self.vars {
            let Some((_, x)) = sizes.iter().find(|(n, _)| n == v) else {
                return Err(self.eval_err(format!("no value for size parameter `{v}`")));
            };
            values.push(evalexpr::Value::Float(*x as f64));
        }
        let ctx = SizeValues {
            names: &self.vars,
            values,
        };
        let value = self
            .tree
            .eval_number_with_context(&ctx)
            .map_err(|e| self.eval_err(e.to_string()))?;
        if value.is_finite() && value >= 0.0 {
            Ok(value)
        } else {
            Err(self.eval_err(format!("it evaluates to {value}")))
        }
    }

    fn eval_err(&self, reason: String) -> ComplexityError {
        ComplexityError::Eval {
            expr: self.expr.clone(),
            reason,
        }
    }
}

/// The size values of one evaluation, looked up by name among the expression's variables:
/// every ranking decision evaluates the work, and a `HashMapContext` builds a map and copies
/// every name each time.
struct SizeValues<'a> {
    names: &'a [String],
    values: Vec<evalexpr::Value<DefaultNumericTypes>>,
}

impl Context for SizeValues<'_> {
    type NumericTypes = DefaultNumericTypes;

    fn get_value(&self, identifier: &str) -> Option<&evalexpr::Value<DefaultNumericTypes>> {
        let at = self.names.iter().position(|n| n == identifier)?;
        self.values.get(at)
    }

    fn call_function(
        &self,
        identifier: &str,
        _argument: &evalexpr::Value<DefaultNumericTypes>,
    ) -> evalexpr::EvalexprResult<evalexpr::Value<DefaultNumericTypes>, DefaultNumericTypes> {
        // Only the built-in functions exist in a complexity.
        Err(evalexpr::EvalexprError::FunctionIdentifierNotFound(
            identifier.to_string(),
        ))
    }

    fn are_builtin_functions_disabled(&self) -> bool {
        false
    }

    fn set_builtin_functions_disabled(
        &mut self,
        _disabled: bool,
    ) -> evalexpr::EvalexprResult<(), DefaultNumericTypes> {
        Err(evalexpr::EvalexprError::ContextNotMutable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn dgemm_flops() {
        let c = Complexity::parse("2*m*n*k", &names(&["m", "n", "k"])).unwrap();
        let s = vec![("m".into(), 1000), ("n".into(), 2000), ("k".into(), 3000)];
        assert_eq!(c.eval(&s).unwrap(), 2.0 * 1000.0 * 2000.0 * 3000.0);
    }

    #[test]
    fn large_sizes_do_not_overflow() {
        let c = Complexity::parse("n^3", &names(&["n"])).unwrap();
        let v = c.eval(&[("n".into(), 10_000_000)]).unwrap();
        assert!((v - 1e21).abs() / 1e21 < 1e-12);
    }

    #[test]
    fn constants_and_integer_literals() {
        let c = Complexity::parse("1", &[]).unwrap();
        assert_eq!(c.eval(&[]).unwrap(), 1.0);
        let c = Complexity::parse("n/2", &names(&["n"])).unwrap();
        assert_eq!(c.eval(&[("n".into(), 3)]).unwrap(), 1.5);
    }

    #[test]
    fn unknown_variable_is_named() {
        let e = Complexity::parse("2*m*q", &names(&["m"])).unwrap_err();
        assert!(e.to_string().contains("`q`"), "{e}");
    }

    #[test]
    fn garbage_and_negative_are_errors() {
        assert!(Complexity::parse("2**(", &[]).is_err());
        let c = Complexity::parse("0-n", &names(&["n"])).unwrap();
        assert!(c.eval(&[("n".into(), 3)]).is_err());
        let c = Complexity::parse("n", &names(&["n"])).unwrap();
        assert!(c.eval(&[]).is_err());
    }
}
