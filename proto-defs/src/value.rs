//! Argument and result values. Arrays travel as one contiguous little-endian byte buffer, never
//! as per-element serde sequences, so a large matrix costs a memcpy, not a million tags.

use crate::ids::DataHandle;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Values whose payload is at least this large travel on bulk connections (raw bytes, outside
/// the RPC's frames); smaller ones stay in the RPC, where the extra round trip of a bulk
/// transfer would cost more than the copies it saves.
pub const BULK_MIN_BYTES: u64 = 1 << 20;

/// The element type of a vector or matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ElemType {
    /// 64-bit float
    F64,
    /// 32-bit float
    F32,
    /// 32-bit signed integer
    I32,
    /// 64-bit signed integer
    I64,
}

impl ElemType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::F64 | ElemType::I64 => 8,
            ElemType::F32 | ElemType::I32 => 4,
        }
    }

    /// The IDL spelling (`f64`, `f32`, `i32`, `i64`).
    pub fn as_str(self) -> &'static str {
        match self {
            ElemType::F64 => "f64",
            ElemType::F32 => "f32",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ElemType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "f64" | "double" => Ok(ElemType::F64),
            "f32" | "float" => Ok(ElemType::F32),
            "i32" => Ok(ElemType::I32),
            "i64" => Ok(ElemType::I64),
            other => Err(format!(
                "unknown element type `{other}`: use f64, f32, i32 or i64"
            )),
        }
    }
}

