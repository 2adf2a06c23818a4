//! Values kept on this server: outputs a client asked to leave here (remote data), so that a
//! later call — on this server or another, which pulls them straight from here — can use them
//! without a round trip through the client.
//!
//! A kept value belongs to the client that made it (its principal): only that client may fetch,
//! renew or free it, and another server pulls it only for a call of that client.
//!
//! The client frees what it kept once its graph no longer needs it. A client that dies first
//! cannot, so a value nobody has read for `data_idle_ttl_s` is freed here too
//! ([`DataStore::expire_idle`]): an abandoned graph costs memory for a bounded time, not until
//! the server restarts.

use gridwise_proto::{CallError, CallErrorKind, DataHandle, RemoteRef, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The kept values, bounded in bytes.
#[derive(Debug)]
pub struct DataStore {
    inner: Mutex<Held>,
    max_bytes: u64,
    /// Told to holders of references, so they know how often to renew (zero: never expires).
    idle_ttl: Duration,
}

#[derive(Debug, Default)]
struct Held {
    values: HashMap<DataHandle, Kept>,
    bytes: u64,
}

#[derive(Debug)]
struct Kept {
    value: Value,
    /// Kept or last read (fetched, or pulled as a call's input).
    last_used: Instant,
    /// The principal of the client whose call made it.
    owner: String,
}

impl DataStore {
    /// An empty store holding at most `max_bytes` of payload, whose values expire after
    /// `idle_ttl` unused (zero: never).
    pub fn new(max_bytes: u64, idle_ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Held::default()),
            max_bytes,
            idle_ttl,
        }
    }

    /// Keeps `v` for `owner`; its reference names this server as the holder.
    pub fn put(&self, v: Value, holder: &str, owner: &str) -> Result<RemoteRef, CallError> {
        let size = v.payload_bytes();
        let mut held = lock(&self.inner);
        if held.bytes + size > self.max_bytes {
            return Err(CallError::new(
                CallErrorKind::Unavailable,
                format!(
                    "keeping {size} more bytes would pass this server's data_max_bytes ({} of {} in use): free handles you no longer need",
                    held.bytes, self.max_bytes
                ),
            ));
        }
        held.bytes += size;
        let handle = DataHandle::new_random();
        let kind = v.kind();
        held.values.insert(
            handle,
            Kept {
                value: v,
                last_used: Instant::now(),
                owner: owner.to_string(),
            },
        );
        Ok(RemoteRef {
            handle,
            holder: holder.to_string(),
            bytes: size,
            kind,
            idle_ttl_ms: self.idle_ttl.as_millis().try_into().unwrap_or(u64::MAX),
        })
    }

    /// A copy of a value kept for `owner` (someone else's is not there, as far as the asker
    /// can tell); reading it counts as a use.
    pub fn get(&self, h: DataHandle, owner: &str) -> Option<Value> {
        let mut held = lock(&self.inner);
        let kept = held.values.get_mut(&h).filter(|k| k.owner == owner)?;
        kept.last_used = Instant::now();
        Some(kept.value.clone())
    }

    /// Marks `owner`'s values as used now; returns how many of them are held.
    pub fn renew(&self, handles: &[DataHandle], owner: &str) -> u32 {
        let mut held = lock(&self.inner);
        let now = Instant::now();
        let mut n = 0;
        for h in handles {
            if let Some(k) = held.values.get_mut(h).filter(|k| k.owner == owner) {
                k.last_used = now;
                n += 1;
            }
        }
        n
    }

    /// Forgets `owner`'s values; returns how many of them were held.
    pub fn free(&self, handles: &[DataHandle], owner: &str) -> u32 {
        let mut held = lock(&self.inner);
        let mut n = 0;
        for h in handles {
            if held.values.get(h).is_some_and(|k| k.owner == owner)
                && let Some(k) = held.values.remove(h)
            {
                held.bytes = held.bytes.saturating_sub(k.value.payload_bytes());
                n += 1;
            }
        }
        n
    }

    /// Frees every value not used since `now − idle`; returns how many and their bytes.
    pub fn expire_idle(&self, now: Instant, idle: Duration) -> (u32, u64) {
        let mut held = lock(&self.inner);
        let stale: Vec<DataHandle> = held
            .values
            .iter()
            .filter(|(_, k)| now.saturating_duration_since(k.last_used) > idle)
            .map(|(h, _)| *h)
            .collect();
        let mut bytes = 0;
        for h in &stale {
            if let Some(k) = held.values.remove(h) {
                bytes += k.value.payload_bytes();
            }
        }
        held.bytes = held.bytes.saturating_sub(bytes);
        (stale.len() as u32, bytes)
    }

    /// Values held and their payload bytes.
    pub fn usage(&self) -> (usize, u64) {
        let held = lock(&self.inner);
        (held.values.len(), held.bytes)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// "Not here" for a handle, in words a user can act on.
pub fn not_found(h: DataHandle, holder: &str) -> CallError {
    CallError::input_lost(
        h,
        format!(
            "remote value {h} is not on {holder}: it was freed, went unused for longer than that server's data_idle_ttl_s, or the server restarted"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_get_free_within_a_byte_budget() {
        let s = DataStore::new(100, Duration::ZERO);
        let r = s.put(Value::Bytes(vec![1; 60]), "me:1", "alice").unwrap();
        assert_eq!((r.bytes, r.holder.as_str()), (60, "me:1"));
        assert_eq!(s.get(r.handle, "alice"), Some(Value::Bytes(vec![1; 60])));
        let e = s
            .put(Value::Bytes(vec![2; 60]), "me:1", "alice")
            .unwrap_err();
        assert!(e.message.contains("data_max_bytes"), "{e}");
        assert_eq!(s.free(&[r.handle, DataHandle::new_random()], "alice"), 1);
        assert_eq!(s.usage(), (0, 0));
        assert!(s.get(r.handle, "alice").is_none());
        s.put(Value::Bytes(vec![2; 60]), "me:1", "alice").unwrap();
    }

    #[test]
    fn idle_values_expire_and_reading_keeps_a_value_alive() {
        let idle = Duration::from_secs(60);
        let s = DataStore::new(1000, idle);
        let old = s.put(Value::Bytes(vec![1; 10]), "me:1", "alice").unwrap();
        let read = s.put(Value::Bytes(vec![2; 20]), "me:1", "alice").unwrap();
        let start = Instant::now();
        // Nothing is older than the limit yet.
        assert_eq!(s.expire_idle(start, idle), (0, 0));
        assert_eq!(read.idle_ttl_ms, 60_000);
        // A read refreshes `read`; a minute and a bit later only `old` has been idle too long.
        std::thread::sleep(Duration::from_millis(20));
        assert!(s.get(read.handle, "alice").is_some());
        let later = start + idle + Duration::from_millis(10);
        assert_eq!(s.expire_idle(later, idle), (1, 10));
        assert!(s.get(old.handle, "alice").is_none());
        assert_eq!(s.usage(), (1, 20));
        // Renewing counts as a use too.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(s.renew(&[read.handle, old.handle], "alice"), 1);
        assert_eq!(s.expire_idle(later, idle), (0, 0));
        assert_eq!(
            s.expire_idle(later + idle + Duration::from_secs(1), idle),
            (1, 20)
        );
        assert_eq!(s.usage(), (0, 0));
    }

    #[test]
    fn a_value_belongs_to_the_client_that_kept_it() {
        let s = DataStore::new(1000, Duration::ZERO);
        let r = s.put(Value::Int(7), "me:1", "alice").unwrap();
        assert_eq!(s.get(r.handle, "mallory"), None);
        assert_eq!(s.renew(&[r.handle], "mallory"), 0);
        assert_eq!(s.free(&[r.handle], "mallory"), 0);
        assert_eq!(s.get(r.handle, "alice"), Some(Value::Int(7)));
        assert_eq!(s.free(&[r.handle], "alice"), 1);
    }
}
