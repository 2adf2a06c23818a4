//! Inputs for running a service at given sizes without a client: what a model builder needs to
//! benchmark any service from its description alone.

use gridwise_proto::{ArgType, Array, Dim, ServiceDesc, Value};

/// Inputs (IN and INOUT, in order) for `desc` at `sizes` (one value per size parameter, in the
/// description's order): size parameters take their values, other ints 1, doubles 1.0,
/// strings and bytes empty, and arrays the shape their dimensions resolve to, filled with
/// deterministic values (so a kernel does the same work on every run).
pub fn inputs_for_sizes(desc: &ServiceDesc, sizes: &[i64]) -> Result<Vec<Value>, String> {
    if sizes.len() != desc.size_params.len() {
        return Err(format!(
            "`{}` has {} size parameter(s) ({}), {} value(s) given",
            desc.name,
            desc.size_params.len(),
            desc.size_params.join(", "),
            sizes.len()
        ));
    }
    if let Some(v) = sizes.iter().find(|v| **v < 0) {
        return Err(format!("size {v} is negative"));
    }
    let int_value = |name: &str| -> i64 {
        desc.size_params
            .iter()
            .position(|p| p == name)
            .map(|i| sizes[i])
            .unwrap_or(1)
    };
    let dim = |d: &Dim| -> u64 {
        match d {
            Dim::Fixed(n) => *n,
            Dim::Arg(a) => int_value(a).max(0) as u64,
        }
    };
    let mut out = Vec::new();
    for a in desc.inputs() {
        let v = match &a.ty {
            ArgType::Int => Value::Int(int_value(&a.name)),
            ArgType::Double => Value::Double(1.0),
            ArgType::Str => Value::Str(String::new()),
            ArgType::Bytes => Value::Bytes(Vec::new()),
            ArgType::Vector { elem, len } => Value::Vector(filled(*elem, dim(len), 1)?),
            ArgType::Matrix { elem, rows, cols } => {
                Value::Matrix(filled(*elem, dim(rows), dim(cols))?)
            }
        };
        out.push(v);
    }
    Ok(out)
}

fn filled(elem: gridwise_proto::ElemType, rows: u64, cols: u64) -> Result<Array, String> {
    use gridwise_proto::ElemType;
    let n = rows
        .checked_mul(cols)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("a {rows}x{cols} array does not fit in memory"))?;
    // Small, varied, exactly representable values: no denormals, no overflow in products.
    let f = |i: usize| ((i % 17) as f64 - 8.0) / 8.0;
    Ok(match elem {
        ElemType::F64 => Array::from_f64(rows, cols, &(0..n).map(f).collect::<Vec<_>>()),
        ElemType::F32 => {
            Array::from_f32(rows, cols, &(0..n).map(|i| f(i) as f32).collect::<Vec<_>>())
        }
        ElemType::I32 => Array::from_i32(
            rows,
            cols,
            &(0..n).map(|i| (i % 17) as i32).collect::<Vec<_>>(),
        ),
        ElemType::I64 => Array::from_i64(
            rows,
            cols,
            &(0..n).map(|i| (i % 17) as i64).collect::<Vec<_>>(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin;

    #[test]
    fn dgemm_inputs_fit_the_description() {
        let k = builtin("dgemm").unwrap();
        let inputs = inputs_for_sizes(k.desc(), &[3, 4, 5]).unwrap();
        k.desc().check_inputs(&inputs).unwrap();
        assert_eq!(
            k.desc().sizes(&inputs),
            vec![("m".into(), 3), ("n".into(), 4), ("k".into(), 5)]
        );
    }

    #[test]
    fn wrong_size_count_and_negative_sizes_are_refused() {
        let k = builtin("dgemm").unwrap();
        assert!(
            inputs_for_sizes(k.desc(), &[3])
                .unwrap_err()
                .contains("3 size parameter")
        );
        assert!(inputs_for_sizes(k.desc(), &[3, -1, 2]).is_err());
    }
}