/// An empty buffer with room for exactly `len` bytes of array data: one given back through
/// [`recycle`] if one of that size is spare, whose pages are in already. A new large one asks the
/// kernel for transparent huge pages: filling a fresh buffer otherwise faults once per 4 KiB
/// page, which on a VM costs about as much as the copy that fills it. Advice only: where huge
/// pages are off, nothing changes.
pub fn array_bytes(len: usize) -> Result<Vec<u8>, std::collections::TryReserveError> {
    const HUGE: usize = 2 << 20;
    if let Some(buf) = spare::take(len) {
        return Ok(buf);
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(len)?;
    let cap = buf.capacity();
    if cap >= 2 * HUGE {
        let start = buf.as_mut_ptr() as usize;
        // Whole huge pages inside the allocation only: advice must start page-aligned.
        let (first, end) = (start.next_multiple_of(HUGE), (start + cap) / HUGE * HUGE);
        if end > first {
            // SAFETY: the range lies inside `buf`'s allocation; the advice changes no content.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    Ok(buf)
}

/// Caps the bytes of spare buffers [`recycle`] keeps (256 MiB unless set): a server holds them
/// beside what its calls are charged, so it keeps no more than its memory budget allows.
pub fn limit_spare(bytes: usize) {
    spare::limit(bytes);
}

/// Gives a large array buffer back for [`array_bytes`] to hand out again, so that a program
/// sending or receiving arrays of the same size call after call fills pages it already has
/// instead of faulting in fresh ones (on a VM a fresh 64 MiB costs 10–300 ms, a warm copy
/// 8 ms). Small buffers are simply dropped; a few large ones are kept, for ten seconds at most
/// (module `spare`).
pub fn recycle(buf: Vec<u8>) {
    spare::give(buf);
}

mod spare {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// Smaller buffers cost little to fault in: they are not kept.
    const LEAST: usize = 4 << 20;
    /// At most this many buffers are kept, the oldest given up first …
    const MOST: usize = 4;
    /// … and at most this many bytes unless [`limit`] says fewer …
    pub(super) const MOST_BYTES: usize = 256 << 20;
    static LIMIT: AtomicUsize = AtomicUsize::new(MOST_BYTES);
    /// … and none unused for longer than this: a program between bursts holds no spare pages.
    pub(super) const IDLE: Duration = Duration::from_secs(10);

    /// Spare buffers with when each was given back, oldest first.
    static SPARE: Mutex<Vec<(Instant, Vec<u8>)>> = Mutex::new(Vec::new());

    fn spare() -> std::sync::MutexGuard<'static, Vec<(Instant, Vec<u8>)>> {
        SPARE.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes out, oldest first, the buffers unused for `idle` or more, then as many more as
    /// leave at most `most` of them and `bytes` bytes; they are returned to be freed outside
    /// the lock (returning 64 MiB to the system takes a while).
    fn trim(
        spare: &mut Vec<(Instant, Vec<u8>)>,
        idle: Duration,
        most: usize,
        bytes: usize,
    ) -> Vec<Vec<u8>> {
        let now = Instant::now();
        let mut held: usize = spare.iter().map(|(_, b)| b.capacity()).sum();
        let mut drop_first = 0;
        for (at, b) in spare.iter() {
            let stale = now.duration_since(*at) >= idle;
            if !stale && spare.len() - drop_first <= most && held <= bytes {
                break;
            }
            held -= b.capacity();
            drop_first += 1;
        }
        spare.drain(..drop_first).map(|(_, b)| b).collect()
    }

    fn most_bytes() -> usize {
        LIMIT.load(Ordering::Relaxed)
    }

    /// Sets the bytes kept, at most [`MOST_BYTES`], and frees what is over it now.
    pub(super) fn limit(bytes: usize) {
        LIMIT.store(bytes.min(MOST_BYTES), Ordering::Relaxed);
        release(IDLE);
    }

    pub(super) fn give(mut buf: Vec<u8>) {
        let most_bytes = most_bytes();
        if buf.capacity() < LEAST || buf.capacity() > most_bytes {
            return;
        }
        buf.clear();
        let mut spare = spare();
        spare.push((Instant::now(), buf));
        let gone = trim(&mut spare, IDLE, MOST, most_bytes);
        drop(spare);
        drop(gone);
    }

    /// A spare buffer of exactly `len` bytes' room, the newest first (its pages are the most
    /// likely still cached); `None` if there is none, once room is made for a new one.
    pub(super) fn take(len: usize) -> Option<Vec<u8>> {
        if len < LEAST {
            return None;
        }
        let mut spare = spare();
        if let Some(i) = spare.iter().rposition(|(_, b)| b.capacity() == len) {
            return Some(spare.remove(i).1);
        }
        // A new buffer comes: the spare ones make room for it, so that spare and new together
        // stay within the limit (a program moving a larger array than before holds no more
        // than it did).
        let gone = trim(&mut spare, IDLE, MOST, most_bytes().saturating_sub(len));
        drop(spare);
        drop(gone);
        None
    }

    /// Frees the buffers unused for longer than `idle`.
    pub(super) fn release(idle: Duration) {
        let gone = trim(&mut spare(), idle, MOST, most_bytes());
        drop(gone);
    }
}

/// Frees the spare buffers [`recycle`] kept that no array took for the last ten seconds (a
/// daemon calls this now and then, so that when the calls stop it holds no spare pages).
pub fn release_idle_spare() {
    spare::release(spare::IDLE);
}

/// A dense vector (cols = 1) or row-major matrix.
#[derive(PartialEq, Serialize, Deserialize)]
pub struct Array {
    pub elem: ElemType,
    /// Number of rows (the length, for a vector).
    pub rows: u64,
    /// Number of columns (1 for a vector).
    pub cols: u64,
    /// rows × cols elements, row-major, little-endian.
    #[serde(with = "serde_bytes")]
    pub data: Vec<u8>,
}

impl Clone for Array {
    /// Into a buffer from [`array_bytes`] (a kernel's copy of a large input is filled as fast
    /// as it is copied).
    fn clone(&self) -> Self {
        // Out of memory, the copy below fails as a derived clone would.
        let mut data = array_bytes(self.data.len()).unwrap_or_default();
        data.extend_from_slice(&self.data);
        Array {
            elem: self.elem,
            rows: self.rows,
            cols: self.cols,
            data,
        }
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Array<{}>[{}x{}; {} bytes]",
            self.elem,
            self.rows,
            self.cols,
            self.data.len()
        )
    }
}

macro_rules! typed_array {
    ($from:ident, $try_from:ident, $to:ident, $t:ty, $elem:expr) => {
        /// Builds an array from native values (row-major).
        pub fn $from(rows: u64, cols: u64, values: &[$t]) -> Array {
            // Out of memory, the extension below fails as an allocation would.
            let mut data =
                array_bytes(values.len() * std::mem::size_of::<$t>()).unwrap_or_default();
            for v in values {
                data.extend_from_slice(&v.to_le_bytes());
            }
            Array {
                elem: $elem,
                rows,
                cols,
                data,
            }
        }

        /// Like the infallible builder, but `None` instead of aborting when the buffer cannot be
        /// allocated: for arrays whose size a request chose.
        pub fn $try_from(rows: u64, cols: u64, values: &[$t]) -> Option<Array> {
            let mut data =
                array_bytes(values.len().checked_mul(std::mem::size_of::<$t>())?).ok()?;
            for v in values {
                data.extend_from_slice(&v.to_le_bytes());
            }
            Some(Array {
                elem: $elem,
                rows,
                cols,
                data,
            })
        }

        /// The elements as native values, or `None` for another element type or a short buffer.
        pub fn $to(&self) -> Option<Vec<$t>> {
            const N: usize = std::mem::size_of::<$t>();
            if self.elem != $elem || self.data.len() % N != 0 {
                return None;
            }
            Some(
                self.data
                    .chunks_exact(N)
                    .map(|c| {
                        let mut b = [0u8; N];
                        b.copy_from_slice(c);
                        <$t>::from_le_bytes(b)
                    })
                    .collect(),
            )
        }
    };
}

impl Array {
    typed_array!(from_f64, try_from_f64, to_f64, f64, ElemType::F64);
    typed_array!(from_f32, try_from_f32, to_f32, f32, ElemType::F32);
    typed_array!(from_i32, try_from_i32, to_i32, i32, ElemType::I32);
    typed_array!(from_i64, try_from_i64, to_i64, i64, ElemType::I64);

    /// Number of elements the shape promises.
    pub fn len(&self) -> u64 {
        self.rows.saturating_mul(self.cols)
    }

    /// Whether the shape holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the byte buffer holds exactly rows × cols elements.
    pub fn is_well_formed(&self) -> bool {
        self.len()
            .checked_mul(self.elem.size() as u64)
            .is_some_and(|n| n == self.data.len() as u64)
    }
}

/// One argument or result value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// `int`
    Int(i64),
    /// `double`
    Double(f64),
    /// `string`
    Str(String),
    /// `bytes`
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    /// `vector<T>[n]`
    Vector(Array),
    /// `matrix<T>[r,c]`
    Matrix(Array),
    /// A value that stays on a server: any argument but an `int` may be one. The server that
    /// runs the call pulls it from its holder; a kept output comes back as one.
    Ref(RemoteRef),
}

/// Where a remote value lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteRef {
    /// Its name on the holder.
    pub handle: DataHandle,
    /// The holder's address (host:port).
    pub holder: String,
    /// Its payload size, for transfer estimates.
    pub bytes: u64,
    /// Its kind in IDL words (e.g. `matrix<f64>[500,500]`), for messages.
    pub kind: String,
    /// The holder frees it once nobody has read or renewed it for this long, ms (0: never);
    /// whoever still needs it renews it well within that.
    #[serde(default)]
    pub idle_ttl_ms: u64,
}

