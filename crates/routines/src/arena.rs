//! A worker's arena: a shared-memory file (`memfd`) that the server and the worker both map,
//! so a call's arrays cross the process boundary with one copy each way instead of travelling
//! through a pipe. The server owns it and grows it; the worker sees it as fd 3 and maps the
//! length each request names.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The fd number a worker finds its arena at.
pub const WORKER_FD: RawFd = 3;

/// Offsets in the arena are multiples of this: every element type is aligned, and arrays do
/// not share cache lines.
pub const ALIGN: u64 = 64;

/// A shared mapping of a memfd.
pub struct Arena {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// The mapping is plain memory; whoever holds the arena uses it from one thread at a time.
unsafe impl Send for Arena {}

impl Arena {
    /// A new, empty arena (the server's side).
    pub fn new() -> io::Result<Self> {
        // SAFETY: a plain system call with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"gridwise-arena".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Arena {
            // SAFETY: a fresh fd this arena alone owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            ptr: std::ptr::null_mut(),
            len: 0,
        })
    }

    /// The arena a worker was started with (the worker's side): nothing mapped yet.
    ///
    /// # Safety
    /// `fd` must be the arena's memfd and owned by nobody else in this process.
    pub unsafe fn inherited(fd: RawFd) -> Self {
        Arena {
            // SAFETY: as promised.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            ptr: std::ptr::null_mut(),
            len: 0,
        }
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes the file at least `len` bytes (the server's side) and maps it.
    pub fn grow(&mut self, len: usize) -> io::Result<()> {
        if len <= self.len {
            return Ok(());
        }
        // Grow by half again at least: a worker's calls tend to get larger step by step.
        let len = len.max(self.len + self.len / 2);
        // SAFETY: a plain system call on an fd this arena owns.
        if unsafe { libc::ftruncate(self.fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.map(len)
    }

    /// Maps exactly `len` bytes of the file (the worker's side, told the length).
    pub fn map(&mut self, len: usize) -> io::Result<()> {
        if len == self.len {
            return Ok(());
        }
        self.unmap();
        if len == 0 {
            return Ok(());
        }
        // SAFETY: maps a file this arena owns; the old mapping is gone.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.ptr = p.cast();
        self.len = len;
        Ok(())
    }

    fn unmap(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: unmaps what `map` mapped.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
            self.ptr = std::ptr::null_mut();
            self.len = 0;
        }
    }

    /// The bytes `[off, off + len)`; `None` if they are not all in the mapping.
    pub fn slice_mut(&mut self, off: u64, len: u64) -> Option<&mut [u8]> {
        let end = off.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        if len == 0 {
            return Some(&mut []);
        }
        // SAFETY: in bounds of the live mapping, borrowed mutably from the arena.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off as usize), len as usize) })
    }

    /// The whole mapping.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: the live mapping, borrowed mutably from the arena.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        self.unmap();
    }
}

/// Rounds `x` up to a multiple of [`ALIGN`].
pub fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_one_arena_see_the_same_bytes() {
        let mut a = Arena::new().unwrap();
        a.grow(100).unwrap();
        a.slice_mut(10, 3).unwrap().copy_from_slice(b"abc");
        // SAFETY: a second owner of a duplicate of the fd, as a worker would hold.
        let dup = unsafe { libc::dup(a.fd()) };
        let mut b = unsafe { Arena::inherited(dup) };
        b.map(a.len()).unwrap();
        assert_eq!(b.slice_mut(10, 3).unwrap(), b"abc");
        b.slice_mut(0, 1).unwrap()[0] = b'z';
        assert_eq!(a.slice_mut(0, 1).unwrap()[0], b'z');
        // Growing keeps what was written.
        a.grow(1 << 20).unwrap();
        assert_eq!(a.slice_mut(10, 3).unwrap(), b"abc");
        assert!(a.slice_mut(1 << 20, 1).is_none());
        assert_eq!(align(1), 64);
        assert_eq!(align(128), 128);
    }
}
