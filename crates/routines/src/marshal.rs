//! A call's values in and out of a worker: where each argument goes in the request (scalars
//! in the header, arrays and bytes in the arena, room reserved for output arrays), and the
//! outputs read back from the reply.

use crate::arena::{Arena, align};
use crate::frame::{ArrayPlace, Item, Place, Request};
use gridwise_proto::{ArgType, Array, Dim, ServiceDesc, Value};

/// The dimension `d` of an array argument, from the call's int inputs.
fn dim(desc: &ServiceDesc, inputs: &[Value], d: &Dim) -> Result<u64, String> {
    match d {
        Dim::Fixed(n) => Ok(*n),
        Dim::Arg(name) => desc
            .inputs()
            .zip(inputs)
            .find(|(a, _)| a.name == *name)
            .and_then(|(_, v)| v.as_int())
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| {
                format!(
                    "`{}`: dimension `{name}` has no non-negative value",
                    desc.name
                )
            }),
    }
}

/// The request for `inputs` (IN and INOUT values in order, checked against `desc`), with its
/// arrays written into `arena` (grown as needed).
pub fn request(desc: &ServiceDesc, inputs: &[Value], arena: &mut Arena) -> Result<Request, String> {
    // First the places, then one grow, then the copies.
    let mut next = 0u64;
    let mut take = |len: u64| {
        let off = next;
        next = align(next + len.max(1));
        off
    };
    let mut args = Vec::with_capacity(desc.args.len());
    let mut copies: Vec<(u64, &[u8])> = Vec::new();
    let mut input = inputs.iter();
    for a in &desc.args {
        let given = if a.mode.is_input() {
            Some(
                input
                    .next()
                    .ok_or_else(|| format!("`{}`: too few inputs", desc.name))?,
            )
        } else {
            None
        };
        let item = match (&a.ty, given) {
            (ArgType::Int, Some(v)) => Item::Int(v.as_int().ok_or("an int input is not an int")?),
            (ArgType::Double, Some(v)) => {
                Item::Double(v.as_double().ok_or("a double input is not a double")?)
            }
            (ArgType::Str, Some(v)) => Item::Str(
                v.as_str()
                    .ok_or("a string input is not a string")?
                    .to_string(),
            ),
            (ArgType::Bytes, Some(Value::Bytes(b))) => {
                let off = take(b.len() as u64);
                copies.push((off, b));
                Item::Bytes(Place {
                    off,
                    len: b.len() as u64,
                    blob: false,
                })
            }
            (
                ArgType::Vector { .. } | ArgType::Matrix { .. },
                Some(Value::Vector(x) | Value::Matrix(x)),
            ) => {
                let off = take(x.data.len() as u64);
                copies.push((off, &x.data));
                Item::Array(ArrayPlace {
                    elem: x.elem,
                    rows: x.rows,
                    cols: x.cols,
                    vector: matches!(a.ty, ArgType::Vector { .. }),
                    place: Place {
                        off,
                        len: x.data.len() as u64,
                        blob: false,
                    },
                })
            }
            (ArgType::Vector { elem, len }, None) => {
                let rows = dim(desc, inputs, len)?;
                let bytes = rows * elem.size() as u64;
                Item::Array(ArrayPlace {
                    elem: *elem,
                    rows,
                    cols: 1,
                    vector: true,
                    place: Place {
                        off: take(bytes),
                        len: bytes,
                        blob: false,
                    },
                })
            }
            (ArgType::Matrix { elem, rows, cols }, None) => {
                let (r, c) = (dim(desc, inputs, rows)?, dim(desc, inputs, cols)?);
                let bytes = r
                    .checked_mul(c)
                    .and_then(|n| n.checked_mul(elem.size() as u64))
                    .ok_or_else(|| format!("`{}` output `{}` is too large", desc.name, a.name))?;
                Item::Array(ArrayPlace {
                    elem: *elem,
                    rows: r,
                    cols: c,
                    vector: false,
                    place: Place {
                        off: take(bytes),
                        len: bytes,
                        blob: false,
                    },
                })
            }
            (_, None) => Item::Pending,
            (ty, Some(v)) => {
                return Err(format!(
                    "`{}` argument `{}`: a {} is no {ty}",
                    desc.name,
                    a.name,
                    v.kind()
                ));
            }
        };
        args.push(item);
    }
    let total = next;
    arena
        .grow(usize::try_from(total).map_err(|_| "the call's data does not fit in memory")?)
        .map_err(|e| format!("cannot make room for the call's data ({total} bytes): {e}"))?;
    for (off, data) in copies {
        arena
            .slice_mut(off, data.len() as u64)
            .ok_or("the arena is smaller than planned")?
            .copy_from_slice(data);
    }
    Ok(Request {
        arena_len: arena.len() as u64,
        args,
    })
}

