//! Copy-on-write rows: which stored row each owner reads (a task its ETC row, a server its row
//! of links) and how many owners read each, so that writing to a shared row copies it first.

#[derive(Clone, Debug)]
pub(crate) struct SharedRows {
    row_of: Vec<u32>,
    readers: Vec<u32>,
}

impl SharedRows {
    /// Owner `i` reads row `row_of[i]`; every entry is below `rows`.
    pub fn new(row_of: Vec<u32>, rows: usize) -> Self {
        let mut readers = vec![0u32; rows];
        for &r in &row_of {
            readers[r as usize] += 1;
        }
        SharedRows { row_of, readers }
    }

    /// The row `owner` reads.
    #[inline]
    pub fn row(&self, owner: usize) -> usize {
        self.row_of[owner] as usize
    }

    /// Per owner, the row it reads.
    pub fn row_of(&self) -> &[u32] {
        &self.row_of
    }

    /// Rows stored, read or not (a row everyone left stays until the storage is rebuilt).
    pub fn rows(&self) -> usize {
        self.readers.len()
    }

    pub fn is_read(&self, row: usize) -> bool {
        self.readers[row] > 0
    }

    /// Makes `owner` read `row` instead.
    pub fn point(&mut self, owner: usize, row: usize) {
        self.readers[self.row_of[owner] as usize] -= 1;
        self.readers[row] += 1;
        self.row_of[owner] = u32::try_from(row).expect("fewer than 2^32 rows");
    }

    /// The row `owner` may write to: its own, or, when others read it too, a new row (numbered
    /// [`rows`](Self::rows) before the call) that `copy(old)` appends to the storage.
    pub fn own(&mut self, owner: usize, copy: impl FnOnce(usize)) -> usize {
        let old = self.row(owner);
        if self.readers[old] <= 1 {
            return old;
        }
        let new = self.readers.len();
        copy(old);
        self.readers.push(0);
        self.point(owner, new);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_to_a_shared_row_copies_it_once() {
        let mut values = vec![1.0, 2.0];
        let mut rows = SharedRows::new(vec![0, 0, 1], 2);
        // Owner 2 alone reads row 1: it writes in place.
        assert_eq!(rows.own(2, |r| values.push(values[r])), 1);
        // Owners 0 and 1 share row 0: the first to write gets a copy, the other keeps row 0.
        assert_eq!(rows.own(1, |r| values.push(values[r])), 2);
        assert_eq!(values, [1.0, 2.0, 1.0]);
        assert_eq!(rows.own(0, |r| values.push(values[r])), 0);
        assert_eq!(rows.row_of(), [0, 2, 1]);
        rows.point(2, 0);
        assert!(!rows.is_read(1) && rows.is_read(0) && rows.rows() == 3);
    }
}
