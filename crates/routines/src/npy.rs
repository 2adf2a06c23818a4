//! Arrays as files for command kernels: NumPy's `.npy` (version 1.0, little-endian, C or
//! Fortran order) and plain text (numbers separated by white space, a row per line).

use gridwise_proto::{Array, ElemType};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "<f8",
        ElemType::F32 => "<f4",
        ElemType::I32 => "<i4",
        ElemType::I64 => "<i8",
    }
}

/// The `.npy` bytes of `a` (a vector has shape `(n,)`).
pub fn write(a: &Array, vector: bool) -> Vec<u8> {
    let shape = if vector {
        format!("({},)", a.rows)
    } else {
        format!("({}, {})", a.rows, a.cols)
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(a.elem)
    );
    // Magic, version, length, header and its newline: a multiple of 64 bytes.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + a.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    out
}

/// The value of `key` in a `.npy` header dictionary.
fn field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let k = format!("'{key}':");
    let at = header.find(&k)? + k.len();
    let rest = header[at..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

/// An array of `elem` from `.npy` bytes: one or two dimensions; Fortran order is turned into
/// row-major.
pub fn read(bytes: &[u8], elem: ElemType) -> Result<Array, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file".into());
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let header = std::str::from_utf8(
        bytes
            .get(start..start + hlen)
            .ok_or("a truncated .npy header")?,
    )
    .map_err(|_| "a .npy header that is not text")?;
    let d = field(header, "descr").ok_or("a .npy header without descr")?;
    let want = descr(elem);
    if d.trim_matches('\'') != want {
        return Err(format!(
            "elements are {d}, where {want} ({elem}) is declared"
        ));
    }
    let fortran =
        field(header, "fortran_order").ok_or("a .npy header without fortran_order")? == "True";
    let shape: Vec<u64> = field(header, "shape")
        .ok_or("a .npy header without shape")?
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("a bad .npy shape `{s}`")))
        .collect::<Result<_, _>>()?;
    let (rows, cols) = match shape.as_slice() {
        [n] => (*n, 1),
        [r, c] => (*r, *c),
        [] => (1, 1),
        s => return Err(format!("{} dimensions; 1 or 2 are supported", s.len())),
    };
    let mut data = bytes[start + hlen..].to_vec();
    let size = elem.size();
    if data.len() as u64 != rows * cols * size as u64 {
        return Err(format!("{} bytes of data for shape {shape:?}", data.len()));
    }
    if fortran && rows > 1 && cols > 1 {
        let mut t = vec![0u8; data.len()];
        let (r, c) = (rows as usize, cols as usize);
        for i in 0..r {
            for j in 0..c {
                let s = (j * r + i) * size;
                let d = (i * c + j) * size;
                t[d..d + size].copy_from_slice(&data[s..s + size]);
            }
        }
        data = t;
    }
    Ok(Array {
        elem,
        rows,
        cols,
        data,
    })
}

/// `a` as text: a row per line.
pub fn to_text(a: &Array) -> Vec<u8> {
    let values: Vec<String> = match a.elem {
        ElemType::F64 => a
            .to_f64()
            .unwrap_or_default()
            .iter()
            .map(|v| format!("{v:?}"))
            .collect(),
        ElemType::F32 => a
            .to_f32()
            .unwrap_or_default()
            .iter()
            .map(|v| format!("{v:?}"))
            .collect(),
        ElemType::I32 => a
            .to_i32()
            .unwrap_or_default()
            .iter()
            .map(|v| v.to_string())
            .collect(),
        ElemType::I64 => a
            .to_i64()
            .unwrap_or_default()
            .iter()
            .map(|v| v.to_string())
            .collect(),
    };
    let cols = a.cols.max(1) as usize;
    let mut out = String::new();
    for row in values.chunks(cols) {
        out.push_str(&row.join(" "));
        out.push('\n');
    }
    out.into_bytes()
}

/// An array from text: every number, row-major, `cols` to a row.
pub fn from_text(bytes: &[u8], elem: ElemType, cols: u64) -> Result<Array, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the text is not UTF-8")?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let bad = |w: &str| format!("`{w}` is not a number of type {elem}");
    let n = words.len() as u64;
    let cols = cols.max(1);
    let rows = n / cols;
    if rows * cols != n {
        return Err(format!("{n} numbers do not make rows of {cols}"));
    }
    macro_rules! parse {
        ($t:ty, $from:ident) => {{
            let v = words
                .iter()
                .map(|w| w.parse::<$t>().map_err(|_| bad(w)))
                .collect::<Result<Vec<$t>, String>>()?;
            Array::$from(rows, cols, &v)
        }};
    }
    Ok(match elem {
        ElemType::F64 => parse!(f64, from_f64),
        ElemType::F32 => parse!(f32, from_f32),
        ElemType::I32 => parse!(i32, from_i32),
        ElemType::I64 => parse!(i64, from_i64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trips_and_fortran_order_is_read_row_major() {
        let a = Array::from_f64(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = write(&a, false);
        assert_eq!((b.len() - a.data.len()) % 64, 0);
        assert_eq!(read(&b, ElemType::F64).unwrap(), a);
        assert!(read(&b, ElemType::F32).unwrap_err().contains("<f8"));
        // The same matrix as numpy writes it in Fortran order.
        let mut f = write(
            &Array::from_f64(2, 3, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]),
            false,
        );
        let text = String::from_utf8_lossy(&f[10..70])
            .replace("'fortran_order': False", "'fortran_order': True ");
        f.splice(10..70, text.bytes());
        assert_eq!(read(&f, ElemType::F64).unwrap(), a);
        let v = read(
            &write(&Array::from_i32(3, 1, &[1, 2, 3]), true),
            ElemType::I32,
        )
        .unwrap();
        assert_eq!((v.rows, v.cols), (3, 1));
    }

    #[test]
    fn text_round_trips() {
        let a = Array::from_i64(2, 2, &[1, -2, 3, 4]);
        assert_eq!(to_text(&a), b"1 -2\n3 4\n");
        assert_eq!(from_text(&to_text(&a), ElemType::I64, 2).unwrap(), a);
        assert!(
            from_text(b"1 2 x", ElemType::F64, 1)
                .unwrap_err()
                .contains("`x`")
        );
        assert!(
            from_text(b"1 2 3", ElemType::F64, 2)
                .unwrap_err()
                .contains("rows of 2")
        );
    }
}
