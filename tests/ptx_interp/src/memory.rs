//! The device's global memory: allocations at fixed, never-zero addresses, with an
//! unmapped gap after each so that an access running past an allocation's end is caught
//! (as compute-sanitizer's memcheck does) instead of landing in a neighbour. Addresses
//! are never handed out twice, so a freed allocation's stale pointer is an error too.

use std::fmt;

/// Where the first allocation starts: far from 0 and from shared-memory offsets.
const FIRST_ADDRESS: u64 = 0x1_0000_0000;
/// The unmapped bytes left after every allocation.
const GUARD_BYTES: u64 = 256;
/// cudaMalloc's alignment, the least an allocation gets.
const MIN_ALIGN: u64 = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryError {
    /// `[address, address + len)` is not inside one allocation.
    OutOfBounds { address: u64, len: u64 },
    /// An allocation that does not fit the 64-bit address space or the host.
    TooLarge { bytes: u64 },
    /// `free` of an address that is not the start of a live allocation.
    NotAllocated { address: u64 },
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::OutOfBounds { address, len } => {
                write!(f, "{len} bytes at {address:#x} are not inside one allocation")
            }
            MemoryError::TooLarge { bytes } => write!(f, "cannot allocate {bytes} bytes"),
            MemoryError::NotAllocated { address } => {
                write!(f, "{address:#x} is not the start of a live allocation (freed already, or never allocated)")
            }
        }
    }
}

impl std::error::Error for MemoryError {}

struct Allocation {
    base: u64,
    bytes: Vec<u8>,
}

/// Global memory: the allocations, sorted by address.
#[derive(Default)]
pub struct Memory {
    allocations: Vec<Allocation>,
    /// The allocation the last access hit: most accesses hit it again.
    last_hit: usize,
    /// Where the next allocation may start (0 before the first): past every allocation
    /// ever made, freed ones included.
    next_free: u64,
}

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// A zeroed allocation of `bytes` bytes aligned to `align` (rounded up to a power of
    /// two, at least 256): its device address, never 0.
    pub fn alloc(&mut self, bytes: u64, align: u64) -> Result<u64, MemoryError> {
        let too_large = MemoryError::TooLarge { bytes };
        let align = align.max(MIN_ALIGN).checked_next_power_of_two().ok_or(too_large.clone())?;
        let base = self.next_free.max(FIRST_ADDRESS).checked_next_multiple_of(align).ok_or(too_large.clone())?;
        let next_free = base.checked_add(bytes).and_then(|e| e.checked_add(GUARD_BYTES)).ok_or(too_large.clone())?;
        let len = usize::try_from(bytes).map_err(|_| too_large.clone())?;
        let mut storage = Vec::new();
        storage.try_reserve_exact(len).map_err(|_| too_large)?;
        storage.resize(len, 0);
        self.allocations.push(Allocation { base, bytes: storage });
        self.next_free = next_free;
        Ok(base)
    }

    /// Releases the allocation starting at `address`: its size in bytes.
    pub fn free(&mut self, address: u64) -> Result<u64, MemoryError> {
        let index = self
            .allocations
            .binary_search_by_key(&address, |a| a.base)
            .map_err(|_| MemoryError::NotAllocated { address })?;
        Ok(self.allocations.remove(index).bytes.len() as u64)
    }

    /// The start and size of the allocation holding byte `address`, if one does.
    pub fn allocation(&self, address: u64) -> Option<(u64, u64)> {
        let (index, _) = self.find(address, 1).ok()?;
        let allocation = &self.allocations[index];
        Some((allocation.base, allocation.bytes.len() as u64))
    }

    pub fn write(&mut self, address: u64, data: &[u8]) -> Result<(), MemoryError> {
        let (index, offset) = self.locate(address, data.len() as u64)?;
        self.allocations[index].bytes[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    pub fn read(&self, address: u64, len: u64) -> Result<Vec<u8>, MemoryError> {
        Ok(self.bytes(address, len)?.to_vec())
    }

    /// Allocates room for `values` and writes them: the new allocation's address.
    pub fn upload<T: Element>(&mut self, values: &[T]) -> Result<u64, MemoryError> {
        let address = self.alloc((values.len() * T::BYTES) as u64, T::BYTES as u64)?;
        let mut data = Vec::with_capacity(values.len() * T::BYTES);
        for value in values {
            value.append_le(&mut data);
        }
        self.write(address, &data)?;
        Ok(address)
    }

    /// `count` elements of type `T` at `address`.
    pub fn download<T: Element>(&self, address: u64, count: usize) -> Result<Vec<T>, MemoryError> {
        let bytes = self.bytes(address, (count * T::BYTES) as u64)?;
        Ok(bytes.chunks_exact(T::BYTES).map(T::from_le).collect())
    }

    fn bytes(&self, address: u64, len: u64) -> Result<&[u8], MemoryError> {
        let (index, offset) = self.find(address, len)?;
        Ok(&self.allocations[index].bytes[offset..offset + len as usize])
    }

    /// The allocation holding all of `[address, address + len)` and the offset in it.
    fn find(&self, address: u64, len: u64) -> Result<(usize, usize), MemoryError> {
        let fits = |a: &Allocation| {
            address >= a.base && address.checked_add(len).is_some_and(|end| end <= a.base + a.bytes.len() as u64)
        };
        if let Some(hit) = self.allocations.get(self.last_hit) {
            if fits(hit) {
                return Ok((self.last_hit, (address - hit.base) as usize));
            }
        }
        let after = self.allocations.partition_point(|a| a.base <= address);
        let index = after.checked_sub(1).ok_or(MemoryError::OutOfBounds { address, len })?;
        let allocation = &self.allocations[index];
        if !fits(allocation) {
            return Err(MemoryError::OutOfBounds { address, len });
        }
        Ok((index, (address - allocation.base) as usize))
    }

    /// `find`, remembering the allocation for the next access.
    #[inline]
    pub(crate) fn locate(&mut self, address: u64, len: u64) -> Result<(usize, usize), MemoryError> {
        let found = self.find(address, len)?;
        self.last_hit = found.0;
        Ok(found)
    }

    /// The bytes of allocation `index` (from `locate`).
    #[inline]
    pub(crate) fn allocation_mut(&mut self, index: usize) -> &mut [u8] {
        &mut self.allocations[index].bytes
    }

    pub(crate) fn allocation_count(&self) -> usize {
        self.allocations.len()
    }

    pub(crate) fn allocation_len(&self, index: usize) -> usize {
        self.allocations[index].bytes.len()
    }
}

/// A value `upload` and `download` move: little-endian, as on the device.
pub trait Element: Copy {
    const BYTES: usize;
    fn append_le(self, out: &mut Vec<u8>);
    fn from_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            fn append_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_le(bytes: &[u8]) -> Self {
                let mut array = [0u8; std::mem::size_of::<$t>()];
                array.copy_from_slice(bytes);
                <$t>::from_le_bytes(array)
            }
        }
    )*};
}

