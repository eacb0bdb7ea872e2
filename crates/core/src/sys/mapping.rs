//! Shared memory that leaves no name behind: an anonymous memfd, mapped
//! MAP_SHARED, whose file descriptor is handed to the peer over a Unix
//! socket. When the last process holding it exits (however it exits) the
//! kernel frees it; nothing ever appears in /dev/shm. A mapping whose
//! descriptor will not be handed on closes it (`close_fd`): the mapping
//! alone keeps the memory, and a process with hundreds of connections
//! would otherwise hold hundreds of descriptors the program may need.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::cvt;

/// A MAP_SHARED mapping of a memfd.
pub struct SharedMapping {
    ptr: *mut u8,
    len: usize,
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is plain memory; all concurrent access to it goes
// through atomics or is ordered by them (see the ring and region modules).
unsafe impl Send for SharedMapping {}
// SAFETY: as above.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Creates a zero-filled memfd of `len` bytes and maps it.
    pub fn create(name: &str, len: usize) -> io::Result<Self> {
        let cname = std::ffi::CString::new(name).unwrap_or_default();
        // SAFETY: `cname` is a valid C string; flags are constants.
        let fd = cvt(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) })?;
        // SAFETY: memfd_create returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is a valid memfd.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        Self::map(fd, len)
    }

    /// Maps a memfd received from a peer; its size must be at least `len`.
    pub fn map(fd: OwnedFd, len: usize) -> io::Result<Self> {
        // SAFETY: fstat writes into a zeroed stat struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is valid and `st` is a valid out-pointer.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if (st.st_size as u64) < len as u64 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shared region smaller than announced",
            ));
        }
        // SAFETY: mapping a valid fd for `len` bytes; the kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ptr: ptr.cast(),
            len,
            fd: Some(fd),
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, unless closed (`close_fd`).
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// Closes the memfd: the mapping stays, nothing can hand it on.
    pub fn close_fd(&mut self) {
        self.fd = None;
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
