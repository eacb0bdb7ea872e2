//! Cross-memory attach: one copy between two processes' address spaces
//! (process_vm_readv / process_vm_writev). The kernel may refuse it (ptrace
//! policy, another user), so callers detect support at run time.

use std::io;

/// One contiguous range of memory, in this or in the peer's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub addr: u64,
    pub len: u64,
}

fn to_iovecs(ranges: &[Range]) -> Vec<libc::iovec> {
    ranges
        .iter()
        .filter(|r| r.len > 0)
        .map(|r| libc::iovec {
            iov_base: r.addr as usize as *mut libc::c_void,
            iov_len: r.len as usize,
        })
        .collect()
}

/// Skips `done` bytes of an iovec list (after a partial transfer).
fn advance(iov: &mut Vec<libc::iovec>, mut done: usize) {
    let mut drop_n = 0;
    for v in iov.iter_mut() {
        if done == 0 {
            break;
        }
        if done >= v.iov_len {
            done -= v.iov_len;
            drop_n += 1;
        } else {
            // SAFETY: `done < iov_len`, so the advanced pointer stays inside the range.
            v.iov_base = unsafe { (v.iov_base as *mut u8).add(done) }.cast();
            v.iov_len -= done;
            done = 0;
        }
    }
    iov.drain(..drop_n);
}

fn transfer(pid: i32, local: &[Range], remote: &[Range], write: bool) -> io::Result<u64> {
    let mut l = to_iovecs(local);
    let mut r = to_iovecs(remote);
    let want: u64 = local
        .iter()
        .map(|x| x.len)
        .sum::<u64>()
        .min(remote.iter().map(|x| x.len).sum());
    let mut total = 0u64;
    while total < want {
        let lcount = l.len().min(1024);
        let rcount = r.len().min(1024);
        // SAFETY: the iovecs describe memory the caller vouches for: `local`
        // ranges are ours (validated registered memory), `remote` ranges are in
        // the peer's address space, which the kernel checks itself.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, l.as_ptr(), lcount as _, r.as_ptr(), rcount as _, 0)
            } else {
                libc::process_vm_readv(pid, l.as_ptr(), lcount as _, r.as_ptr(), rcount as _, 0)
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        total += n as u64;
        advance(&mut l, n as usize);
        advance(&mut r, n as usize);
    }
    Ok(total)
}

/// Copies from `remote` ranges of process `pid` into our `local` ranges.
pub fn read_from(pid: i32, local: &[Range], remote: &[Range]) -> io::Result<u64> {
    transfer(pid, local, remote, false)
}

/// Copies from our `local` ranges into `remote` ranges of process `pid`.
pub fn write_to(pid: i32, local: &[Range], remote: &[Range]) -> io::Result<u64> {
    transfer(pid, local, remote, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_own_process_scatter_gather() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let mut a = vec![0u8; 3333];
        let mut b = vec![0u8; 10_000 - 3333];
        let local = [
            Range {
                addr: a.as_mut_ptr() as u64,
                len: a.len() as u64,
            },
            Range {
                addr: b.as_mut_ptr() as u64,
                len: b.len() as u64,
            },
        ];
        let remote = [
            Range {
                addr: src.as_ptr() as u64,
                len: 5000,
            },
            Range {
                addr: src.as_ptr() as u64 + 5000,
                len: 5000,
            },
        ];
        match read_from(crate::sys::pid(), &local, &remote) {
            Ok(n) => {
                assert_eq!(n, 10_000);
                let mut joined = a.clone();
                joined.extend_from_slice(&b);
                assert_eq!(joined, src);
            }
            // A kernel that refuses CMA even to ourselves: nothing to check.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
        }
    }
}
