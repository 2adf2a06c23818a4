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
use gridwise_runtime::wire::Charge;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a staged value waits for its one read: its call or its client comes within
/// moments unless it failed on the way.
pub const STAGED_IDLE: Duration = Duration::from_secs(60);

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
    /// Payload of the kept values (staged ones are not counted: see [`DataStore::stage`]).
    bytes: u64,
}

#[derive(Debug)]
struct Kept {
    /// Shared, so a value is streamed out without a copy while the store goes on.
    value: Arc<Value>,
    /// Kept or last read (fetched, or pulled as a call's input).
    last_used: Instant,
    /// The principal of the client whose call made it.
    owner: String,
    /// Staged for one read: gone once read.
    once: bool,
    /// What a staged value holds against the daemon's budget, given back when it goes.
    _charge: Option<Charge>,
}

impl Kept {
    /// Bytes counted against `data_max_bytes`.
    fn counted(&self) -> u64 {
        if self.once {
            0
        } else {
            self.value.payload_bytes()
        }
    }
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
        Ok(self.insert(&mut held, v, holder, owner, false, None))
    }

    /// Keeps `v` for one read by `owner`: a large argument a client sent ahead of its call,
    /// or a large output waiting for its client. Not held against `data_max_bytes` (a value
    /// inside a call's message would not be either): `charge` holds it against the daemon's
    /// budget instead, and it goes with its one read, its owner's free, or the idle limit.
    pub fn stage(&self, v: Value, holder: &str, owner: &str, charge: Option<Charge>) -> RemoteRef {
        let mut held = lock(&self.inner);
        self.insert(&mut held, v, holder, owner, true, charge)
    }

    fn insert(
        &self,
        held: &mut Held,
        v: Value,
        holder: &str,
        owner: &str,
        once: bool,
        charge: Option<Charge>,
    ) -> RemoteRef {
        let handle = DataHandle::new_random();
        let (kind, bytes) = (v.kind(), v.payload_bytes());
        held.values.insert(
            handle,
            Kept {
                value: Arc::new(v),
                last_used: Instant::now(),
                owner: owner.to_string(),
                once,
                _charge: charge,
            },
        );
        RemoteRef {
            handle,
            holder: holder.to_string(),
            bytes,
            kind,
            idle_ttl_ms: self.idle_ttl.as_millis().try_into().unwrap_or(u64::MAX),
        }
    }

    /// A value kept for `owner` (someone else's is not there, as far as the asker can tell);
    /// reading it counts as a use, and a staged value is gone once read.
    pub fn read(&self, h: DataHandle, owner: &str) -> Option<Arc<Value>> {
        let mut held = lock(&self.inner);
        let kept = held.values.get_mut(&h).filter(|k| k.owner == owner)?;
        if kept.once {
            return held.values.remove(&h).map(|k| k.value);
        }
        kept.last_used = Instant::now();
        Some(kept.value.clone())
    }

    /// Like [`read`](Self::read), as a value of the caller's own: a staged value is moved out,
    /// a kept one copied.
    pub fn get(&self, h: DataHandle, owner: &str) -> Option<Value> {
        self.read(h, owner)
            .map(|v| Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone()))
    }

    /// Whether `h` is a value staged here for one read.
    pub fn is_staged(&self, h: DataHandle) -> bool {
        lock(&self.inner).values.get(&h).is_some_and(|k| k.once)
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
                held.bytes = held.bytes.saturating_sub(k.counted());
                n += 1;
            }
        }
        n
    }

    /// Frees every kept value not used since `now − idle` (zero: kept values never expire),
    /// and every staged value older than the shorter of that and [`STAGED_IDLE`]; returns how
    /// many and their bytes.
    pub fn expire_idle(&self, now: Instant, idle: Duration) -> (u32, u64) {
        let mut held = lock(&self.inner);
        let staged_idle = if idle.is_zero() {
            STAGED_IDLE
        } else {
            idle.min(STAGED_IDLE)
        };
        let stale: Vec<DataHandle> = held
            .values
            .iter()
            .filter(|(_, k)| {
                let limit = if k.once { staged_idle } else { idle };
                !limit.is_zero() && now.saturating_duration_since(k.last_used) > limit
            })
            .map(|(h, _)| *h)
            .collect();
        let (mut bytes, mut counted) = (0, 0);
        for h in &stale {
            if let Some(k) = held.values.remove(h) {
                bytes += k.value.payload_bytes();
                counted += k.counted();
            }
        }
        held.bytes = held.bytes.saturating_sub(counted);
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

    #[test]
    fn a_staged_value_is_moved_out_by_its_one_read_and_not_counted_as_kept() {
        let s = DataStore::new(10, Duration::ZERO);
        let r = s.stage(Value::Bytes(vec![3; 100]), "me:1", "alice", None);
        assert!(s.is_staged(r.handle));
        assert_eq!(
            s.usage(),
            (1, 0),
            "a staged value is not held against data_max_bytes"
        );
        assert_eq!(s.get(r.handle, "mallory"), None);
        assert_eq!(s.get(r.handle, "alice"), Some(Value::Bytes(vec![3; 100])));
        assert_eq!(s.get(r.handle, "alice"), None, "gone once read");
        assert_eq!(s.usage(), (0, 0));
        // A kept value stays after reads, and its reads share it.
        let k = s.put(Value::Bytes(vec![4; 5]), "me:1", "alice").unwrap();
        let (a, b) = (s.read(k.handle, "alice"), s.read(k.handle, "alice"));
        assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap()));
        assert!(!s.is_staged(k.handle));
    }

    #[test]
    fn a_staged_value_gives_its_charge_back_when_it_goes() {
        let budget = gridwise_runtime::wire::MemoryBudget::new(1 << 20);
        let s = DataStore::new(10, Duration::ZERO);
        let charge = budget.try_charge(512 * 1024).unwrap();
        let r = s.stage(Value::Bytes(vec![0; 8]), "me:1", "alice", Some(charge));
        assert!(budget.available_bytes() <= 512 * 1024);
        assert_eq!(s.free(&[r.handle], "alice"), 1);
        assert_eq!(budget.available_bytes(), 1 << 20);
    }
}
