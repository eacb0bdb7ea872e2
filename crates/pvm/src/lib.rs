//! PVM 3 on openvia: the pvmd daemon, the task-side library logic behind
//! libpvm3.so.3 and the `pvm` console, message encodings and the EPVM
//! global page pool.

pub mod codec;
pub mod console;
pub mod daemon;
pub mod error;
pub mod fdpass;
pub mod frame;
pub mod hostfile;
pub mod link;
pub mod paths;
pub mod pool;
pub mod private;
pub mod spin;
pub mod task;
pub mod tid;
pub mod trace;

pub use error::{PvmError, PvmResult};
