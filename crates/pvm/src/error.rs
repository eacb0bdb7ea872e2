//! PVM error codes as a Rust enum: every libpvm call returns one of these as
//! a negative int, so the enum carries the exact values of pvm3.h.

/// A libpvm error, convertible to the negative code C callers see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[repr(i32)]
pub enum PvmError {
    #[error("Bad parameter")]
    BadParam = -2,
    #[error("Parameter mismatch")]
    Mismatch = -3,
    #[error("Value too large")]
    Overflow = -4,
    #[error("End of buffer")]
    NoData = -5,
    #[error("No such host")]
    NoHost = -6,
    #[error("No such file")]
    NoFile = -7,
    #[error("Permission denied")]
    Denied = -8,
    #[error("Malloc failed")]
    NoMem = -10,
    #[error("Can't decode message")]
    BadMsg = -12,
    #[error("Can't contact local daemon")]
    SysErr = -14,
    #[error("No current buffer")]
    NoBuf = -15,
    #[error("No such buffer")]
    NoSuchBuf = -16,
    #[error("Null group name")]
    NullGroup = -17,
    #[error("Already in group")]
    DupGroup = -18,
    #[error("No such group")]
    NoGroup = -19,
    #[error("Not in group")]
    NotInGroup = -20,
    #[error("No such instance")]
    NoInst = -21,
    #[error("Host failed")]
    HostFail = -22,
    #[error("No parent task")]
    NoParent = -23,
    #[error("Not implemented")]
    NotImpl = -24,
    #[error("Pvmd system error")]
    DSysErr = -25,
    #[error("Version mismatch")]
    BadVersion = -26,
    #[error("Out of resources")]
    OutOfRes = -27,
    #[error("Duplicate host")]
    DupHost = -28,
    #[error("Can't start pvmd")]
    CantStart = -29,
    #[error("Already in progress")]
    Already = -30,
    #[error("No such task")]
    NoTask = -31,
    #[error("Not Found")]
    NotFound = -32,
    #[error("Already exists")]
    Exists = -33,
    #[error("Hoster run on non-master host")]
    HostrNMstr = -34,
    #[error("Spawning parent set PvmNoSpawnParent")]
    ParentNotSet = -35,
    #[error("Master Host IP is Loopback")]
    IpLoopback = -36,
}

/// Every error, in code order, for lookups from an int.
pub const ALL: [PvmError; 33] = [
    PvmError::BadParam,
    PvmError::Mismatch,
    PvmError::Overflow,
    PvmError::NoData,
    PvmError::NoHost,
    PvmError::NoFile,
    PvmError::Denied,
    PvmError::NoMem,
    PvmError::BadMsg,
    PvmError::SysErr,
    PvmError::NoBuf,
    PvmError::NoSuchBuf,
    PvmError::NullGroup,
    PvmError::DupGroup,
    PvmError::NoGroup,
    PvmError::NotInGroup,
    PvmError::NoInst,
    PvmError::HostFail,
    PvmError::NoParent,
    PvmError::NotImpl,
    PvmError::DSysErr,
    PvmError::BadVersion,
    PvmError::OutOfRes,
    PvmError::DupHost,
    PvmError::CantStart,
    PvmError::Already,
    PvmError::NoTask,
    PvmError::NotFound,
    PvmError::Exists,
    PvmError::HostrNMstr,
    PvmError::ParentNotSet,
    PvmError::IpLoopback,
    PvmError::DSysErr,
];

impl PvmError {
    /// The code as C sees it.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The error for a negative code, if it is one of PVM's.
    pub fn from_code(code: i32) -> Option<PvmError> {
        ALL.iter().copied().find(|e| e.code() == code)
    }
}

/// Result of a libpvm operation.
pub type PvmResult<T> = Result<T, PvmError>;

/// Text for any code, as pvm_perror prints it.
pub fn describe(code: i32) -> String {
    match code {
        0 => "Ok".to_string(),
        c => PvmError::from_code(c)
            .map(|e| e.to_string())
            .unwrap_or_else(|| format!("Unknown error {c}")),
    }
}
