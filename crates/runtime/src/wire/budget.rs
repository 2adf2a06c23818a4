//! A daemon's memory budget: bytes that requests may make it hold at once.
//!
//! Everything a request can make a daemon allocate — a frame still arriving, a call's inputs and
//! outputs — is charged here before it is allocated, so a peer cannot make a daemon grow past
//! what its operator allowed, whatever it sends. Charges are counted in KiB (a `u32` of KiB
//! covers 4 TiB) on a fair semaphore: a call waiting for memory is served in arrival order and
//! a large one is not starved by a stream of small ones.

use std::sync::Arc;
use tokio::sync::Semaphore;

const KIB: u64 = 1024;

/// The most a budget can hold: `u32::MAX` KiB, about 4 TiB.
pub const MAX_BUDGET_BYTES: u64 = u32::MAX as u64 * KIB;

fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(KIB)
}

/// Bytes a daemon lets requests occupy at once.
#[derive(Debug)]
pub struct MemoryBudget {
    sem: Semaphore,
    total_kib: u32,
}

/// A request that can never fit: it alone needs more than the whole budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("needs {needed} bytes, more than the whole memory budget of {total} bytes")]
pub struct OverBudget {
    /// Bytes asked for, as given (not rounded up to whole KiB).
    pub needed: u64,
    /// The whole budget, bytes: a whole number of KiB.
    pub total: u64,
}

impl MemoryBudget {
    /// A budget of `bytes` (capped at [`MAX_BUDGET_BYTES`]).
    pub fn new(bytes: u64) -> Arc<Self> {
        let total_kib = kib(bytes.min(MAX_BUDGET_BYTES)) as u32;
        Arc::new(Self {
            sem: Semaphore::new(total_kib as usize),
            total_kib,
        })
    }

    /// The whole budget, bytes.
    pub fn total_bytes(&self) -> u64 {
        self.total_kib as u64 * KIB
    }

    /// What is not charged now, bytes.
    pub fn available_bytes(&self) -> u64 {
        self.sem.available_permits() as u64 * KIB
    }

    /// Charges `bytes` now if they are free; `None` otherwise (nothing waits).
    pub fn try_charge(self: &Arc<Self>, bytes: u64) -> Option<Charge> {
        let k = kib(bytes);
        let n = u32::try_from(k).ok()?;
        let permit = self.sem.try_acquire_many(n).ok()?;
        permit.forget();
        Some(Charge {
            budget: self.clone(),
            kib: n,
        })
    }

    /// Charges `bytes`, waiting behind earlier waiters until they are free; refuses at once
    /// what could never fit.
    pub async fn charge(self: &Arc<Self>, bytes: u64) -> Result<Charge, OverBudget> {
        let over = OverBudget {
            needed: bytes,
            total: self.total_bytes(),
        };
        let k = kib(bytes);
        if k > self.total_kib as u64 {
            return Err(over);
        }
        let n = k as u32;
        // The semaphore is never closed, so acquiring only fails if it were.
        let permit = self.sem.acquire_many(n).await.map_err(|_| over)?;
        permit.forget();
        Ok(Charge {
            budget: self.clone(),
            kib: n,
        })
    }

    /// An empty charge, to grow later (a frame that has only started to arrive).
    pub fn empty_charge(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            kib: 0,
        }
    }
}

/// Bytes held against a [`MemoryBudget`]; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    kib: u32,
}

impl Charge {
    /// Bytes held, rounded up to whole KiB as the budget counts them.
    pub fn bytes(&self) -> u64 {
        self.kib as u64 * KIB
    }

    /// Grows (or shrinks) the charge to `bytes`; false, holding what it held, when the budget
    /// lacks the difference.
    pub fn resize(&mut self, bytes: u64) -> bool {
        let Ok(want) = u32::try_from(kib(bytes)) else {
            return false;
        };
        if want > self.kib {
            match self.budget.sem.try_acquire_many(want - self.kib) {
                Ok(p) => p.forget(),
                Err(_) => return false,
            }
        } else if want < self.kib {
            self.budget.sem.add_permits((self.kib - want) as usize);
        }
        self.kib = want;
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.kib > 0 {
            self.budget.sem.add_permits(self.kib as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_given_back_when_dropped() {
        let b = MemoryBudget::new(10 * 1024);
        let a = b.try_charge(6 * 1024).unwrap();
        assert!(b.try_charge(5 * 1024).is_none());
        let c = b.try_charge(4 * 1024).unwrap();
        assert_eq!(b.available_bytes(), 0);
        drop(a);
        drop(c);
        assert_eq!(b.available_bytes(), 10 * 1024);
    }

    #[test]
    fn resizing_takes_and_gives_the_difference() {
        let b = MemoryBudget::new(8 * 1024);
        let mut c = b.empty_charge();
        assert!(c.resize(3000));
        assert_eq!(c.bytes(), 3 * 1024);
        assert!(!c.resize(9 * 1024));
        assert_eq!(c.bytes(), 3 * 1024);
        assert!(c.resize(1));
        assert_eq!(b.available_bytes(), 7 * 1024);
        drop(c);
        assert_eq!(b.available_bytes(), 8 * 1024);
    }

    #[tokio::test]
    async fn a_charge_waits_for_memory_and_never_fits_is_refused() {
        let b = MemoryBudget::new(4 * 1024);
        assert_eq!(
            b.charge(5 * 1024).await.unwrap_err(),
            OverBudget {
                needed: 5 * 1024,
                total: 4 * 1024
            }
        );
        let held = b.charge(3 * 1024).await.unwrap();
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.charge(2 * 1024).await.map(|c| c.bytes()) });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap(), 2 * 1024);
    }
}
