//! What a server and its worker processes say to each other over the worker's stdin and
//! stdout: frames of a JSON header and a byte blob, `u32 LE header length | header | u64 LE
//! blob length | blob`. Arrays do not travel in frames: they sit in the worker's arena, a
//! shared memory file (fd 3 in the worker) both sides map, and headers give their place.
//! The Python worker (`python_worker.py`) speaks the same protocol, so it is plain JSON.

use gridwise_proto::ElemType;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Largest header accepted: headers hold scalars and places, never data.
const MAX_HEADER: usize = 64 << 20;

/// One argument or result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Item {
    Int(i64),
    Double(f64),
    Str(String),
    /// `len` bytes at `off`, in the arena (`blob = false`) or the frame's blob.
    Bytes(Place),
    Array(ArrayPlace),
    /// An output whose value the worker produces and places itself (strings, bytes).
    Pending,
}

/// Where bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Place {
    pub off: u64,
    pub len: u64,
    #[serde(default)]
    pub blob: bool,
}

/// An array: its element type and shape, and where its row-major elements are.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrayPlace {
    #[serde(with = "elem_name")]
    pub elem: ElemType,
    pub rows: u64,
    pub cols: u64,
    /// A vector (one dimension) rather than a matrix.
    pub vector: bool,
    #[serde(flatten)]
    pub place: Place,
}

mod elem_name {
    use gridwise_proto::ElemType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &ElemType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(e.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ElemType, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A call: every argument of the service in order (inputs with their values, outputs with
/// the place reserved for them or `Pending`), and the arena's current size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub arena_len: u64,
    pub args: Vec<Item>,
}

/// A worker's answer: on start-up `Ready` (or `Error`: the routine could not be loaded), then
/// one per request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    Ready,
    /// The outputs in the service's order.
    Ok(Vec<Item>),
    Error(String),
}

/// Writes one frame, in one write when it is small (a call's cost is mostly system calls).
pub fn write_frame<T: Serialize>(w: &mut impl Write, header: &T, blob: &[u8]) -> io::Result<()> {
    let mut f = Vec::with_capacity(64 + blob.len().min(1 << 16));
    f.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut f, header).map_err(io::Error::other)?;
    let n = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&n.to_le_bytes());
    f.extend_from_slice(&(blob.len() as u64).to_le_bytes());
    if blob.len() <= 1 << 16 {
        f.extend_from_slice(blob);
        w.write_all(&f)?;
    } else {
        w.write_all(&f)?;
        w.write_all(blob)?;
    }
    w.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream (the peer is gone).
pub fn read_frame<T: for<'de> Deserialize<'de>>(
    r: &mut impl Read,
) -> io::Result<Option<(T, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame header of {n} bytes"),
        ));
    }
    let mut h = vec![0u8; n];
    r.read_exact(&mut h)?;
    let mut blen = [0u8; 8];
    r.read_exact(&mut blen)?;
    let b = u64::from_le_bytes(blen);
    let mut blob = Vec::new();
    blob.try_reserve_exact(usize::try_from(b).unwrap_or(usize::MAX))
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, format!("a blob of {b} bytes")))?;
    r.take(b).read_to_end(&mut blob)?;
    if blob.len() as u64 != b {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let header =
        serde_json::from_slice(&h).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((header, blob)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_read_as_json() {
        let req = Request {
            arena_len: 4096,
            args: vec![
                Item::Int(3),
                Item::Double(0.5),
                Item::Str("é".into()),
                Item::Array(ArrayPlace {
                    elem: ElemType::F32,
                    rows: 3,
                    cols: 1,
                    vector: true,
                    place: Place {
                        off: 64,
                        len: 12,
                        blob: false,
                    },
                }),
                Item::Pending,
            ],
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &req, b"xyz").unwrap();
        let json = std::str::from_utf8(&buf[4..buf.len() - 11]).unwrap();
        assert!(json.contains(r#"{"array":{"elem":"f32","rows":3,"cols":1,"vector":true,"off":64,"len":12,"blob":false}}"#), "{json}");
        let (back, blob): (Request, Vec<u8>) = read_frame(&mut buf.as_slice()).unwrap().unwrap();
        assert_eq!((back, blob.as_slice()), (req, &b"xyz"[..]));
        assert!(read_frame::<Reply>(&mut [].as_slice()).unwrap().is_none());
        let r: Reply = serde_json::from_str(r#"{"error":"boom"}"#).unwrap();
        assert_eq!(r, Reply::Error("boom".into()));
        assert_eq!(serde_json::to_string(&Reply::Ready).unwrap(), r#""ready""#);
    }
}
