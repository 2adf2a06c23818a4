//! Values kept on this server: outputs a client asked to leave here (remote data), so that a
//! later call — on this server or another, which pulls them straight from here — can use them
//! without a round trip through the client.

use gridwise_proto::{CallError, CallErrorKind, DataHandle, RemoteRef, Value};
use std::collections::HashMap;
use std::sync::Mutex;

/// The kept values, bounded in bytes.
#[derive(Debug)]
pub struct DataStore {
    values: Mutex<HashMap<DataHandle, Value>>,
    bytes: Mutex<u64>,
    max_bytes: u64,
}

impl DataStore {
    /// An empty store holding at most `max_bytes` of payload.
    pub fn new(max_bytes: u64) -> Self {
        Self {
            values: Mutex::new(HashMap::new()),
            bytes: Mutex::new(0),
            max_bytes,
        }
    }

    /// Keeps `v`; its reference names this server as the holder.
    pub fn put(&self, v: Value, holder: &str) -> Result<RemoteRef, CallError> {
        let size = v.payload_bytes();
        let mut bytes = lock(&self.bytes);
        if *bytes + size > self.max_bytes {
            return Err(CallError::new(
                CallErrorKind::Unavailable,
                format!(
                    "keeping {size} more bytes would pass this server's data_max_bytes ({} of {} in use): free handles you no longer need",
                    *bytes, self.max_bytes
                ),
            ));
        }
        *bytes += size;
        let handle = DataHandle::new_random();
        let kind = v.kind();
        lock(&self.values).insert(handle, v);
        Ok(RemoteRef {
            handle,
            holder: holder.to_string(),
            bytes: size,
            kind,
        })
    }

    /// A copy of a kept value.
    pub fn get(&self, h: DataHandle) -> Option<Value> {
        lock(&self.values).get(&h).cloned()
    }

    /// Forgets values; returns how many were held.
    pub fn free(&self, handles: &[DataHandle]) -> u32 {
        let mut values = lock(&self.values);
        let mut bytes = lock(&self.bytes);
        let mut n = 0;
        for h in handles {
            if let Some(v) = values.remove(h) {
                *bytes = bytes.saturating_sub(v.payload_bytes());
                n += 1;
            }
        }
        n
    }

    /// Values held and their payload bytes.
    pub fn usage(&self) -> (usize, u64) {
        (lock(&self.values).len(), *lock(&self.bytes))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// "Not here" for a handle, in words a user can act on.
pub fn not_found(h: DataHandle, holder: &str) -> CallError {
    CallError::new(
        CallErrorKind::BadArguments,
        format!("remote value {h} is not on {holder}: it was freed, or that server restarted"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_get_free_within_a_byte_budget() {
        let s = DataStore::new(100);
        let r = s.put(Value::Bytes(vec![1; 60]), "me:1").unwrap();
        assert_eq!((r.bytes, r.holder.as_str()), (60, "me:1"));
        assert_eq!(s.get(r.handle), Some(Value::Bytes(vec![1; 60])));
        let e = s.put(Value::Bytes(vec![2; 60]), "me:1").unwrap_err();
        assert!(e.message.contains("data_max_bytes"), "{e}");
        assert_eq!(s.free(&[r.handle, DataHandle::new_random()]), 1);
        assert_eq!(s.usage(), (0, 0));
        assert!(s.get(r.handle).is_none());
        s.put(Value::Bytes(vec![2; 60]), "me:1").unwrap();
    }
}
