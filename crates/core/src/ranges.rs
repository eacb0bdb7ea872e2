//! Gather and scatter over lists of validated memory ranges of this process.
//!
//! Descriptors name their buffers as (address, length) segments; these
//! helpers copy a byte stream into or out of such a list at an offset, so a
//! message can arrive or leave in chunks.

pub use crate::sys::cma::Range;

/// Copies `data` into `ranges`, starting `offset` bytes into the list.
/// Bytes that would fall past the end are not written.
///
/// # Safety
/// Every range must be writable memory of this process (validated against
/// the memory registry) that nothing else writes concurrently.
#[inline]
pub unsafe fn scatter(ranges: &[Range], mut offset: u64, mut data: &[u8]) {
    for r in ranges {
        if data.is_empty() {
            return;
        }
        if offset >= r.len {
            offset -= r.len;
            continue;
        }
        let n = ((r.len - offset) as usize).min(data.len());
        // SAFETY: the caller guarantees the range is writable; `offset + n`
        // stays within it.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (r.addr + offset) as usize as *mut u8, n)
        };
        data = &data[n..];
        offset = 0;
    }
}

/// Copies `out.len()` bytes out of `ranges`, starting `offset` bytes in.
/// Returns how many bytes were available.
///
/// # Safety
/// Every range must be readable memory of this process.
#[inline]
pub unsafe fn gather(ranges: &[Range], offset: u64, out: &mut [u8]) -> usize {
    // SAFETY: `out` is `out.len()` writable bytes; the ranges are the
    // caller's promise.
    unsafe { gather_raw(ranges, offset, out.as_mut_ptr(), out.len()) }
}

/// As [`gather`], into `len` bytes at `out`, which need not be
/// initialized (a buffer about to be filled need not be zeroed first).
///
/// # Safety
/// Every range must be readable memory of this process, and `out` valid
/// for writes of `len` bytes that overlap none of the ranges.
#[inline]
pub unsafe fn gather_raw(ranges: &[Range], mut offset: u64, out: *mut u8, len: usize) -> usize {
    let mut done = 0;
    for r in ranges {
        if done == len {
            break;
        }
        if offset >= r.len {
            offset -= r.len;
            continue;
        }
        let n = ((r.len - offset) as usize).min(len - done);
        // SAFETY: the caller guarantees the range is readable; `offset + n`
        // stays within it and `out[done..done+n]` is writable.
        unsafe {
            std::ptr::copy_nonoverlapping((r.addr + offset) as usize as *const u8, out.add(done), n)
        };
        done += n;
        offset = 0;
    }
    done
}

/// Total bytes of a range list.
pub fn total(ranges: &[Range]) -> u64 {
    ranges.iter().map(|r| r.len).sum()
}

/// The sub-list covering bytes [offset, offset+len) of `ranges`.
pub fn slice(ranges: &[Range], mut offset: u64, mut len: u64) -> Vec<Range> {
    let mut out = Vec::new();
    for r in ranges {
        if len == 0 {
            break;
        }
        if offset >= r.len {
            offset -= r.len;
            continue;
        }
        let n = (r.len - offset).min(len);
        out.push(Range {
            addr: r.addr + offset,
            len: n,
        });
        len -= n;
        offset = 0;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_gather_at_offsets() {
        let mut a = [0u8; 5];
        let mut b = [0u8; 7];
        let ranges = [
            Range {
                addr: a.as_mut_ptr() as u64,
                len: 5,
            },
            Range {
                addr: b.as_mut_ptr() as u64,
                len: 7,
            },
        ];
        // SAFETY: the ranges are our local arrays.
        unsafe {
            scatter(&ranges, 3, &[1, 2, 3, 4]);
            scatter(&ranges, 10, &[9, 9, 9, 9]);
        }
        assert_eq!(a, [0, 0, 0, 1, 2]);
        assert_eq!(b, [3, 4, 0, 0, 0, 9, 9]);
        let mut out = [0u8; 6];
        // SAFETY: as above.
        let n = unsafe { gather(&ranges, 3, &mut out) };
        assert_eq!(n, 6);
        assert_eq!(out, [1, 2, 3, 4, 0, 0]);
        let s = slice(&ranges, 4, 3);
        assert_eq!(total(&s), 3);
        assert_eq!(s[0].addr, ranges[0].addr + 4);
    }
}