element!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_apart_and_bounded() {
        let mut memory = Memory::new();
        let a = memory.alloc(10, 4).unwrap();
        let b = memory.alloc(0, 1).unwrap();
        let c = memory.alloc(16, 4096).unwrap();
        assert!(a != 0 && a.is_multiple_of(256) && c.is_multiple_of(4096));
        assert!(b >= a + 10 + GUARD_BYTES && c > b);
        memory.write(a, &[1; 10]).unwrap();
        assert_eq!(memory.read(a + 9, 1).unwrap(), vec![1]);
        assert!(memory.read(a + 9, 2).is_err()); // straddles the end
        assert!(memory.read(b, 1).is_err()); // an empty allocation
        assert!(memory.read(a - 1, 1).is_err());
        assert!(memory.read(u64::MAX, 2).is_err());
        assert!(memory.alloc(u64::MAX - 10, 1).is_err());
        let values = memory.upload(&[1.5f32, -2.0]).unwrap();
        assert_eq!(memory.download::<f32>(values, 2).unwrap(), vec![1.5, -2.0]);
    }

    #[test]
    fn freed_memory_is_gone_and_never_reused() {
        let mut memory = Memory::new();
        let a = memory.alloc(16, 4).unwrap();
        let b = memory.alloc(8, 4).unwrap();
        assert_eq!(memory.allocation(a + 15), Some((a, 16)));
        assert_eq!(memory.allocation(a + 16), None);
        assert_eq!(memory.free(a + 4), Err(MemoryError::NotAllocated { address: a + 4 }));
        assert_eq!(memory.free(b), Ok(8));
        assert_eq!(memory.free(b), Err(MemoryError::NotAllocated { address: b }));
        assert!(memory.read(b, 1).is_err());
        assert_eq!(memory.allocation(b), None);
        let c = memory.alloc(8, 4).unwrap();
        assert!(c > b, "a freed address came back");
        memory.write(a, &[7; 16]).unwrap();
        assert_eq!(memory.read(a, 16).unwrap(), vec![7; 16]);
    }
}