/// The outputs of a reply, as values (OUT and INOUT in `desc`'s order).
pub fn outputs(
    desc: &ServiceDesc,
    items: &[Item],
    arena: &mut Arena,
    blob: &[u8],
) -> Result<Vec<Value>, String> {
    let outs: Vec<_> = desc.outputs().collect();
    if outs.len() != items.len() {
        return Err(format!(
            "the worker returned {} output(s) where `{}` declares {}",
            items.len(),
            desc.name,
            outs.len()
        ));
    }
    let mut bytes = |p: &Place| -> Result<Vec<u8>, String> {
        let src = if p.blob {
            usize::try_from(p.off)
                .ok()
                .zip(usize::try_from(p.off + p.len).ok())
                .and_then(|(a, b)| blob.get(a..b))
        } else {
            arena.slice_mut(p.off, p.len).map(|s| &*s)
        };
        src.map(<[u8]>::to_vec)
            .ok_or_else(|| format!("the worker placed an output out of bounds ({p:?})"))
    };
    outs.iter()
        .zip(items)
        .map(|(a, item)| {
            Ok(match (&a.ty, item) {
                (ArgType::Int, Item::Int(i)) => Value::Int(*i),
                (ArgType::Double, Item::Double(d)) => Value::Double(*d),
                (ArgType::Double, Item::Int(i)) => Value::Double(*i as f64),
                (ArgType::Str, Item::Str(s)) => Value::Str(s.clone()),
                (ArgType::Bytes, Item::Bytes(p)) => Value::Bytes(bytes(p)?),
                (ArgType::Vector { .. } | ArgType::Matrix { .. }, Item::Array(x)) => {
                    let data = bytes(&x.place)?;
                    let arr = Array {
                        elem: x.elem,
                        rows: x.rows,
                        cols: x.cols,
                        data,
                    };
                    if matches!(a.ty, ArgType::Vector { .. }) {
                        Value::Vector(arr)
                    } else {
                        Value::Matrix(arr)
                    }
                }
                (ty, got) => {
                    return Err(format!(
                        "output `{}` is declared {ty}, but the routine gave {got:?}",
                        a.name
                    ));
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::{ArgDesc, ArgMode};

    #[test]
    fn arrays_go_to_the_arena_and_outputs_get_room() {
        let desc = ServiceDesc {
            name: "scale".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("n", ArgMode::In, "int"),
                ArgDesc::new("x", ArgMode::In, "vector<f64>[n]"),
                ArgDesc::new("y", ArgMode::Out, "vector<f64>[n]"),
                ArgDesc::new("label", ArgMode::Out, "string"),
            ],
            size_params: vec![],
            complexity: None,
            duration: None,
            memory: None,
        };
        let mut arena = Arena::new().unwrap();
        let x = Value::vector_f64(&[1.0, 2.0, 3.0]);
        let req = request(&desc, &[Value::Int(3), x.clone()], &mut arena).unwrap();
        assert_eq!(req.args[0], Item::Int(3));
        let (Item::Array(xp), Item::Array(yp)) = (&req.args[1], &req.args[2]) else {
            panic!("{req:?}")
        };
        assert_eq!((xp.place.off, yp.place.off, yp.place.len), (0, 64, 24));
        assert_eq!(req.args[3], Item::Pending);
        // A worker writes y = 2x and a label; the reply reads back as values.
        let doubled: Vec<u8> = [2.0f64, 4.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        arena.slice_mut(64, 24).unwrap().copy_from_slice(&doubled);
        let outs = outputs(
            &desc,
            &[Item::Array(*yp), Item::Str("ok".into())],
            &mut arena,
            &[],
        )
        .unwrap();
        assert_eq!(
            outs,
            vec![Value::vector_f64(&[2.0, 4.0, 6.0]), Value::Str("ok".into())]
        );
        let e = outputs(&desc, &[Item::Int(1)], &mut arena, &[]).unwrap_err();
        assert!(e.contains("1 output(s) where `scale` declares 2"), "{e}");
        let bad = ArrayPlace {
            place: Place {
                off: 1 << 40,
                len: 8,
                blob: false,
            },
            ..*yp
        };
        let e = outputs(
            &desc,
            &[Item::Array(bad), Item::Str(String::new())],
            &mut arena,
            &[],
        )
        .unwrap_err();
        assert!(e.contains("out of bounds"), "{e}");
    }
}
