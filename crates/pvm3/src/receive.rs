//! pvm_recv, pvm_nrecv, pvm_trecv and pvm_probe, with message handlers.
//! With no handler registered a receive is one call into the task. With
//! handlers, every queued message matching one is first taken out and
//! given to its handler (`drain_handlers`), then the caller's receive
//! runs; a message it returns that belongs to a handler goes to the
//! handler and the receive goes on; and before the caller's message is
//! returned the queue is drained again, so a handler message that arrived
//! before it (say in another context) has run first, as it would have in
//! libpvm, which runs handlers on arrival.
//!
//! Limits: a handler whose context is -1 only sees messages in the
//! current context here; and a blocked receive runs handlers for messages
//! of other contexts only once it returns.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use openvia_pvm::task::Wait;

use crate::handlers::{self, Handler};
use crate::{code, with};

/// How long a receive may still wait, kept as a deadline so that handler
/// calls in between do not extend it.
#[derive(Clone, Copy)]
enum Until {
    Forever,
    Now,
    At(Instant),
}

impl Until {
    fn wait(self) -> Wait {
        match self {
            Until::Forever => Wait::Forever,
            Until::Now => Wait::Never,
            Until::At(d) => Wait::For(d.saturating_duration_since(Instant::now())),
        }
    }
}

/// Calls a handler on message `id` with no lock held, then frees the
/// message if the handler did not.
fn run_handler(name: &str, id: c_int, h: Handler) {
    // SAFETY: the program registered `f` as `int f(int)` with pvm_addmhf.
    unsafe { (h.f)(id) };
    let _ = with(name, |t| {
        if t.bufs.get(id).is_ok() {
            let _ = t.freebuf(id);
        }
        Ok(())
    });
}

/// Hands every queued message that matches a handler to that handler.
fn drain_handlers(name: &str) -> Result<(), c_int> {
    loop {
        let next = with(name, |t| {
            // Task::recv frees the receive buffer; the caller's stays.
            let callers_rbuf = std::mem::replace(&mut t.rbuf, 0);
            let callers_ctx = t.ctx;
            let mut found = Ok(None);
            for h in handlers::snapshot() {
                if h.ctx != -1 {
                    t.ctx = h.ctx;
                }
                let r = t.recv(h.src, h.tag, Wait::Never);
                t.ctx = callers_ctx;
                match r {
                    Ok(0) => continue,
                    Ok(id) => found = Ok(Some((id, h))),
                    Err(e) => found = Err(e),
                }
                break;
            }
            t.rbuf = callers_rbuf;
            found
        })?;
        match next {
            Some((id, h)) => run_handler(name, id, h),
            None => return Ok(()),
        }
    }
}

enum Got {
    Callers(c_int),
    Handlers(c_int, Handler),
}

fn receive(name: &str, src: c_int, tag: c_int, until: Until) -> c_int {
    if !handlers::any() {
        return code(name, |t| t.recv(src, tag, until.wait()));
    }
    loop {
        if let Err(c) = drain_handlers(name) {
            return c;
        }
        let got = with(name, |t| {
            let id = t.recv(src, tag, until.wait())?;
            if id > 0 {
                let b = t.bufs.get(id)?;
                if let Some(h) = handlers::for_message(b.src, b.tag, b.ctx) {
                    t.rbuf = 0;
                    return Ok(Got::Handlers(id, h));
                }
            }
            Ok(Got::Callers(id))
        });
        match got {
            Err(c) => return c,
            Ok(Got::Handlers(id, h)) => run_handler(name, id, h),
            Ok(Got::Callers(id)) => {
                if id > 0 {
                    let _ = drain_handlers(name);
                }
                return id;
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn pvm_recv(src: c_int, tag: c_int) -> c_int {
    receive("pvm_recv", src, tag, Until::Forever)
}

#[no_mangle]
pub extern "C" fn pvm_nrecv(src: c_int, tag: c_int) -> c_int {
    receive("pvm_nrecv", src, tag, Until::Now)
}

#[no_mangle]
pub unsafe extern "C" fn pvm_trecv(src: c_int, tag: c_int, tmout: *mut libc::timeval) -> c_int {
    let until = if tmout.is_null() {
        Until::Forever
    } else {
        // SAFETY: caller's timeval.
        let tv = unsafe { *tmout };
        let d = Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64);
        Until::At(Instant::now() + d)
    };
    receive("pvm_trecv", src, tag, until)
}

#[no_mangle]
pub extern "C" fn pvm_probe(src: c_int, tag: c_int) -> c_int {
    if handlers::any() {
        if let Err(c) = drain_handlers("pvm_probe") {
            return c;
        }
    }
    code("pvm_probe", |t| t.probe(src, tag))
}

/// pvm_precv's hook: handler messages already queued go first.
pub(crate) fn before_receive(name: &str) -> Result<(), c_int> {
    if handlers::any() {
        drain_handlers(name)
    } else {
        Ok(())
    }
}
