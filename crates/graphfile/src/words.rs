//! Turning command-line words into argument values by the service description:
//! `int` and `double` as numbers, `string` as is, `bytes` as text or `@file`, vectors and
//! matrices as JSON (`[1,2]`, `[[1,2],[3,4]]`), `@file.json`, or `rand` for pseudo-random
//! values of the declared shape.

use gridwise_proto::{ArgType, Array, Dim, ElemType, ServiceDesc, Value};
use rand::{Rng, SeedableRng};

/// What `rand` stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rand {
    /// Pseudo-random values in [-1, 1), the same for every run: what a call sends.
    Values,
    /// Zeros, allocated but never written (the pages stay unmapped): enough for a prediction,
    /// which needs every argument's size but none of its contents.
    SizeOnly,
}

/// Parses the words for the service's inputs (IN and INOUT arguments, in order).
pub fn parse_inputs(desc: &ServiceDesc, words: &[String]) -> anyhow::Result<Vec<Value>> {
    parse_inputs_with(desc, words, Rand::Values)
}

/// [`parse_inputs`] with `rand` standing for `rand`.
pub fn parse_inputs_with(
    desc: &ServiceDesc,
    words: &[String],
    rand: Rand,
) -> anyhow::Result<Vec<Value>> {
    let inputs: Vec<_> = desc.inputs().collect();
    if inputs.len() != words.len() {
        anyhow::bail!(
            "`{}` takes {} input(s), {} given: {}",
            desc.name,
            inputs.len(),
            words.len(),
            desc.signature()
        );
    }
    let mut values: Vec<Value> = Vec::with_capacity(words.len());
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for (a, w) in inputs.iter().zip(words) {
        let int_arg = |d: &Dim| -> anyhow::Result<u64> {
            match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Arg(name) => desc
                    .inputs()
                    .zip(&values)
                    .find(|(x, _)| &x.name == name)
                    .and_then(|(_, v)| v.as_int())
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(|| anyhow::anyhow!("`{}` is shaped by `{name}`, which must come first and be a non-negative int", a.name)),
            }
        };
        let ctx = |e: String| anyhow::anyhow!("argument `{}` ({}): {e}", a.name, a.ty);
        let v = match &a.ty {
            ArgType::Int => Value::Int(
                w.parse()
                    .map_err(|_| ctx(format!("`{w}` is not an integer")))?,
            ),
            ArgType::Double => Value::Double(
                w.parse()
                    .map_err(|_| ctx(format!("`{w}` is not a number")))?,
            ),
            ArgType::Str => Value::Str(w.clone()),
            ArgType::Bytes => Value::Bytes(match w.strip_prefix('@') {
                Some(path) => {
                    std::fs::read(path).map_err(|e| ctx(format!("cannot read {path}: {e}")))?
                }
                None => w.as_bytes().to_vec(),
            }),
            ArgType::Vector { elem, len } => {
                let n = int_arg(len)?;
                Value::Vector(array(*elem, n, 1, w, false, rand, &mut rng).map_err(ctx)?)
            }
            ArgType::Matrix { elem, rows, cols } => {
                let (r, c) = (int_arg(rows)?, int_arg(cols)?);
                Value::Matrix(array(*elem, r, c, w, true, rand, &mut rng).map_err(ctx)?)
            }
        };
        values.push(v);
    }
    Ok(values)
}

fn array(
    elem: ElemType,
    rows: u64,
    cols: u64,
    word: &str,
    matrix: bool,
    rand: Rand,
    rng: &mut impl Rng,
) -> Result<Array, String> {
    let n = rows
        .checked_mul(cols)
        .filter(|n| *n <= 1 << 28)
        .ok_or_else(|| format!("a {rows}x{cols} array is too large for the command line"))?;
    if word == "rand" && rand == Rand::SizeOnly {
        return Ok(Array {
            elem,
            rows,
            cols,
            data: vec![0; n as usize * elem.size()],
        });
    }
    let nums: Vec<f64> = if word == "rand" {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    } else {
        let text = match word.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?
            }
            None => word.to_string(),
        };
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("not JSON ({e}); write e.g. [[1,2],[3,4]] or `rand`"))?;
        let flat: Vec<&serde_json::Value> = match (&json, matrix) {
            (serde_json::Value::Array(rs), true) if rs.iter().all(|r| r.is_array()) => rs
                .iter()
                .flat_map(|r| r.as_array().into_iter().flatten())
                .collect(),
            (serde_json::Value::Array(xs), _) => xs.iter().collect(),
            _ => return Err("expected a JSON array".into()),
        };
        flat.iter()
            .map(|x| x.as_f64().ok_or_else(|| format!("`{x}` is not a number")))
            .collect::<Result<_, _>>()?
    };
    if nums.len() as u64 != n {
        return Err(format!(
            "{} value(s) given, the shape needs {rows}x{cols} = {n}",
            nums.len()
        ));
    }
    Ok(match elem {
        ElemType::F64 => Array::from_f64(rows, cols, &nums),
        ElemType::F32 => Array::from_f32(
            rows,
            cols,
            &nums.iter().map(|x| *x as f32).collect::<Vec<_>>(),
        ),
        ElemType::I32 => Array::from_i32(
            rows,
            cols,
            &nums.iter().map(|x| (x * 1000.0) as i32).collect::<Vec<_>>(),
        ),
        ElemType::I64 => Array::from_i64(
            rows,
            cols,
            &nums.iter().map(|x| (x * 1000.0) as i64).collect::<Vec<_>>(),
        ),
    })
}

/// Parses `k=v,k=v` size assignments, e.g. `m=1000,n=1000,k=1000`.
pub fn parse_sizes(s: &str) -> anyhow::Result<Vec<(String, i64)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("`{p}` is not `name=value`"))?;
            let v: i64 = v
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("size `{k}` must be an integer, not `{v}`"))?;
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

/// A value for people: scalars as they are, small arrays as JSON, large ones summarised.
pub fn render(v: &Value) -> String {
    match v.as_array() {
        Some(a) if a.len() > 64 => format!("{} ({} bytes)", v.kind(), a.data.len()),
        _ => match v {
            Value::Str(s) => s.clone(),
            other => other.to_json().to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgemm() -> ServiceDesc {
        gridwise_kernels::builtin("dgemm").unwrap().desc().clone()
    }

    fn w(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn matrices_from_json_and_rand() {
        let d = dgemm();
        let v = parse_inputs(&d, &w(&["1", "2", "2", "[[1,2]]", "rand"])).unwrap();
        d.check_inputs(&v).unwrap();
        assert_eq!(v[3].as_array().unwrap().to_f64().unwrap(), vec![1.0, 2.0]);
    }

    #[test]
    fn wrong_words_are_explained() {
        let d = dgemm();
        let e = parse_inputs(&d, &w(&["x", "2", "2", "[]", "[]"])).unwrap_err();
        assert!(e.to_string().contains("not an integer"), "{e}");
        let e = parse_inputs(&d, &w(&["1", "2", "2", "[[1,2,3]]", "rand"])).unwrap_err();
        assert!(e.to_string().contains("needs 1x2"), "{e}");
        let e = parse_inputs(&d, &w(&["1"])).unwrap_err();
        assert!(e.to_string().contains("takes 5 input"), "{e}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(
            parse_sizes("m=3, n=4").unwrap(),
            vec![("m".to_string(), 3), ("n".to_string(), 4)]
        );
        assert!(parse_sizes("m").is_err());
        assert!(parse_sizes("m=x").is_err());
    }
}
