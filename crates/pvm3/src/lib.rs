//! libpvm3.so.3: the PVM 3.4.6 C ABI over openvia. (work in progress)