impl Value {
    /// Done with: an array's buffer goes back to [`recycle`] for the next array of its size.
    pub fn recycle(self) {
        if let Value::Vector(a) | Value::Matrix(a) = self {
            recycle(a.data);
        }
    }

    /// A vector of f64.
    pub fn vector_f64(values: &[f64]) -> Value {
        Value::Vector(Array::from_f64(values.len() as u64, 1, values))
    }

    /// A row-major rows × cols matrix of f64; `values.len()` must be rows × cols.
    pub fn matrix_f64(rows: u64, cols: u64, values: &[f64]) -> Value {
        Value::Matrix(Array::from_f64(rows, cols, values))
    }

    /// The integer, if this is an `Int`.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The float, if this is a `Double`.
    pub fn as_double(&self) -> Option<f64> {
        match self {
            Value::Double(d) => Some(*d),
            _ => None,
        }
    }

    /// The string, if this is a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if this is a vector or a matrix.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Vector(a) | Value::Matrix(a) => Some(a),
            _ => None,
        }
    }

    /// The kind in IDL words, for error messages.
    pub fn kind(&self) -> String {
        match self {
            Value::Int(_) => "int".into(),
            Value::Double(_) => "double".into(),
            Value::Str(_) => "string".into(),
            Value::Bytes(_) => "bytes".into(),
            Value::Vector(a) => format!("vector<{}>[{}]", a.elem, a.rows),
            Value::Matrix(a) => format!("matrix<{}>[{},{}]", a.elem, a.rows, a.cols),
            Value::Ref(r) => format!("remote {} on {}", r.kind, r.holder),
        }
    }

    /// Bytes this value puts on the wire (payload only), for transfer estimates.
    pub fn payload_bytes(&self) -> u64 {
        match self {
            Value::Int(_) | Value::Double(_) => 8,
            Value::Str(s) => s.len() as u64,
            Value::Bytes(b) => b.len() as u64,
            Value::Vector(a) | Value::Matrix(a) => a.data.len() as u64,
            Value::Ref(r) => r.bytes,
        }
    }

    /// Whether it travels on a bulk connection rather than inside an RPC's frame: bytes and
    /// arrays of at least [`BULK_MIN_BYTES`].
    pub fn goes_bulk(&self) -> bool {
        matches!(self, Value::Bytes(_) | Value::Vector(_) | Value::Matrix(_))
            && self.payload_bytes() >= BULK_MIN_BYTES
    }

    /// Bytes it puts inside the request frame that carries it: none when it goes on a bulk
    /// connection or is pulled by the server (a remote reference).
    pub fn inline_bytes(&self) -> u64 {
        if self.goes_bulk() || matches!(self, Value::Ref(_)) {
            0
        } else {
            self.payload_bytes()
        }
    }

    /// A JSON rendering for command-line output: numbers, strings, arrays (matrices as rows).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        fn rows<T: Serialize + Clone>(v: Vec<T>, cols: u64, matrix: bool) -> serde_json::Value {
            if !matrix {
                return json!(v);
            }
            let cols = cols.max(1) as usize;
            json!(v.chunks(cols).map(|r| r.to_vec()).collect::<Vec<_>>())
        }
        match self {
            Value::Int(i) => json!(i),
            Value::Double(d) => json!(d),
            Value::Str(s) => json!(s),
            Value::Bytes(b) => json!(b),
            Value::Ref(r) => {
                json!({"handle": r.handle.to_string(), "holder": r.holder, "bytes": r.bytes, "kind": r.kind})
            }
            Value::Vector(a) | Value::Matrix(a) => {
                let m = matches!(self, Value::Matrix(_));
                match a.elem {
                    ElemType::F64 => rows(a.to_f64().unwrap_or_default(), a.cols, m),
                    ElemType::F32 => rows(a.to_f32().unwrap_or_default(), a.cols, m),
                    ElemType::I32 => rows(a.to_i32().unwrap_or_default(), a.cols, m),
                    ElemType::I64 => rows(a.to_i64().unwrap_or_default(), a.cols, m),
                }
            }
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn f64_arrays_round_trip(v in proptest::collection::vec(any::<f64>(), 0..64)) {
            let a = Array::from_f64(v.len() as u64, 1, &v);
            prop_assert!(a.is_well_formed());
            let back = a.to_f64().unwrap();
            prop_assert_eq!(back.len(), v.len());
            for (x, y) in back.iter().zip(&v) {
                prop_assert_eq!(x.to_bits(), y.to_bits());
            }
        }

        #[test]
        fn i32_arrays_round_trip(v in proptest::collection::vec(any::<i32>(), 0..64)) {
            let a = Array::from_i32(1, v.len() as u64, &v);
            prop_assert_eq!(a.to_i32().unwrap(), v);
        }
    }

    #[test]
    fn a_large_array_is_copied_whole_into_an_exact_buffer() {
        // 9 MiB and a bit: huge pages are advised over the aligned middle only.
        let n = (9 << 20) / 8 + 3;
        let v: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
        let a = Array::from_f64(n as u64, 1, &v);
        let b = a.clone();
        assert_eq!(b, a);
        assert_eq!(b.data.capacity(), a.data.len());
        assert_eq!(b.to_f64().unwrap()[n - 1], (n - 1) as f64 * 0.5);
        let small = array_bytes(100).unwrap();
        assert!(small.is_empty() && small.capacity() == 100);
    }

    #[test]
    fn a_recycled_buffer_is_handed_out_again_for_the_same_size_only() {
        // A size no other test uses, so tests running at once cannot take each other's.
        let len = (5 << 20) + 24;
        let mut a = array_bytes(len).unwrap();
        a.resize(len, 7);
        let at = a.as_ptr();
        recycle(a);
        let other = array_bytes(len + 8).unwrap();
        assert!(other.as_ptr() != at);
        let b = array_bytes(len).unwrap();
        assert_eq!((b.as_ptr(), b.len(), b.capacity()), (at, 0, len));
        // Given up for good once taken: the next of that size is new.
        let next = array_bytes(len).unwrap();
        assert!(next.as_ptr() != at);
        // Nor is one kept once it has been spare too long.
        recycle(b);
        spare::release(std::time::Duration::ZERO);
        assert!(spare::take(len).is_none());
        // A new buffer too large to sit beside the spare ones has them freed first.
        let mut c = array_bytes(len).unwrap();
        c.resize(len, 1);
        recycle(c);
        assert!(spare::take((256 << 20) - len + 1).is_none());
        assert!(
            spare::take(len).is_none(),
            "a spare buffer stayed beside a new one"
        );
        // Under a limit (here, in the one test that gives back buffers, so that no other
        // test's buffers are affected), a buffer over it is not kept, and those held past a
        // new limit are freed at once.
        let mut d = array_bytes(len).unwrap();
        d.resize(len, 2);
        recycle(d);
        limit_spare(len - 1);
        assert!(spare::take(len).is_none(), "kept past a lower limit");
        let mut e = array_bytes(len).unwrap();
        e.resize(len, 3);
        recycle(e);
        assert!(spare::take(len).is_none(), "kept over the limit");
        limit_spare(len);
        let mut f = array_bytes(len).unwrap();
        f.resize(len, 4);
        let at = f.as_ptr();
        recycle(f);
        let g = array_bytes(len).unwrap();
        assert_eq!(g.as_ptr(), at, "not kept within the limit");
        limit_spare(usize::MAX);
    }

    #[test]
    fn wrong_element_type_is_refused() {
        let a = Array::from_f64(2, 1, &[1.0, 2.0]);
        assert!(a.to_i64().is_none());
        assert!(a.to_f32().is_none());
    }

    #[test]
    fn short_buffer_is_not_well_formed() {
        let mut a = Array::from_f64(2, 2, &[1.0, 2.0, 3.0, 4.0]);
        a.data.pop();
        assert!(!a.is_well_formed());
        let huge = Array {
            elem: ElemType::F64,
            rows: u64::MAX,
            cols: 2,
            data: vec![],
        };
        assert!(!huge.is_well_formed());
    }

    #[test]
    fn matrix_renders_as_rows() {
        let m = Value::matrix_f64(2, 2, &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m.to_json().to_string(), "[[1.0,2.0],[3.0,4.0]]");
        assert_eq!(m.kind(), "matrix<f64>[2,2]");
    }
}
