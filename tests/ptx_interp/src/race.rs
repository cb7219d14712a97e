//! Race detection, as compute-sanitizer's racecheck does it: per byte, who wrote it and
//! who read it since the last synchronisation; a write and another thread's access of the
//! same byte with no synchronisation between them is a race.
//!
//! Shared memory is synchronised by `bar.sync` (its log is cleared there); global memory
//! only by the end of the launch, so any two threads of one launch touching the same
//! global byte, one of them writing, race. Atomics are not logged.

/// No thread (thread ids are stored plus one).
const NOBODY: u32 = 0;

/// Who touched each byte: one writer, and up to two distinct readers (two are enough to
/// always name a reader other than a later writer).
#[derive(Default)]
pub(crate) struct AccessLog {
    writer: Vec<u32>,
    readers: Vec<[u32; 2]>,
}

/// A conflicting earlier access: the other thread's id and whether it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Conflict {
    pub offset: usize,
    pub other: u32,
    pub other_wrote: bool,
}

impl AccessLog {
    pub(crate) fn new(bytes: usize) -> AccessLog {
        AccessLog { writer: vec![NOBODY; bytes], readers: vec![[NOBODY; 2]; bytes] }
    }

    pub(crate) fn clear(&mut self) {
        self.writer.fill(NOBODY);
        self.readers.fill([NOBODY; 2]);
    }

    /// Logs thread `thread`'s access of `len` bytes at `offset` (in bounds: checked by
    /// the caller), or the first conflict with another thread.
    pub(crate) fn access(&mut self, offset: usize, len: usize, thread: u32, write: bool) -> Result<(), Conflict> {
        let me = thread + 1;
        for byte in offset..offset + len {
            let writer = self.writer[byte];
            if writer != NOBODY && writer != me {
                return Err(Conflict { offset: byte, other: writer - 1, other_wrote: true });
            }
            let readers = &mut self.readers[byte];
            if write {
                if let Some(&reader) = readers.iter().find(|&&r| r != NOBODY && r != me) {
                    return Err(Conflict { offset: byte, other: reader - 1, other_wrote: false });
                }
                self.writer[byte] = me;
            } else if readers[0] == NOBODY {
                readers[0] = me;
            } else if readers[0] != me && readers[1] == NOBODY {
                readers[1] = me;
            }
        }
        Ok(())
    }
}

/// The logs of one launch: shared memory of the running CTA, and each global allocation
/// (created on first access).
pub(crate) struct RaceLogs {
    pub shared: AccessLog,
    global: Vec<Option<AccessLog>>,
}

impl RaceLogs {
    pub(crate) fn new(shared_bytes: usize, allocations: usize) -> RaceLogs {
        RaceLogs { shared: AccessLog::new(shared_bytes), global: (0..allocations).map(|_| None).collect() }
    }

    pub(crate) fn global(&mut self, allocation: usize, allocation_len: usize) -> &mut AccessLog {
        if allocation >= self.global.len() {
            self.global.resize_with(allocation + 1, || None);
        }
        self.global[allocation].get_or_insert_with(|| AccessLog::new(allocation_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_between_threads_only() {
        let mut log = AccessLog::new(8);
        log.access(0, 4, 0, true).unwrap();
        log.access(0, 4, 0, false).unwrap(); // the writer itself
        assert_eq!(log.access(2, 2, 1, false), Err(Conflict { offset: 2, other: 0, other_wrote: true }));
        log.access(4, 4, 1, false).unwrap();
        log.access(4, 4, 2, false).unwrap(); // readers never race with readers
        assert_eq!(log.access(4, 1, 1, true), Err(Conflict { offset: 4, other: 2, other_wrote: false }));
        log.clear();
        log.access(0, 8, 3, true).unwrap();
    }
}
